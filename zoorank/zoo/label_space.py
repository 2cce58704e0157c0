"""Label spaces that line up: which head output scores which of a dataset's classes.

A dataset's classes (its class names in label order 0..K−1, :func:`zoorank.catalog.class_names`;
None without any) map to a classifier head's outputs:

* a ``label_map`` entry of the model for that dataset: ``{class name or index: head output}``,
  every class mapped, to distinct outputs; or ``imagenet`` (below);
* else the identity when the counts agree, or when the dataset has no class list (no labels, no
  names, no ``classes``: then K is the head's number of outputs);
* else, for a head of 1000 outputs and classes that are all ImageNet-1k WordNet ids (an ImageNet
  subset such as Tiny-ImageNet), the built-in map: each wnid to its index in timm's ImageNet-1k
  synset order (``timm.data.ImageNetInfo``, the order of every ImageNet-1k head timm ships).

:func:`head_columns` gives the head outputs in class order, so ``logits[:, columns]`` are the
stored logits (K columns) and a softmax over them is the softmax restricted to the mapped outputs.
Anything else is a :class:`~zoorank.errors.ConfigError` (exit 2) naming the dataset, the model and
the fix (a ``label_map`` for the dataset, or ``head: false``), under ``head: null`` (auto) as under
``head: true``: a head kept by default whose outputs map to none of a dataset's known classes would
otherwise leave a classifier zoo ranked by its features without a word. The only difference of
``head: true``: the error is raised before anything runs where the head's width is known without
building the model, not only where the model runs.
"""

from __future__ import annotations

import re
from collections.abc import Mapping
from dataclasses import dataclass
from functools import lru_cache
from typing import Any

import numpy as np

from zoorank.config.model_spec import source_traits
from zoorank.errors import ConfigError

#: outputs of an ImageNet-1k head.
IMAGENET_CLASSES = 1000
#: a WordNet noun id (``n01443537``).
_WNID = re.compile(r"^n\d{8}$")
#: ``label_map`` value naming the built-in WordNet-id map.
IMAGENET_MAP = "imagenet"


@dataclass(frozen=True)
class LabelSpace:
    """What a dataset asks of one model's head (built on the driver, used where the head runs).

    ``mapping`` is the model's ``label_map`` entry for the dataset (None: none given);
    ``required`` is true when the model says ``head: true`` or names its head (a mismatch, an
    error under auto too, is then found before anything runs where it can be); ``layout``: a
    python model's head as chosen (:attr:`zoorank.zoo.heads.HeadSearch.key`; None for the other
    sources, whose library decides).
    """

    dataset: str
    classes: tuple[str, ...] | None
    mapping: tuple[tuple[str, int], ...] | str | None = None
    required: bool = False
    layout: str | None = None

    @staticmethod
    def of(dataset: str, classes: tuple[str, ...] | None,
           mapping: Mapping[str | int, int] | str | None, required: bool,
           layout: str | None = None) -> LabelSpace:
        """A label space with the configured map frozen (sorted (key, output) pairs)."""
        if isinstance(mapping, Mapping):
            mapping = tuple(sorted((str(k), int(v)) for k, v in mapping.items()))
        # an empty class list says nothing: the identity, as without one
        return LabelSpace(dataset, tuple(classes) if classes else None, mapping, required, layout)

    def fingerprint_part(self) -> dict:
        """What of the label space changes the stored logits (part of the entry fingerprint): the
        map, ``head``, a python model's head layout, and the classes: their names where a map
        reads them (a configured map, or WordNet ids the built-in map may use), else only their
        number (identity or an error)."""
        classes: list[str] | int | None = None
        if self.classes is not None:
            by_name = self.mapping is not None or all(_WNID.match(c) for c in self.classes)
            classes = list(self.classes) if by_name else len(self.classes)
        part = {"classes": classes,
                "label_map": [list(p) for p in self.mapping] if isinstance(self.mapping, tuple)
                else self.mapping, "head": self.required}
        if self.layout is not None:  # absent for timm/transformers/torchscript: their old prints
            part["layout"] = self.layout
        return part


def heads_wanted(spec: Any) -> bool:
    """Whether a model spec's head is looked for: ``head`` not false (torchscript: only
    ``head: true``, its declared (features, logits) output; ``head: NAME`` names it)."""
    return head_required(spec) or (spec.head is None and source_traits(spec.source).head_by_default)


def head_required(spec: Any) -> bool:
    """Whether a model spec asks for its head: ``head: true`` or ``head: NAME`` (a head that
    does not line up is then found before anything runs where it can be)."""
    return spec.head is True or isinstance(spec.head, str)


@lru_cache(maxsize=1)
def imagenet_wnids() -> tuple[str, ...]:
    """The ImageNet-1k WordNet ids in the order of ImageNet-1k heads (timm's own copy)."""
    from timm.data import ImageNetInfo

    return tuple(ImageNetInfo().label_names())


def _error(space: LabelSpace, model_id: str, what: str) -> ConfigError:
    return ConfigError(f"dataset {space.dataset!r}, model {model_id!r}: {what}")


def _imagenet_columns(space: LabelSpace, outputs: int, model_id: str) -> np.ndarray:
    if space.classes is None:
        raise _error(space, model_id, "label_map: imagenet needs the dataset's class names "
                     "(WordNet ids such as n01443537)")
    if outputs != IMAGENET_CLASSES:
        raise _error(space, model_id, f"label_map: imagenet needs an ImageNet-1k head "
                     f"({IMAGENET_CLASSES} outputs); this head has {outputs}")
    order = {w: i for i, w in enumerate(imagenet_wnids())}
    missing = [c for c in space.classes if c not in order]
    if missing:
        raise _error(space, model_id, f"label_map: imagenet: {len(missing)} class(es) are not "
                     f"ImageNet-1k WordNet ids: {missing[:5]}")
    return np.array([order[c] for c in space.classes], dtype=np.int64)


def _configured_columns(space: LabelSpace, outputs: int, model_id: str) -> np.ndarray:
    pairs = dict(space.mapping)  # type: ignore[arg-type]
    classes = space.classes
    if classes is None:  # no class names: the keys are the class indices 0..K-1
        keys = [k for k in pairs if not k.lstrip("-").isdigit()]
        if keys:
            raise _error(space, model_id, f"label_map names classes {keys[:5]}, but the dataset "
                         "has no class names; map class indices 0..K-1")
        classes = tuple(str(i) for i in range(len(pairs)))
    index = {c: i for i, c in enumerate(classes)}
    by_class: dict[int, int] = {}
    for key, out in pairs.items():
        at = index.get(key)
        if at is None and key.isdigit() and int(key) < len(classes):
            at = int(key)
        if at is None:
            raise _error(space, model_id, f"label_map maps {key!r}, which is no class of the "
                         f"dataset (classes: {list(classes[:5])}{' ...' if len(classes) > 5 else ''})")
        if at in by_class and by_class[at] != out:
            raise _error(space, model_id, f"label_map maps class {classes[at]!r} twice")
        by_class[at] = out
    unmapped = [classes[i] for i in range(len(classes)) if i not in by_class]
    if unmapped:
        raise _error(space, model_id, f"label_map leaves {len(unmapped)} class(es) unmapped: "
                     f"{unmapped[:5]}")
    columns = np.array([by_class[i] for i in range(len(classes))], dtype=np.int64)
    beyond = sorted({int(c) for c in columns if c >= outputs})
    if beyond:
        raise _error(space, model_id, f"label_map maps to head output(s) {beyond[:5]}, but the "
                     f"head has {outputs} outputs")
    values, counts = np.unique(columns, return_counts=True)
    if (counts > 1).any():
        raise _error(space, model_id, f"label_map maps several classes to head output(s) "
                     f"{values[counts > 1][:5].tolist()}")
    return columns


def check_label_space(space: LabelSpace, model_id: str) -> None:
    """Raise the ConfigError a configured map would give whatever the head: keys that are no class
    of the dataset, classes left unmapped or mapped twice, ``imagenet`` on classes that are not
    ImageNet-1k WordNet ids (run on the driver before anything is embedded)."""
    if space.mapping == IMAGENET_MAP:
        _imagenet_columns(space, IMAGENET_CLASSES, model_id)
    elif space.mapping is not None:
        _configured_columns(space, np.iinfo(np.int64).max, model_id)


def head_columns(space: LabelSpace, outputs: int, model_id: str) -> np.ndarray:
    """The head outputs scoring the dataset's classes, in class order (int64 ``(K,)``).

    Raises ConfigError (naming the dataset, the model and the fix) for a map that does not fit, or
    a head that does not line up with the dataset's classes, whatever the model's ``head`` (auto or
    true): other count, no map given, not an ImageNet-1k head on WordNet ids.
    """
    if outputs < 1:
        raise _error(space, model_id, f"the head has {outputs} outputs")
    if space.mapping == IMAGENET_MAP:
        return _imagenet_columns(space, outputs, model_id)
    if space.mapping is not None:
        return _configured_columns(space, outputs, model_id)
    classes = space.classes
    if classes is None or len(classes) == outputs:
        return np.arange(outputs, dtype=np.int64)
    wnids = set(imagenet_wnids())
    if outputs == IMAGENET_CLASSES and all(c in wnids for c in classes):
        return _imagenet_columns(space, outputs, model_id)
    raise _error(space, model_id, f"the head has {outputs} outputs, which map to none of the "
                 f"dataset's {len(classes)} classes; give the model a label_map for this dataset "
                 "(class → head output), or head: false to rank it by its features (embed.heads: "
                 "false for every model)")
