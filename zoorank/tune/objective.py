"""The label-free objective: a fixed unlabeled probe set and the metrics a trial reports on it.

The probe set is drawn once per search (``build_probe_set``) and shared by every trial: ``n``
clean samples and ``q`` augmented views of each, chosen and made exactly as the embed stage
chooses and makes an augmented view's samples (``zoorank.data.views.view_subset``'s seeded subset,
``clean_view``, ``make_views``). So a run config with ``seed: <probe_seed>``, the same dataset and
a view ``{recipe: <probe recipe>, samples: n, per_sample: q}`` embeds exactly the probe set, and
``zoorank run`` on the exported checkpoint recomputes the score the trial reported.

Metric conventions (``specs/clid_lidar.md``; all: higher is better):

* ``lidar``: LiDAR of the n × q views (δ, ε from the config).
* ``rankme``: RankMe of the n clean embeddings; ``rankme_aug``: of the n·q views pooled.
* ``cluster_learnability``, ``twonn_id``: CLID's two parts on the clean embeddings, rows
  L2-normalised (the paper's setting). ``clid`` per trial is their raw sum ``100·CL + ID``
  (``zoorank.metrics.label_free.clid.clid`` mode ``raw_percent``): the paper's z-scored CLID needs the
  whole pool and is computed over the finished trials by the search.

Every metric is computed by its registry entry (``zoorank.metrics.registry``) with the settings and
collapse guard SCORE uses: a collapsed representation scores the floor (cluster learnability 0.0),
as SCORE records it undefined (NaN), never the trivial 1.0.
"""

from __future__ import annotations

import math
import time
import warnings
from collections.abc import Sequence
from dataclasses import dataclass
from typing import TYPE_CHECKING

import numpy as np

from zoorank.metrics import DegenerateInputWarning, registry

if TYPE_CHECKING:
    from zoorank.data.sources import SampleIndex
    from zoorank.data.views import GeometryLike
    from zoorank.tune.config import ObjectiveSpec
    from zoorank.tune.trainers import SSLTrainer

__all__ = ["ProbeSet", "build_probe_set", "evaluate_probe", "score_features"]



def __getattr__(name: str):
    """``FLOOR``: the value reported for a diverged trial (non-finite features), each metric's
    lowest value (the spectral metrics' collapse sentinel is 1.0), read live from the metric
    registry, so a metric registered later has its floor too."""
    if name == "FLOOR":
        return registry.tune_floors()
    raise AttributeError(name)


@dataclass(frozen=True)
class ProbeSet:
    """n clean samples × q augmented views, uint8, shared by all trials of one search."""

    sample_id: np.ndarray  # int64 (n,)
    clean: np.ndarray  # uint8 (n, H, W, 3)
    views: np.ndarray  # uint8 (n, q, H, W, 3)
    recipe: str
    seed: int

    @property
    def n(self) -> int:
        return len(self.sample_id)

    @property
    def q(self) -> int:
        return self.views.shape[1]


def build_probe_set(
    table: SampleIndex, n: int, q: int, recipe: str, geometry: GeometryLike, seed: int
) -> ProbeSet:
    """Draw the probe set: a seeded subset of ``n`` samples, their clean view and ``q`` views."""
    from zoorank.config import ViewSpec
    from zoorank.data.images import decode_image
    from zoorank.data.views import clean_view, make_views, view_subset

    if n > len(table):
        raise ValueError(f"probe set of {n} samples asked from a dataset of {len(table)}")
    ids = view_subset(
        table.sample_id, ViewSpec(name="probe", recipe=recipe, samples=n, per_sample=q), seed
    )
    position = {int(s): i for i, s in enumerate(table.sample_id)}
    clean, views = [], []
    for sid in ids:
        img = decode_image(table.images[position[int(sid)]], table.source_name(sid))
        clean.append(clean_view(img, geometry))
        views.append(np.stack(make_views(img, int(sid), recipe, geometry, q, seed)))
    return ProbeSet(ids, np.stack(clean), np.stack(views), recipe, seed)


def needs_clean(metric: str) -> bool:
    """Whether a metric reads the clean view (directly or through a pool metric's terms)."""
    return "clean" in registry.needs(metric)


def score_features(
    views: np.ndarray,
    clean: np.ndarray | None,
    metrics: Sequence[str],
    delta: float = 1e-6,
    eps: float = 1e-7,
    seed: int = 0,
    delta_mode: str = "absolute",
) -> dict[str, float]:
    """The label-free metrics of one model's probe features, computed as SCORE computes them.

    ``views`` (n, q, d) and ``clean`` (n, d; needed by metrics that read the clean view). Each metric
    is its registry entry run on the features (the same function, settings and collapse guard as
    SCORE; options other than δ, ε and the δ mode take the registry's defaults). A pool metric
    (CLID) reports its terms and its one-model value (the registry's ``solo`` settings). Non-finite
    features, or a tripped collapse guard, give :data:`FLOOR` values (the guard with a
    ``DegenerateInputWarning``, so the trial is marked degenerate).
    """
    if not (np.all(np.isfinite(views)) and (clean is None or np.all(np.isfinite(clean)))):
        floor = registry.tune_floors()
        return {m: floor[m] for m in metrics}
    options = {"lidar_delta": delta, "eps": eps, "lidar_delta_mode": delta_mode}
    out: dict[str, float] = {}
    collapsed: set[str] = set()

    def per_model(name: str) -> float:
        if name not in out:
            entry = registry.info(name)
            data = clean if entry.inputs == "clean" else views
            try:
                out[name] = entry.run(data, options, seed)[0]
            except registry.CollapsedError as err:
                warnings.warn(str(err), DegenerateInputWarning, stacklevel=2)
                out[name] = registry.tune_floors().get(name, math.nan)
                collapsed.add(name)
        return out[name]

    for m in metrics:
        entry = registry.info(m)
        if needs_clean(m) and clean is None:
            raise ValueError(f"{m} needs the clean-view features")
        if entry.inputs == "pool":
            if entry.solo is None or entry.combine is None:
                raise ValueError(f"{m} is a pool metric with no one-model value")
            # a pool metric's terms are reported too, for the search to combine over the trials
            terms = [per_model(t) for t in entry.requires]
            if collapsed & set(entry.requires) or not all(math.isfinite(v) for v in terms):
                out[m] = registry.tune_floors()[m]
            else:
                out[m] = float(entry.combine(*[np.array([v]) for v in terms], **entry.solo)[0])
        elif entry.inputs in registry.PER_MODEL_INPUTS:
            per_model(m)
        else:
            raise ValueError(f"{m} ({entry.inputs}) cannot be computed for one trial")
    return out


def evaluate_probe(
    trainer: SSLTrainer, probe: ProbeSet, objective: ObjectiveSpec
) -> dict[str, float]:
    """Embed the probe set with the trainer's current weights and score it.

    Returns the metrics (``<metric>`` on the representation, ``projector_<metric>`` on the
    projector output, as ``objective.features`` asks), ``degenerate`` (1.0 when a metric warned of
    collapsed input or features were non-finite), ``objective_seconds`` (embedding + metrics) and
    ``probe_embed_seconds`` (the embedding part).
    """
    t0 = time.perf_counter()
    n, q = probe.n, probe.q
    views = probe.views.reshape(n * q, *probe.views.shape[2:])
    with_clean = any(needs_clean(m) for m in objective.metrics)
    images = np.concatenate([probe.clean, views]) if with_clean else views
    offset = n if with_clean else 0
    want_proj = objective.features in ("projector", "both")
    rep, proj = trainer.embed(images, projector=want_proj)
    embedded = time.perf_counter()
    spaces = []
    if objective.features in ("representation", "both"):
        spaces.append(("", rep))
    if want_proj:
        spaces.append(("projector_", proj))
    out: dict[str, float] = {}
    degenerate = False
    with warnings.catch_warnings(record=True) as caught:
        warnings.simplefilter("always", DegenerateInputWarning)
        for prefix, feats in spaces:
            clean = feats[:offset] if with_clean else None
            grouped = feats[offset:].reshape(n, q, -1)
            degenerate |= not np.all(np.isfinite(feats))
            scores = score_features(
                grouped, clean, objective.metrics, objective.lidar_delta, objective.eps, probe.seed,
                objective.lidar_delta_mode,
            )
            out.update({prefix + name: v for name, v in scores.items()})
    degenerate |= any(issubclass(w.category, DegenerateInputWarning) for w in caught)
    out["degenerate"] = float(degenerate)
    out["objective_seconds"] = time.perf_counter() - t0
    out["probe_embed_seconds"] = embedded - t0
    return out
