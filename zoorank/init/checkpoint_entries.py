"""``zoorank init``'s checkpoint entries: files alike as one glob, their layout (preset), head and
timm architecture (kept only once the first checkpoint loads into it strictly)."""

from __future__ import annotations

import re
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from zoorank.errors import ConfigError

#: metadata keys whose string values name an architecture more often than others.
_ARCH_KEYS = ("arch", "architecture", "backbone", "model", "model_name", "encoder", "net", "name")


def glob_for(files: list[Path], root: Path) -> str:
    """A glob (relative to ``root``) that names ``files``: path parts they share kept, the others
    ``*`` (a file name ``*<suffix>``); files at different depths: ``<shared>/**/*<suffix>``."""
    parts = [f.relative_to(root).parts for f in files]
    suffix = files[0].suffix
    if len({len(p) for p in parts}) > 1:
        shared = []
        for column in zip(*parts):
            if len(set(column)) > 1:
                break
            shared.append(column[0])
        shared = shared[: min(len(p) for p in parts) - 1]
        return "/".join([*shared, "**", f"*{suffix}"])
    out = []
    for i, column in enumerate(zip(*parts)):
        last = i == len(parts[0]) - 1
        out.append(column[0] if len(set(column)) == 1 else (f"*{suffix}" if last else "*"))
    return "/".join(out)


def _signature(path: Path) -> Any:
    """What tells checkpoints of one kind apart: their tensors' names and shapes."""
    from zoorank.zoo.inspect import inspect_checkpoint

    try:
        report = inspect_checkpoint(str(path))
    except Exception as err:  # noqa: BLE001 - an unreadable file is a kind of its own
        return ("unreadable", type(err).__name__)
    return (report.loader, report.state_dict_entry, tuple(report.tensors))


def checkpoint_groups(files: list[Path], root: Path) -> list[list[Path]]:
    """Files alike: one suffix and depth; a group whose first and last files hold different
    tensors is split by its first folder below ``root`` (once)."""
    by_kind: dict[tuple[str, int], list[Path]] = {}
    for f in files:
        by_kind.setdefault((f.suffix.lower(), len(f.relative_to(root).parts)), []).append(f)
    groups = []
    for members in by_kind.values():
        if len(members) > 1 and _signature(members[0]) != _signature(members[-1]):
            split: dict[str, list[Path]] = {}
            for f in members:
                split.setdefault(f.relative_to(root).parts[0], []).append(f)
            groups.extend(split.values())
        else:
            groups.append(members)
    return groups


def _strings(obj: Any, depth: int = 0) -> list[tuple[str, str]]:
    """(key, string value) pairs in a checkpoint's metadata (tensors and deep nests skipped)."""
    if depth > 5:
        return []
    out: list[tuple[str, str]] = []
    if isinstance(obj, dict):
        items = list(obj.items())
    elif isinstance(obj, (list, tuple)):
        items = [("", v) for v in obj[:50]]
    elif hasattr(obj, "__dict__") and not hasattr(obj, "shape"):  # a Namespace's placeholder
        items = list(vars(obj).items())
    else:
        return []
    for key, value in items:
        if isinstance(value, str):
            out.append((str(key), value))
        elif not hasattr(value, "shape"):
            out.extend(_strings(value, depth + 1))
    return out


def _timm_name(text: str) -> str | None:
    import timm

    text = text.strip()
    if not text or len(text) > 80 or "/" in text.removeprefix("hf-hub:timm/"):
        return None
    return text if timm.is_model(text) else None


def arch_candidates(path: Path, root: Path) -> list[str]:
    """timm architectures a checkpoint names: in its metadata (``arch``/``backbone``/... keys
    first), then in its path's parts (``resnet18-lr0.1`` → ``resnet18``), longest first."""
    from zoorank.zoo.checkpoints import load_checkpoint_object

    found: list[str] = []
    try:
        obj = load_checkpoint_object(str(path))
    except Exception:  # noqa: BLE001 - no metadata to read: the path may still tell
        obj = None
    pairs = _strings(obj) if obj is not None and not str(path).endswith(".safetensors") else []
    pairs.sort(key=lambda kv: kv[0].lower() not in _ARCH_KEYS)
    for _, value in pairs:
        name = _timm_name(value)
        if name:
            found.append(name)
    for part in reversed(path.relative_to(root).with_suffix("").parts):
        tokens = re.split(r"[-_.@=+ ]", part)
        spans = sorted(((i, j) for i in range(len(tokens)) for j in range(i + 1, len(tokens) + 1)),
                       key=lambda s: s[0] - s[1])
        for i, j in spans:
            for sep in ("_", "-", "."):
                name = _timm_name(sep.join(tokens[i:j]))
                if name:
                    found.append(name)
    return list(dict.fromkeys(found))


def _loads(spec: dict[str, Any]) -> str | None:
    """None when ``spec`` (one model entry) builds and loads as EMBED would, else why not."""
    from zoorank.config.loading import parse_config
    from zoorank.zoo.build import load_model
    from zoorank.zoo.resolve import resolve_models

    try:
        config = parse_config({"datasets": [{"name": "probe", "source": "sklearn_digits"}],
                               "models": [spec]}, "<zoorank init>")
        (model,) = resolve_models(config)
        load_model(model)
    except Exception as err:  # noqa: BLE001 - the reason is reported in the written file
        return str(err).splitlines()[0] if str(err) else type(err).__name__
    return None


def _what_fits(path: Path, root: Path, arch: str, preset: str | None) -> str:
    """The architecture (or prefix) ``path`` does load into, for ``--arch``'s error."""
    for candidate in [c for c in arch_candidates(path, root) if c != arch][:5]:
        spec = {"source": "timm", "name": candidate, "checkpoint": str(path)}
        if preset:
            spec["state_dict_prefix"] = preset
        if _loads(spec) is None:
            return f"it loads into {candidate} (--arch {candidate})"
    from zoorank.config.loading import parse_config
    from zoorank.zoo.fixes import suggest_fix
    from zoorank.zoo.resolve import resolve_models

    spec = {"source": "timm", "name": arch, "checkpoint": str(path)}
    if preset:
        spec["state_dict_prefix"] = preset
    config = parse_config({"datasets": [{"name": "probe", "source": "sklearn_digits"}],
                           "models": [spec]}, "<zoorank init>")
    fix = suggest_fix(resolve_models(config)[0])
    if fix and fix.startswith("`name: "):
        name = fix.removeprefix("`name: ").split("`", 1)[0]
        return f"it loads into {name} (--arch {name})"
    return ("no architecture tried fits; `zoorank inspect " + str(path) + "` lists its tensors"
            + (f" (the fix found: {fix})" if fix else ""))


@dataclass
class CheckpointEntry:
    """One glob entry and what was found out about it."""

    pattern: str  # relative to the folder scanned
    files: list[Path]
    notes: list[str]
    name: str | None
    state_dict_prefix: str | None
    classes: int | None


def _preset(report: Any) -> str | None:
    """The ``state_dict_prefix`` preset a checkpoint calls for, or None for a plain state dict."""
    presets = report.presets
    if not presets:
        return None
    keys = {k for k, _ in report.entries}
    for preset in ("dino-teacher", "moco"):
        if preset in presets:
            return preset
    if "lightning" in presets and ({"pytorch-lightning_version", "hyper_parameters"} & keys
                                   or "solo-learn" not in presets):
        return "lightning"
    return next(iter(presets))


def describe_checkpoints(files: list[Path], root: Path, arch: str | None) -> CheckpointEntry:
    """The entry of one group: its glob, layout (preset), head and architecture."""
    from zoorank.zoo.inspect import inspect_checkpoint

    first = files[0]
    pattern = glob_for(files, root) if len(files) > 1 else first.relative_to(root).as_posix()
    shown = first.relative_to(root).as_posix()
    notes = [f"{len(files)} checkpoint file(s) like {shown}"]
    try:
        report = inspect_checkpoint(str(first))
    except Exception as err:  # noqa: BLE001
        notes.append(f"TODO: {shown} cannot be read ({str(err).splitlines()[0]})")
        return CheckpointEntry(pattern, files, notes, arch, None, None)
    if report.loader == "refused":
        notes.append(f"TODO: {shown} needs the global {report.refused} to load (code from the "
                     "file); trust_checkpoint: true only for files you trust")
        return CheckpointEntry(pattern, files, notes, arch, None, None)
    preset = _preset(report)
    entry = report.state_dict_entry
    where = ("the top level" if entry == "" else repr(entry) if entry else "the whole checkpoint")
    notes.append(f"layout ({report.loader}): state dict at {where}"
                 + (f"; backbone keys under {report.presets[preset]!r} (preset {preset})"
                    if preset else ""))
    classes = report.classifier[1] if report.classifier else None
    if classes:
        notes.append(f"classifier head: {report.classifier[0]} → {classes} classes (kept)")
    candidates = [arch] if arch else arch_candidates(first, root)
    name, why = None, []
    for candidate in candidates[:5]:
        spec = {"source": "timm", "name": candidate, "checkpoint": str(first)}
        if preset:
            spec["state_dict_prefix"] = preset
        problem = _loads(spec)
        if problem is None:
            name = candidate
            break
        why.append(f"{candidate}: {problem}")
    if arch and name is None:
        raise ConfigError(f"--arch {arch}: {shown} does not load into it ({why[0].split(': ', 1)[1]}"
                          f"); {_what_fits(first, root, arch, preset)}")
    if name:
        notes.append(f"architecture {name}: {shown} loads into it strictly"
                     + (" (--arch)" if arch else ""))
    elif candidates:
        notes.append("TODO: the architecture: tried " + "; ".join(why)[:300])
    else:
        notes.append("TODO: the architecture (not named in the checkpoint or its path): a timm "
                     "name, or source: python with your model's factory; `zoorank inspect "
                     f"{shown}` lists its tensors")
    return CheckpointEntry(pattern, files, notes, name, preset, classes)
