"""What EMBED should hold (pure): entries and their fingerprints.

Fingerprint of an entry: :data:`EMBED_VERSION`, the model's fingerprint, its preprocessing, the
dataset's content digest and sample selection, the view recipe, the seed (augmented views), and the
precision the forward runs in, and, for a model whose head is looked for (``head`` not false), its
label space: the dataset's classes, the model's ``label_map`` for it, ``head`` and, for a python
model, where its head is (so turning heads on or off, naming another head or changing a map
re-embeds; a store embedded with heads off keeps its fingerprints).
``EMBED_VERSION`` is bumped whenever the stage's maths or
preprocessing change; a release that does not change them keeps a store valid.
"""

from __future__ import annotations

import hashlib
from dataclasses import dataclass
from typing import Any

import numpy as np

from zoorank.config import DatasetSpec, EmbedOptions, RunConfig, ViewSpec
from zoorank.config.digests import fingerprint
from zoorank.data.sources import SampleIndex
from zoorank.data.views import view_subset
from zoorank.zoo import ResolvedModel
from zoorank.zoo.label_space import LabelSpace, head_required, heads_wanted

#: version of the stage's maths and preprocessing (in every entry fingerprint); bump on change.
EMBED_VERSION = 3  # 3: upright, range-mapped, alpha-on-white, memory-bounded decoding


@dataclass(frozen=True)
class Entry:
    """One (dataset, view, model) output: its fingerprint and the rows it must hold."""

    dataset: str
    view: ViewSpec
    model: ResolvedModel
    fingerprint: str
    samples: np.ndarray  # sample_ids the view covers
    #: what the dataset asks of the model's head; None when no head is looked for (``head: false``)
    label_space: LabelSpace | None = None

    @property
    def key(self) -> tuple[str, str, str]:
        return (self.dataset, self.view.name, self.model.model_id)

    @property
    def expected_rows(self) -> int:
        return len(self.samples) * self.view.per_sample


def dataset_selection(spec: DatasetSpec, index: SampleIndex) -> dict[str, Any]:
    """What of a dataset an embedding depends on: its content, the exact sample selection and the
    selected samples known to be undecodable (so every model of a dataset holds the same samples).

    The path is not in it: the same bytes at another path or URI give the same embeddings.
    """
    digest = hashlib.sha256(np.ascontiguousarray(index.sample_id, dtype="<i8").tobytes())
    out = {
        "source": spec.source,
        "content": index.content_digest,
        "image_column": spec.image_column if spec.source == "parquet" else None,
        "samples": len(index),
        "sample_ids": digest.hexdigest()[:16],
    }
    if len(index.undecodable):  # the samples every model of the dataset leaves out
        bad = hashlib.sha256(np.ascontiguousarray(index.undecodable, dtype="<i8").tobytes())
        out["undecodable"] = f"{len(index.undecodable)}:{bad.hexdigest()[:16]}"
    return out


def entry_fingerprint(
    model: ResolvedModel, selection: dict[str, Any], view: ViewSpec, seed: int,
    precision: str = "fp32", label_space: LabelSpace | None = None,
) -> str:
    """fingerprint(EMBED_VERSION, model, preprocessing, dataset selection, view, seed, precision
    [, label space]).

    The clean view draws nothing at random, so its fingerprint leaves the seed out (the seeded
    ``limit`` subset is already in ``selection``). Without a label space (heads off) the parts are
    those of stores written before heads were kept.
    """
    parts: list[Any] = [
        {"embed_version": EMBED_VERSION, "precision": precision},
        model.fingerprint,
        {"geometry": vars(model.geometry), "normalization": vars(model.normalization)},
        selection,
        {"recipe": view.recipe_name, "samples": view.samples, "per_sample": view.per_sample},
        None if view.is_clean and view.samples is None else seed,
    ]
    if label_space is not None:
        parts.append({"label_space": label_space.fingerprint_part()})
    return fingerprint(*parts)


def class_names(spec: Any, index: SampleIndex) -> tuple[str, ...] | None:
    """A dataset's class names: its own (``label_names``), else the config's ``classes``, else
    for integer labels without names the integers ``"0" .. str(max)``; None without any."""
    if index.label_names is not None:
        return tuple(str(n) for n in index.label_names)
    if spec.classes:
        return tuple(spec.classes)
    if index.label is not None and index.label.notna().any():
        return tuple(str(i) for i in range(int(index.label.max()) + 1))
    return None


def label_space(model: ResolvedModel, dataset: str, classes: tuple[str, ...] | None
                ) -> LabelSpace | None:
    """What ``dataset`` asks of ``model``'s head; None when no head is looked for."""
    spec = model.spec
    if not heads_wanted(spec):
        return None
    search = getattr(model, "head_search", None)  # a python model's head layout
    return LabelSpace.of(dataset, classes, spec.label_map.get(dataset), head_required(spec),
                         None if search is None else search.key)


def plan_entries(
    config: RunConfig, models: list[ResolvedModel], indexes: dict[str, SampleIndex],
    precision: str = "fp32",
) -> list[Entry]:
    """Every (dataset, view, model) of the config, with fingerprints and covered samples."""
    entries = []
    for spec in config.datasets:
        index = indexes[spec.name]
        selection = dataset_selection(spec, index)
        classes = class_names(spec, index)
        for view in config.views:
            samples = view_subset(index.sample_id, view, config.seed)
            for m in models:
                if not m.wants(spec.name):  # a model entry's ``datasets:`` leaves this one out
                    continue
                space = label_space(m, spec.name, classes)
                fp = entry_fingerprint(m, selection, view, config.seed, precision, space)
                entries.append(Entry(spec.name, view, m, fp, samples, space))
    return entries


def planned_precision(options: EmbedOptions, device: str | None = None) -> str:
    """The precision in an entry's fingerprint: the configured one, with ``auto`` on CPU as fp32.

    ``auto`` on a GPU (or on a device not yet known) stays ``auto``: the worker that runs the
    forward resolves it (:func:`zoorank.embed.embedder.resolve_precision`: bf16 where its GPU supports
    it, else fp16) and the manifest records what it used. So the fingerprint never depends on the
    driver's GPU (a cluster's head has none), and readers use the recorded precision.
    """
    device = device or (options.device if options.device != "auto" else None)
    if options.precision == "auto" and device == "cpu":
        return "fp32"
    return options.precision



