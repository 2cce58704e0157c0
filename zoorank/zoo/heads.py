"""Where a ``python`` model's classifier is: the layouts zoorank finds, and the one a config names.

A python model (``source: python``, a factory returning an ``nn.Module``) keeps its classifier
head the way its author wrote it. Its head is, in this order (``head`` unset or ``true``):

1. ``forward_features`` + ``forward_head`` (timm's convention; no head when ``num_classes`` is 0);
2. a submodule ``head`` (its input is the features, its output the logits), or a *method*
   ``head`` (features → logits);
3. a submodule ``fc`` (torchvision's ResNets), then ``classifier`` (DenseNet, MobileNet, VGG):
   the submodule itself when it is an ``nn.Linear``, else the last ``nn.Linear`` inside it.

``head: NAME`` names it instead: a submodule by its dotted path (``fc``, ``classifier.3``,
``output_net.2``) or a method of the model. Either way the features are the head's input and the
logits its output, from one forward of the model (a forward hook on the submodule, a wrapper
around the method). A head the forward does not call (a ``forward`` that returns the features) is
applied to the forward's pooled output instead: the same single pass through the trunk.

A found head is checked by one forward on the meta device (no memory, no weights; input
``2 × 3 × input_size²``): a submodule must run in that forward and give a 2-D output the forward
returns; a method must either do that or take the forward's pooled output. The first candidate
that passes is the head. A named head must run or take the output, else it is a config error that
lists the model's ``nn.Linear`` submodules. Where the model cannot be built or run on the meta
device, the check happens on the worker with one real forward of a zero input instead.

Costs: one meta-device build and forward per distinct (factory, kwargs, head, input size) on the
driver (cached per process); nothing per image.
"""

from __future__ import annotations

import difflib
import inspect as _inspect
import json
from collections.abc import Callable, Iterable, Mapping
from dataclasses import dataclass, field
from functools import lru_cache
from typing import Any, Literal

import torch
from torch import nn

#: submodule or method names looked for, in this order, after timm's convention.
AUTO_NAMES = ("head", "fc", "classifier")
#: at most this many Linear submodules are named in a message.
_SHOWN = 8


class HeadNameError(ValueError):
    """``head:`` names nothing the model can use as its classifier (the message says why and lists
    the candidates); the caller turns it into a ConfigError naming the model."""


@dataclass(frozen=True)
class HeadLayout:
    """A python model's classifier: ``forward_head`` (timm's convention), a submodule ``module``
    at the dotted path ``name``, or a method ``name``; ``declared``: named by ``head: NAME``;
    ``classes``: its number of outputs where known before the model runs."""

    kind: Literal["forward_head", "module", "method"]
    name: str = ""
    declared: bool = False
    classes: int | None = None

    @property
    def key(self) -> str:
        """How :class:`zoorank.zoo.features.FeatureExtractor` runs it (and the entry fingerprint's
        record of it): ``forward_head``, ``module:<path>`` or ``method:<name>``."""
        return self.kind if self.kind == "forward_head" else f"{self.kind}:{self.name}"

    def describe(self) -> str:
        """The layout in words: ``fc (found)``, ``head() method (found)``, ``output_net.2 (named
        by head:)``, ``forward_features + forward_head (found)``."""
        what = {"forward_head": "forward_features + forward_head", "module": self.name,
                "method": f"{self.name}() method"}[self.kind]
        return f"{what} ({'named by head:' if self.declared else 'found'})"


@dataclass(frozen=True)
class HeadSearch:
    """What the driver found of a python model's head before anything runs.

    ``layout`` None: no head (or, with ``checked`` false, not known until the model runs on its
    worker: ``reason`` says why). ``output_width``: the width of the forward's pooled output;
    ``linears``: (dotted path, outputs) of the model's ``nn.Linear`` submodules, in module order.
    """

    layout: HeadLayout | None
    checked: bool = True
    output_width: int | None = None
    linears: tuple[tuple[str, int], ...] = ()
    reason: str = ""

    @property
    def key(self) -> str:
        """The choice as the entry fingerprint records it: the layout's key, ``none`` or
        ``auto`` (decided where the model runs)."""
        if self.layout is not None:
            return self.layout.key
        return "none" if self.checked else "auto"

    def describe(self) -> str:
        """The choice in words, as ``zoorank zoo`` and EMBED print it."""
        if self.layout is not None:
            return self.layout.describe()
        if not self.checked:
            return f"decided when the model runs ({self.reason})" if self.reason else \
                "decided when the model runs"
        return "none found (no forward_head, head, fc or classifier)"

    def candidate(self, classes: int | None = None) -> str | None:
        """The submodule most likely to be the classifier: the last ``nn.Linear`` with ``classes``
        outputs, else the last ``nn.Linear``; None without any."""
        fits = [p for p, out in self.linears if classes is not None and out == classes]
        if fits:
            return fits[-1]
        return self.linears[-1][0] if self.linears else None


# -- the search -----------------------------------------------------------------------------------


def linear_modules(model: nn.Module) -> list[tuple[str, int]]:
    """(dotted path, out_features) of every ``nn.Linear`` submodule, in module order."""
    return [(n, int(m.out_features)) for n, m in model.named_modules()
            if n and isinstance(m, nn.Linear)]


def _last_linear(module: nn.Module, prefix: str) -> str | None:
    found = [n for n, m in module.named_modules() if n and isinstance(m, nn.Linear)]
    return f"{prefix}.{found[-1]}" if found else None


def _is_head_module(value: Any) -> bool:
    return isinstance(value, nn.Module) and not isinstance(value, nn.Identity)


def _method(model: nn.Module, name: str) -> Callable[..., Any] | None:
    """The bound method ``name`` of ``model`` (a function of its class), or None."""
    if "." in name:
        return None
    value = getattr(model, name, None)
    return value if _inspect.ismethod(value) and value.__self__ is model else None


def _submodule(model: nn.Module, path: str) -> nn.Module | None:
    try:
        found = model.get_submodule(path)
    except (AttributeError, TypeError):
        return None
    return found if isinstance(found, nn.Module) else None


def _classes_of(module: nn.Module | None) -> int | None:
    if isinstance(module, nn.Linear):
        return int(module.out_features)
    return None


def auto_candidates(model: nn.Module) -> list[HeadLayout]:
    """The layouts :data:`AUTO_NAMES` point at, in order (before any forward checks them)."""
    out: list[HeadLayout] = []
    for name in AUTO_NAMES:
        value = model._modules.get(name) if name in model._modules else getattr(model, name, None)
        if _is_head_module(value):
            path = name
            if name != "head" and not isinstance(value, nn.Linear):
                path = _last_linear(value, name) or name  # a Sequential classifier: its last Linear
            out.append(HeadLayout("module", path, classes=_classes_of(_submodule(model, path))))
        elif name == "head" and _method(model, name) is not None:
            out.append(HeadLayout("method", name))
    return out


def named_layout(model: nn.Module, name: str) -> HeadLayout:
    """The layout ``head: NAME`` names: a submodule at that dotted path, else a method of the
    model; HeadNameError listing the ``nn.Linear`` submodules (and close names) otherwise."""
    module = _submodule(model, name)
    if module is not None:
        return HeadLayout("module", name, declared=True, classes=_classes_of(module))
    if _method(model, name) is not None:
        return HeadLayout("method", name, declared=True)
    names = [n for n, _ in model.named_modules() if n]
    close = difflib.get_close_matches(name, names, n=3, cutoff=0.6)
    raise HeadNameError(f"head: {name!r} is no submodule or method of the model; "
                        + (f"close: {', '.join(close)}; " if close else "")
                        + linear_text(linear_modules(model)))


def linear_text(linears: Iterable[tuple[str, int]]) -> str:
    """``"its Linear submodules: fc (10 outputs), ..."`` (the candidates for ``head:``)."""
    linears = list(linears)
    if not linears:
        return "it has no nn.Linear submodule (name the module whose output is the logits)"
    shown = ", ".join(f"{p} ({n} outputs)" for p, n in linears[-_SHOWN:][::-1])
    more = len(linears) - _SHOWN
    return f"its Linear submodules, last first: {shown}" + (f" (+{more} more)" if more > 0 else "")


@dataclass
class _Probe:
    """What one forward showed: the outputs of each hooked candidate, the forward's output."""

    calls: dict[str, Any] = field(default_factory=dict)
    output: Any = None
    error: str | None = None


def _tensors(out: Any) -> list[torch.Tensor]:
    if isinstance(out, torch.Tensor):
        return [out]
    if isinstance(out, Mapping):
        return [v for v in out.values() if isinstance(v, torch.Tensor)]
    if isinstance(out, (tuple, list)):
        return [v for v in out if isinstance(v, torch.Tensor)]
    return []


def _probe(model: nn.Module, layouts: list[HeadLayout], x: torch.Tensor) -> _Probe:
    """One forward of ``model`` on ``x`` recording the first output of each layout's head."""
    seen = _Probe()
    handles, patched = [], []

    def record(key: str, output: Any) -> None:
        seen.calls.setdefault(key, output)

    for layout in layouts:
        if layout.kind == "module":
            module = _submodule(model, layout.name)
            if module is not None:
                handles.append(module.register_forward_hook(
                    lambda m, a, out, key=layout.key: record(key, out)))
        elif layout.kind == "method":
            bound = _method(model, layout.name)

            def wrapper(*args: Any, _bound: Any = bound, _key: str = layout.key, **kw: Any) -> Any:
                out = _bound(*args, **kw)
                record(_key, out)
                return out

            object.__setattr__(model, layout.name, wrapper)
            patched.append(layout.name)
    try:
        with torch.no_grad():
            seen.output = model(x)
    except Exception as err:  # noqa: BLE001 - the search falls back to the worker's forward
        seen.error = f"{type(err).__name__}: {str(err).splitlines()[0] if str(err) else ''}"
    finally:
        for h in handles:
            h.remove()
        for name in patched:
            model.__dict__.pop(name, None)
    return seen


def _width(out: Any) -> int | None:
    from zoorank.zoo.features import pool_features

    try:
        return int(pool_features(out).shape[1])
    except Exception:  # noqa: BLE001 - an output that holds no tensor has no width
        return None


def _applied(model: nn.Module, layout: HeadLayout, output: Any) -> torch.Tensor | None:
    """The head applied to the forward's pooled output (a head the forward does not call), or
    None when it does not take it or gives no 2-D output."""
    from zoorank.zoo.features import pool_features

    head = _method(model, layout.name) if layout.kind == "method" else \
        _submodule(model, layout.name)
    if head is None:
        return None
    try:
        with torch.no_grad():
            out = head(pool_features(output))
    except Exception:  # noqa: BLE001 - it does not take the output: not this head
        return None
    return out if isinstance(out, torch.Tensor) and out.ndim == 2 else None


def _passes(model: nn.Module, layout: HeadLayout, seen: _Probe, strict: bool
            ) -> tuple[bool, int | None]:
    """(whether ``layout`` is the head by the probe, its number of outputs). A submodule found by
    name (``strict``) must run and give a 2-D output the forward returns; a method, or a named
    head, may instead take the forward's pooled output."""
    out = seen.calls.get(layout.key)
    if isinstance(out, torch.Tensor):
        shapes = {tuple(t.shape) for t in _tensors(seen.output)}
        if out.ndim == 2 and (tuple(out.shape) in shapes or not strict):
            return True, int(out.shape[1])
        return False, None
    if layout.key in seen.calls or (strict and layout.kind == "module"):
        return False, None
    applied = _applied(model, layout, seen.output)
    return applied is not None, None if applied is None else int(applied.shape[1])


def search_head(model: nn.Module, head: bool | str | None, probe: torch.Tensor | None = None
                ) -> HeadSearch:
    """Find ``model``'s head (module docstring) for a ``head`` setting (None/true: look for it;
    a string: the named submodule or method); ``probe``: an input for the checking forward (meta
    or real), None to take the first candidate unchecked. ``head: false`` is the caller's (no
    search). Raises HeadNameError for a name that is no usable head, or ``head: true`` where a
    checked search finds none."""
    linears = tuple(linear_modules(model))
    if isinstance(head, str):
        layout = named_layout(model, head)
        if probe is None:
            return HeadSearch(layout, checked=False, linears=linears, reason="not run")
        seen = _probe(model, [layout], probe)
        if seen.error:
            return HeadSearch(layout, checked=False, linears=linears, reason=seen.error)
        ok, classes = _passes(model, layout, seen, strict=False)
        if not ok:
            raise HeadNameError(
                f"head: {head!r} neither runs in the model's forward with a (batch, classes) "
                f"output nor takes the forward's output (width {_width(seen.output)}); "
                + linear_text(linears))
        return HeadSearch(HeadLayout(layout.kind, layout.name, True, classes), True,
                          _width(seen.output), linears)
    if callable(getattr(model, "forward_features", None)) and \
            callable(getattr(model, "forward_head", None)):
        classes = getattr(model, "num_classes", None)
        if classes == 0:  # a timm model built headless
            return HeadSearch(None, linears=linears)
        return HeadSearch(HeadLayout("forward_head", classes=classes if isinstance(
            classes, int) else None), linears=linears)
    candidates = auto_candidates(model)
    if probe is None:
        first = candidates[0] if candidates else None
        return HeadSearch(first, checked=False, linears=linears, reason="not run")
    seen = _probe(model, candidates, probe)
    if seen.error:
        return HeadSearch(None, checked=False, linears=linears, reason=seen.error)
    width = _width(seen.output)
    for layout in candidates:
        ok, classes = _passes(model, layout, seen, strict=layout.kind == "module")
        if ok:
            return HeadSearch(HeadLayout(layout.kind, layout.name, False, classes), True, width,
                              linears)
    if head is True:
        best = HeadSearch(None, True, width, linears).candidate()
        raise HeadNameError("head: true, but no classifier head was found (looked for "
                            "forward_features + forward_head, head, fc, classifier); name it"
                            + (f", e.g. head: {best}" if best else "") + "; "
                            + linear_text(linears))
    return HeadSearch(None, True, width, linears)


# -- on the driver: a meta-device build -------------------------------------------------------------


@lru_cache(maxsize=256)
def _meta_search(name: str, kwargs_json: str, head: bool | str | None, size: int) -> HeadSearch:
    from zoorank.zoo.specs import python_factory

    try:
        with torch.device("meta"):
            model = python_factory(name)(**json.loads(kwargs_json))
        if not isinstance(model, nn.Module):
            return HeadSearch(None, checked=False, reason=f"the factory returned "
                              f"{type(model).__name__}")
        model.eval()
    except Exception as err:  # noqa: BLE001 - the worker builds it for real and says why
        return HeadSearch(None, checked=False,
                          reason=f"not built on the meta device: {type(err).__name__}")
    probe = torch.empty(2, 3, size, size, device="meta")
    return search_head(model, head, probe)


def meta_head_search(spec: Any, input_size: int) -> HeadSearch:
    """:func:`search_head` of a python model spec on a meta-device build (no weights, cached per
    process); unchecked (``auto``) where the model cannot be built or run there. HeadNameError as
    :func:`search_head`."""
    from zoorank.zoo.specs import kwargs_json

    return _meta_search(spec.name, kwargs_json(spec), spec.head, int(input_size))


# -- what EMBED says --------------------------------------------------------------------------------


def head_notes(pairs: Iterable[tuple[Any, str, int | None]]) -> tuple[list[str], list[str]]:
    """(one line per distinct head choice among the python models, warnings) for
    (resolved model, dataset, its number of classes or None) pairs of a run.

    A warning for a python model with no head found whose output width, or one of whose
    ``nn.Linear`` submodules, equals the dataset's number of classes: it looks like a classifier
    ranked by its features; the warning names the fix (``head: <best candidate>`` or
    ``head: false``). O(pairs).
    """
    chosen: dict[str, list[str]] = {}
    warnings: list[str] = []
    warned: set[str] = set()
    for model, dataset, classes in pairs:
        search = getattr(model, "head_search", None)
        if search is None:
            continue
        ids = chosen.setdefault(search.describe(), [])
        if model.model_id not in ids:
            ids.append(model.model_id)
        if search.layout is not None or not search.checked or not classes \
                or model.model_id in warned:
            continue
        fits = [p for p, out in search.linears if out == classes]
        if search.output_width == classes:
            why = f"its output has {classes} values"
        elif fits:
            why = f"its Linear {fits[-1]} has {classes} outputs"
        else:
            continue
        warned.add(model.model_id)
        best = search.candidate(classes)
        warnings.append(
            f"model {model.model_id}: no classifier head found, so it is ranked by its features, "
            f"but {why}, as many as {dataset!r} has classes. If it is a classifier, name its head "
            + (f"(head: {best})" if best else "(head: <the submodule that gives the logits>)")
            + "; else set head: false")
    lines = []
    for what, ids in chosen.items():
        shown = ", ".join(ids[:5]) + (f" (+{len(ids) - 5} more)" if len(ids) > 5 else "")
        lines.append(f"heads: {what}: {len(ids)} python model(s) ({shown})")
    return lines, warnings
