"""What is in a checkpoint, and what the zoo resolves to: ``zoorank inspect`` and ``zoorank zoo``.

Both only read: no network is built for ``inspect``, and ``zoo`` builds each architecture on the
meta device (no memory, no weights) to count its parameters. Both say whether a classifier head
was found and its number of classes: ``inspect`` from the tensor names (a 2-D ``fc``, ``head``,
``head.fc``, ``classifier`` or ``last_linear`` weight, the last one), ``zoo`` as EMBED decides it
(:func:`head_classes`).
"""

from __future__ import annotations

import contextlib
import re
from collections import Counter
from collections.abc import Mapping
from dataclasses import dataclass, field
from typing import Any

import torch

from zoorank.store import uris
from zoorank.zoo.checkpoints import (
    AUTO_STATE_DICT_KEYS,
    PREFIX_PRESETS,
    CheckpointError,
    _flatten,
    _is_tensor_dict,
    load_checkpoint_object,
    select_prefix,
)

_SHOWN_TENSORS = 40


@dataclass
class CheckpointReport:
    """A checkpoint's layout: how it loads, where its state dict is, which prefixes it holds."""

    path: str
    loader: str  # "safetensors" | "weights_only" | "restricted" | "refused"
    refused: str | None = None
    metadata: list[str] = field(default_factory=list)  # globals that block weights_only
    entries: list[tuple[str, str]] = field(default_factory=list)  # top-level key, what it holds
    state_dict_entry: str | None = None  # dotted key of the auto-detected state dict ("" = top)
    tensors: list[tuple[str, tuple[int, ...], str]] = field(default_factory=list)
    prefixes: list[tuple[str, int]] = field(default_factory=list)
    presets: dict[str, str] = field(default_factory=dict)  # preset → the prefix it would use
    selected: tuple[str, int] | None = None  # (prefix, tensors) of a requested state_dict_prefix
    classifier: tuple[str, int] | None = None  # (weight key, classes) of the head found, if any
    #: without a classifier found by name: (weight key, rows) of the last 2-D weight
    last_linear: tuple[str, int] | None = None


#: weight names of an SSL projection or prediction head (never a classifier).
_PROJECTOR = re.compile(r"(^|\.)(projector|projection|projection_head|proj|predictor|prototypes)"
                        r"(\.|$)")
#: weight names of classifier heads (timm's ``pretrained_cfg["classifier"]`` of common families).
_CLASSIFIER_WEIGHT = re.compile(r"(^|\.)(fc|head|head\.fc|classifier|last_linear)\.weight$")


def find_classifier(tensors: list[tuple[str, tuple[int, ...], str]]) -> tuple[str, int] | None:
    """(key, classes) of the last 2-D classifier weight among (name, shape, dtype) rows."""
    found = [(k, shape[0]) for k, shape, _ in tensors
             if len(shape) == 2 and _CLASSIFIER_WEIGHT.search(k)]
    return found[-1] if found else None


def _describe(value: Any) -> str:
    if isinstance(value, torch.Tensor):
        return f"tensor {tuple(value.shape)} {str(value.dtype).removeprefix('torch.')}"
    if isinstance(value, Mapping):
        tensors = sum(isinstance(v, torch.Tensor) for v in value.values())
        return f"mapping of {len(value)}" + (f" ({tensors} tensors)" if tensors else "")
    if isinstance(value, (list, tuple)):
        return f"{type(value).__name__} of {len(value)}"
    text = repr(value)
    return text if len(text) <= 60 else text[:57] + "..."


def _locate(obj: Any, depth: int = 0) -> tuple[str, dict[str, torch.Tensor]] | None:
    """(dotted entry, state dict) as :func:`zoorank.zoo.checkpoints.read_checkpoint` finds it."""
    if _is_tensor_dict(obj):
        return "", dict(obj)
    if isinstance(obj, Mapping) and depth < 3:
        for key in AUTO_STATE_DICT_KEYS:
            if key in obj:
                found = _locate(obj[key], depth + 1)
                if found is not None:
                    return (f"{key}.{found[0]}" if found[0] else key), found[1]
    return None


def _prefix_counts(keys: list[str], levels: int = 3) -> list[tuple[str, int]]:
    counts: Counter[str] = Counter()
    for key in keys:
        parts = key.split(".")
        for n in range(1, min(levels, len(parts) - 1) + 1):
            counts[".".join(parts[:n]) + "."] += 1
    return sorted(counts.items())


def inspect_checkpoint(
    path: str, *, state_dict_key: str | None = None, state_dict_prefix: str | None = None
) -> CheckpointReport:
    """Read a checkpoint safely (never executing anything from it) and describe its layout."""
    met: set[str] = set()
    try:
        obj = load_checkpoint_object(path, met=met)
    except CheckpointError as err:
        if "unsafe pickle refused" not in str(err):
            raise
        name = str(err).split("the global ", 1)[1].split(")", 1)[0]
        return CheckpointReport(path, "refused", refused=name)
    loader = ("safetensors" if path.endswith(".safetensors")
              else "restricted" if met else "weights_only")
    report = CheckpointReport(path, loader, metadata=sorted(met))
    if isinstance(obj, Mapping):
        report.entries = [(str(k), _describe(v)) for k, v in obj.items()]
    found = _locate(obj)
    state = found[1] if found else _flatten(obj)
    report.state_dict_entry = found[0] if found else None
    report.tensors = [(k, tuple(v.shape), str(v.dtype).removeprefix("torch."))
                      for k, v in state.items()]
    report.prefixes = _prefix_counts(list(state) if found else list(_flatten(obj)))
    report.classifier = find_classifier(report.tensors)
    if report.classifier is None:
        linear = [(k, shape[0]) for k, shape, _ in report.tensors
                  if len(shape) == 2 and k.endswith(".weight")]
        # a projector's (SSL) or predictor's weight is no classifier: no hint for it
        report.last_linear = linear[-1] if linear and not _PROJECTOR.search(linear[-1][0]) \
            else None
    for preset in PREFIX_PRESETS:
        with contextlib.suppress(CheckpointError):
            report.presets[preset] = select_prefix(obj, preset, state_dict_key, path)[0]
    if state_dict_prefix:
        prefix, selected = select_prefix(obj, state_dict_prefix, state_dict_key, path)
        report.selected = (prefix, len(selected))
    return report


def format_checkpoint_report(report: CheckpointReport, *, all_tensors: bool = False) -> str:
    lines = [f"checkpoint: {uris.redact(report.path)}"]
    if report.loader == "refused":
        lines.append(f"loader: refused — it needs the global {report.refused}, which would run "
                     "code from the file (trust_checkpoint: true only for a file you trust)")
        return "\n".join(lines)
    lines.append(f"loader: {report.loader}")
    if report.metadata:
        lines.append("metadata that blocks torch.load(weights_only=True) (read as inert "
                     f"placeholders): {', '.join(report.metadata)}")
    if report.entries:
        lines.append("entries:")
        lines += [f"  {key}: {what}" for key, what in report.entries]
    entry = report.state_dict_entry
    lines.append("state dict: " + ("the top level" if entry == "" else repr(entry) if entry
                                   else "none found; the whole checkpoint, flattened"))
    if report.prefixes:
        lines.append("key prefixes (tensors):")
        lines += [f"  {p}  {n}" for p, n in report.prefixes]
    if report.presets:
        lines.append("state_dict_prefix presets that apply: " + ", ".join(
            f"{name} → {prefix!r}" for name, prefix in report.presets.items()))
    if report.selected:
        lines.append(f"state_dict_prefix selects {report.selected[1]} tensors under "
                     f"{report.selected[0]!r}")
    lines.append("classifier head: " + (f"{report.classifier[0]} → {report.classifier[1]} classes"
                                        if report.classifier else "none found by name"))
    if report.last_linear:
        key, rows = report.last_linear
        path = key.removesuffix(".weight")
        prefix = next(iter(report.presets.values()), "") if report.presets else ""
        lines.append(f"  the last 2-D weight is {key} ({rows} rows): if it is the classifier, a "
                     f"python model names it with head: {path.removeprefix(prefix)}")
    shown = report.tensors if all_tensors else report.tensors[:_SHOWN_TENSORS]
    lines.append(f"tensors ({len(report.tensors)}):")
    lines += [f"  {name}  {list(shape)}  {dtype}" for name, shape, dtype in shown]
    if len(shown) < len(report.tensors):
        lines.append(f"  ... (+{len(report.tensors) - len(shown)} more; --all lists them)")
    return "\n".join(lines)


def head_classes(resolved: Any) -> tuple[str, int | None]:
    """(how the head is run or why there is none, its number of classes) as EMBED will find it.

    Reads what it needs and builds nothing with weights: timm's classifier rows in the checkpoint
    (or ``model_kwargs``, or the hub weights' config), a transformers config's ``num_labels``, a
    python factory built on the meta device. A torchscript head (``head: true``) declares its
    width only in its output: classes None.
    """
    from zoorank.zoo import sources
    from zoorank.zoo.label_space import heads_wanted

    spec = resolved.spec
    source = sources.get(spec.source)
    if not heads_wanted(spec):
        return ("off (head: false)" if spec.head is False else source.headless_text), 0
    return source.head_classes(resolved)


def _head_line(resolved: Any) -> str:
    if getattr(resolved, "unreadable", None):
        return "unknown (checkpoint unreadable)"
    try:
        kind, classes = head_classes(resolved)
    except Exception as err:  # noqa: BLE001 - the listing goes on; EMBED reports the failure
        return f"unknown ({type(err).__name__}: {str(err).splitlines()[0] if str(err) else ''})"
    if not classes and classes is not None:
        return kind
    return f"{kind}, " + (f"{classes} classes" if classes else "classes known after a forward")


def describe_zoo(models: list[Any]) -> str:
    """One block per resolved model: id, source, weights, fingerprint, preprocessing, parameters."""
    from zoorank.zoo import sources
    from zoorank.zoo.memory import count_parameters
    from zoorank.zoo.preprocessing import describe_preprocessing

    lines = [f"{len(models)} model(s)"]
    for m in models:
        spec = m.spec
        weights = (f"pretrained {m.weights_revision}" if m.weights_revision
                   else uris.redact(spec.checkpoint) if spec.checkpoint
                   else "seeded random init" if sources.get(spec.source).seeded_init
                   else spec.name)
        params = count_parameters(m) if not getattr(m, "unreadable", None) else None
        if getattr(m, "unreadable", None):
            weights += f" ({m.unreadable})"
        extras = [f"group {m.group}"] if m.group else []
        extras += [f"family {m.family}"] if m.family else []
        extras += [f"datasets {', '.join(m.datasets)}"] if m.datasets is not None else []
        lines += [
            f"{m.model_id}",
            f"  source: {spec.source} {spec.name}" + (f" [{'; '.join(extras)}]" if extras else ""),
            f"  weights: {weights}",
            f"  fingerprint: {m.fingerprint}",
            f"  input: {describe_preprocessing(m)}",
            "  parameters: " + (f"{params:,}" if params is not None else "unknown"),
            f"  head: {_head_line(m)}",
        ]
    return "\n".join(lines)


def main(args: Any) -> int:
    """``zoorank zoo CONFIG`` and ``zoorank inspect CHECKPOINT`` (parsed by :mod:`zoorank.cli`)."""
    if args.command == "inspect":
        report = inspect_checkpoint(args.checkpoint, state_dict_prefix=args.prefix)
        print(format_checkpoint_report(report, all_tensors=args.all))
        return 0
    from zoorank.config.loading import load_config
    from zoorank.zoo.resolve import resolve_models

    print(describe_zoo(resolve_models(load_config(args.config, store=args.store))))
    return 0
