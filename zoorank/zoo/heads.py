"""Where a ``python`` model's classifier is: the layouts zoorank finds, and the one a config names.

A python model (``source: python``, a factory returning an ``nn.Module``) keeps its classifier
head the way its author wrote it. Its head is, in this order (``head`` unset or ``true``):

1. ``forward_features`` + ``forward_head`` (timm's convention; no head when ``num_classes`` is 0);
2. a submodule ``head`` (its input is the features, its output the logits), or a *method*
   ``head`` (features → logits);
3. a submodule ``fc`` (torchvision's ResNets), then ``classifier`` (DenseNet, MobileNet, VGG),
   then ``heads`` (torchvision's ViT): the submodule itself when it is an ``nn.Linear``, else the
   last ``nn.Linear`` inside it (the whole submodule when it holds none: SqueezeNet's conv
   classifier), where that Linear is the model's last.

``head: NAME`` names it instead: a submodule by its dotted path (``fc``, ``classifier.3``,
``output_net.2``) or a method of the model. Either way the features are the head's input and the
logits its output, from one forward of the model (a forward hook on the submodule, a wrapper
around the method). A head the forward does not call (a ``forward`` that returns the features) is
applied to the forward's pooled output instead: the same single pass through the trunk.

The search reads the model's structure only: on the driver from a meta-device build (no memory,
no weights; the factory runs, the forward never does), else on the worker from the built model.
What only a forward tells is checked by the model's first forward where it embeds
(:class:`zoorank.zoo.features.FeatureExtractor`): a submodule found by name must run and give a
2-D output that the forward returns (an MLP's first layer named ``fc`` does not: the model keeps
its features only), a found method must run or take the forward's output, and a named head that
does neither is a config error. User code never runs a forward on the driver: a forward may
sleep, write files or kill its process, and the worker's failure contract covers that.

Costs: one meta-device build per distinct (factory, kwargs, head) on the driver (cached per
process); nothing per image.
"""

from __future__ import annotations

import difflib
import inspect as _inspect
import json
from collections.abc import Callable, Iterable, Mapping
from dataclasses import dataclass
from functools import lru_cache
from typing import Any, Literal

import torch
from torch import nn

#: submodule or method names looked for, in this order, after timm's convention (``heads``:
#: torchvision's ViT).
AUTO_NAMES = ("head", "fc", "classifier", "heads")
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

    ``layout`` None: no head (or, with ``checked`` false, not known until the model is built on
    its worker: ``reason`` says why); a found layout is still checked by the model's first forward
    there (module docstring). ``linears``: (dotted path, outputs) of the model's ``nn.Linear``
    submodules, in module order.
    """

    layout: HeadLayout | None
    checked: bool = True
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
            return f"looked for when the model is built ({self.reason})" if self.reason else \
                "looked for when the model is built"
        return "none found (no forward_head, head, fc, classifier or heads)"

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
    """The layouts :data:`AUTO_NAMES` point at, in order (before any forward checks them).

    ``fc``, ``classifier`` and ``heads`` count only where their Linear (the submodule, or the last Linear
    inside it) is the model's last ``nn.Linear``, as a classifier is: an MLP's first layer named
    ``fc`` is not a head. O(modules)."""
    linears = [p for p, _ in linear_modules(model)]
    out: list[HeadLayout] = []
    for name in AUTO_NAMES:
        value = model._modules.get(name) if name in model._modules else getattr(model, name, None)
        if _is_head_module(value):
            path = name
            if name != "head":
                if not isinstance(value, nn.Linear):  # a Sequential classifier: its last Linear
                    path = _last_linear(value, name) or name
                if path in linears and path != linears[-1]:
                    continue
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


def search_head(model: nn.Module, head: bool | str | None) -> HeadSearch:
    """Find ``model``'s head from its structure (module docstring) for a ``head`` setting
    (None/true: look for it; a string: the named submodule or method). ``head: false`` is the
    caller's (no search). Raises HeadNameError for a name that is no submodule or method, and
    for ``head: true`` where none is found."""
    linears = tuple(linear_modules(model))
    if isinstance(head, str):
        return HeadSearch(named_layout(model, head), linears=linears)
    if callable(getattr(model, "forward_features", None)) and \
            callable(getattr(model, "forward_head", None)):
        classes = getattr(model, "num_classes", None)
        if classes == 0:  # a timm model built headless
            return HeadSearch(None, linears=linears)
        return HeadSearch(HeadLayout("forward_head", classes=classes if isinstance(
            classes, int) else None), linears=linears)
    candidates = auto_candidates(model)
    if candidates:
        return HeadSearch(candidates[0], linears=linears)
    if head is True:
        best = HeadSearch(None, linears=linears).candidate()
        raise HeadNameError("head: true, but no classifier head was found (looked for "
                            "forward_features + forward_head, head, fc, classifier, heads); "
                            "name it"
                            + (f", e.g. head: {best}" if best else "") + "; "
                            + linear_text(linears))
    return HeadSearch(None, linears=linears)


# -- on the driver: a meta-device build -------------------------------------------------------------


@lru_cache(maxsize=256)
def _meta_search(name: str, kwargs_json: str, head: bool | str | None) -> HeadSearch:
    from zoorank.zoo.specs import python_factory

    try:
        with torch.device("meta"):
            model = python_factory(name)(**json.loads(kwargs_json))
    except Exception as err:  # noqa: BLE001 - the worker builds it for real and says why
        return HeadSearch(None, checked=False,
                          reason=f"not built on the meta device: {type(err).__name__}")
    if not isinstance(model, nn.Module):
        return HeadSearch(None, checked=False,
                          reason=f"the factory returned {type(model).__name__}")
    return search_head(model, head)


def meta_head_search(spec: Any) -> HeadSearch:
    """:func:`search_head` of a python model spec on a meta-device build (no weights, cached per
    process; the forward never runs); unchecked (``auto``: the worker searches) where the model
    cannot be built there. HeadNameError as :func:`search_head`."""
    from zoorank.zoo.specs import kwargs_json

    return _meta_search(spec.name, kwargs_json(spec), spec.head)


# -- what EMBED says --------------------------------------------------------------------------------


def head_choices(models: Iterable[Any]) -> list[str]:
    """One line per distinct head choice among the python models (resolved models with a
    :attr:`~zoorank.zoo.resolve.ResolvedModel.head_search`), naming up to five of them. O(models).
    """
    chosen: dict[str, list[str]] = {}
    for model in models:
        search = getattr(model, "head_search", None)
        if search is not None:
            ids = chosen.setdefault(search.describe(), [])
            if model.model_id not in ids:
                ids.append(model.model_id)
    lines = []
    for what, ids in chosen.items():
        shown = ", ".join(ids[:5]) + (f" (+{len(ids) - 5} more)" if len(ids) > 5 else "")
        lines.append(f"heads: {what}: {len(ids)} python model(s) ({shown})")
    return lines


def head_warnings(models: Mapping[str, Any], rows: Iterable[Mapping[str, Any]],
                  classes: Mapping[str, int | None]) -> list[str]:
    """Warnings for python models that look like classifiers ranked by their features, from the
    ``done`` manifest rows of a run (``dataset``, ``model_id``, ``dim``, ``logit_dim``), the
    resolved ``models`` by id and each dataset's number of ``classes``; each names the fix
    (``head: <best candidate>``, or ``head: false``). At most one per model. O(rows).

    * a head was found but the first forward did not keep it (no logits): it is not the
      classifier (a submodule that does not give what the forward returns);
    * no head was found, and the model's output width, or one of its ``nn.Linear`` submodules,
      equals the dataset's number of classes.
    """
    out: list[str] = []
    warned: set[str] = set()
    for row in rows:
        model = models.get(str(row.get("model_id")))
        search = getattr(model, "head_search", None)
        k = classes.get(str(row.get("dataset")))
        if search is None or model.model_id in warned or row.get("status") != "done" \
                or int(row.get("logit_dim") or 0) > 0:
            continue
        dataset, dim = row.get("dataset"), int(row.get("dim") or 0)
        best = search.candidate(k)
        fix = ("If it is a classifier, name its head "
               + (f"(head: {best})" if best else "(head: <the submodule that gives the logits>)")
               + "; else set head: false")
        if search.layout is not None:
            warned.add(model.model_id)
            out.append(f"model {model.model_id}: {search.layout.describe()} is not its classifier "
                       "(it does not give what the model's forward returns), so the model is "
                       f"ranked by its features. {fix}")
            continue
        fits = [p for p, n in search.linears if k is not None and n == k]
        if k and dim == k:
            why = f"its output has {k} values"
        elif fits:
            why = f"its Linear {fits[-1]} has {k} outputs"
        else:
            continue
        warned.add(model.model_id)
        out.append(f"model {model.model_id}: no classifier head found, so it is ranked by its "
                   f"features, but {why}, as many as {dataset!r} has classes. {fix}")
    return out
