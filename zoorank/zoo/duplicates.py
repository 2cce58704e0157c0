"""Checkpoints with identical bytes: ranked once, the others named beside it.

Two resolved models are duplicates when they compute the same thing: the same model fingerprint
(digest of the weight bytes and the spec's computing part, :mod:`zoorank.zoo.resolve`), the same
head and label maps, and the same datasets. Lightning's ``last.ckpt`` beside the epoch file it
copies is the common case. The first model (config order) is kept; its
:attr:`~zoorank.zoo.resolve.ResolvedModel.duplicates` names the others.
"""

from __future__ import annotations

import dataclasses
import json
from typing import Any, TypeVar

#: a :class:`~zoorank.zoo.resolve.ResolvedModel` (not imported: resolve imports this module).
ResolvedModel = TypeVar("ResolvedModel", bound=Any)


def _key(model: Any) -> str | None:
    """What two models must share to be duplicates; None for one never merged (no weight file,
    or a checkpoint that cannot be read now)."""
    if model.checkpoint_digest is None or model.unreadable is not None:
        return None
    spec = model.spec
    return json.dumps([model.fingerprint, spec.head, spec.label_map, model.datasets],
                      sort_keys=True, default=str)


def drop_duplicates(models: list[ResolvedModel]) -> list[ResolvedModel]:
    """``models`` with each set of duplicates ranked once: the first kept (with the others' ids in
    its ``duplicates``), the others left out; order otherwise unchanged."""
    first: dict[str, int] = {}
    same: dict[int, list[str]] = {}
    kept: list[ResolvedModel] = []
    for model in models:
        key = _key(model)
        if key is not None and key in first:
            same.setdefault(first[key], []).append(model.model_id)
            continue
        if key is not None:
            first[key] = len(kept)
        kept.append(model)
    return [dataclasses.replace(m, duplicates=(*m.duplicates, *same[i])) if i in same else m
            for i, m in enumerate(kept)]


def duplicate_lines(models: list[Any]) -> list[str]:
    """One line per model ranked in place of identical ones (the console and ``zoorank zoo``)."""
    return [f"duplicates: {', '.join(m.duplicates)} hold the same weights as {m.model_id} "
            f"(digest {str(m.checkpoint_digest)[:12]}); ranked once, as {m.model_id}"
            for m in models if m.duplicates]
