"""What SCORE should hold (pure): per-model metric rows, ensemble rows, pool rows, with fingerprints.

A per-model metric row's fingerprint hashes the manifest fingerprint of the embeddings it reads, its
settings, ``max_samples``, the run seed, :data:`SCORE_VERSION` and the metric's registry version.
Ensemble metrics (registry inputs ``ensemble``: NC) get one fingerprint per seed ensemble over its
members' entries; pool metrics (inputs ``pool``: CLID) one per pool over the fingerprints of the
per-model rows they ``require``. Which metrics are ensemble or pool metrics, and what a pool combines,
is read from :mod:`zoorank.metrics.registry`.
"""

from __future__ import annotations

import dataclasses
from collections import defaultdict
from collections.abc import Iterable
from dataclasses import dataclass, field
from typing import Any

import numpy as np
import pandas as pd

from zoorank.catalog.applicability import pool_key, view_reason, wants
from zoorank.config import RunConfig, ScoreOptions
from zoorank.config.digests import fingerprint
from zoorank.metrics import registry
from zoorank.metrics.suite import metric_inputs, metric_settings, per_model_metrics
from zoorank.store import layout
from zoorank.store.shards import parse_shards

METRICS_KEY = ["model_id", "dataset", "metric"]

#: version of this stage's reading of embeddings (sample selection, view grouping): bump it when
#: that changes. Each metric's own maths is versioned in zoorank.metrics.registry.
SCORE_VERSION = 1
#: the metrics that CLID combines over a pool (ID is TwoNN on L2-normalised features).
CLID_TERMS = registry.info("clid").requires


def ensemble_metrics(config: RunConfig) -> list[str]:
    """Configured metrics computed over a seed ensemble (registry inputs ``ensemble``)."""
    return [m for m in registry.expand(config.metrics) if registry.info(m).inputs == "ensemble"]


def pool_metrics(config: RunConfig) -> list[str]:
    """Configured metrics computed over a pool of models (registry inputs ``pool``) that the
    views make possible (:func:`view_reason`)."""
    return [m for m in registry.expand(config.metrics)
            if registry.info(m).inputs == "pool" and view_reason(config, m) is None]


@dataclass(frozen=True)
class ModelInfo:
    """What the stage needs of a resolved model."""

    model_id: str
    group: str | None = None
    family: str | None = None


@dataclass(frozen=True)
class ModelTask:
    """Per-model metrics to compute for one (dataset, model)."""

    dataset: str
    model_id: str
    clean_view: str | None  # None: no done clean embeddings
    augmented_view: str | None  # the first augmented view (plain metric names)
    metrics: tuple[str, ...]  # per-model names; ``<name>@<view>`` reads augmented view <view>
    fingerprints: tuple[tuple[str, str], ...]  # (metric, fingerprint)
    #: (view, shard file names) of every entry the task reads, from the same manifest snapshot
    #: as the entry fingerprints in ``fingerprints``: the worker reads exactly these (None: the
    #: row lists no shards, an older store; the worker lists the entry's directory).
    shards: tuple[tuple[str, tuple[str, ...] | None], ...] = ()

    def shards_of(self, view: str) -> list[str] | None:
        """The shard names of this task's entry of ``view`` (None when not listed)."""
        names = dict(self.shards).get(view)
        return None if names is None else list(names)


@dataclass(frozen=True)
class GroupTask:
    """NC and baselines of one seed ensemble on one dataset."""

    dataset: str
    group: str
    members: tuple[str, ...]
    clean_view: str
    fingerprint: str
    #: (member, its clean entry's shard names) from the snapshot ``fingerprint`` hashes.
    shards: tuple[tuple[str, tuple[str, ...] | None], ...] = ()

    def shards_of(self, member: str) -> list[str] | None:
        names = dict(self.shards).get(member)
        return None if names is None else list(names)


@dataclass
class ScorePlan:
    model_tasks: list[ModelTask] = field(default_factory=list)
    group_tasks: list[GroupTask] = field(default_factory=list)
    #: dataset → models scored on it (done embeddings, not failed): the CLID pool candidates.
    eligible: dict[str, list[str]] = field(default_factory=dict)
    up_to_date: int = 0
    failed: list[tuple[str, str]] = field(default_factory=list)  # (dataset, model_id)
    missing: list[tuple[str, str]] = field(default_factory=list)
    #: dataset → seed ensembles with ≥ 2 scorable members → their members (when ``nc`` is asked).
    ensembles: dict[str, dict[str, tuple[str, ...]]] = field(default_factory=dict)


# -- planning (pure) ----------------------------------------------------------------------------


def entry_shards(manifest: pd.DataFrame) -> dict[tuple[str, str, str], tuple[str, ...] | None]:
    """(dataset, view, model_id) → the shard names a ``done`` row lists (None when it lists
    none): what a task reading that entry reads (O(rows))."""
    if manifest.empty or "shards" not in manifest:
        return {}
    done = manifest[manifest["status"] == "done"]
    out: dict[tuple[str, str, str], tuple[str, ...] | None] = {}
    for d, v, m, names in zip(done["dataset"], done["view"], done["model_id"], done["shards"]):
        parsed = parse_shards(names)
        out[(d, v, m)] = None if parsed is None else tuple(parsed)
    return out


def entry_fingerprints(manifest: pd.DataFrame) -> tuple[dict, set]:
    """(dataset, view, model_id) → fingerprint of the ``done`` rows, and the (dataset, model_id)
    of the ``failed`` ones."""
    done, failed = {}, set()
    for r in manifest.itertuples(index=False):
        key = (r.dataset, r.view, r.model_id)
        if r.status == "done":
            done[key] = str(r.fingerprint)
        elif r.status == "failed":
            failed.add((r.dataset, r.model_id))
    return done, failed


def crashed_mask(metrics: pd.DataFrame) -> np.ndarray:
    """Boolean mask of the rows a crashed task left (a worker that died or raised:
    ``"crashed": true`` in params); such rows hold no result and are retried."""
    if metrics.empty or "params" not in metrics:
        return np.zeros(len(metrics), dtype=bool)
    return metrics["params"].astype(str).str.contains('"crashed": true', regex=False).to_numpy()


def existing_fingerprints(metrics: pd.DataFrame) -> dict[tuple[str, str, str], str]:
    """(model_id, dataset, metric) → stored fingerprint; rows of a crashed task are left out
    (:func:`crashed_mask`), so a rerun computes them again."""
    if metrics.empty or "fingerprint" not in metrics:
        return {}
    metrics = metrics[~crashed_mask(metrics)]
    return {
        (r.model_id, r.dataset, r.metric): r.fingerprint
        for r in metrics[METRICS_KEY + ["fingerprint"]].itertuples(index=False)
    }


def metric_fingerprint(
    metric: str, dataset: str, view: str | None, entry: str | None, options: ScoreOptions,
    seed: int,
) -> str:
    """Fingerprint of one per-model metric row (before running it)."""
    base, _ = registry.split_view(metric)
    samples = options.max_samples if metric_inputs(base) == "clean" else None
    return fingerprint(
        "metric", metric, dataset, view, entry, metric_settings(base, options, seed), samples,
        seed, SCORE_VERSION, registry.info(base).version,
    )


def group_fingerprint(
    dataset: str, group: str, entries: Iterable[tuple[str, str]], options: ScoreOptions, seed: int
) -> str:
    ensemble = registry.ensemble_metric()
    return fingerprint(
        ensemble.name, dataset, group, sorted(entries), ensemble.kwargs(options, seed),
        options.max_samples, seed, SCORE_VERSION, ensemble.version,
    )


def pool_fingerprint(
    metric: str, dataset: str, term_fingerprints: Iterable[tuple[str, str, str | None]],
    extra: dict[str, Any] | None = None,
) -> str:
    """Fingerprint of a pool metric's rows from its candidates' (model, term, term fingerprint)."""
    return fingerprint(metric, dataset, sorted(term_fingerprints, key=lambda t: (t[0], t[1])),
                       extra, registry.info(metric).version)


def plan_score(
    config: RunConfig,
    models: list[ModelInfo],
    manifest: pd.DataFrame,
    metrics: pd.DataFrame,
    reliability_exists: Any = lambda dataset, group: True,
) -> ScorePlan:
    """Which (dataset, model) metrics and which ensembles need computing; the rest is up to date."""
    options, seed = config.score, config.seed
    done, failed = entry_fingerprints(manifest)
    shards = entry_shards(manifest)
    stored = existing_fingerprints(metrics)
    clean = config.clean_view.name if config.clean_view else None
    augmented_views = [v.name for v in config.augmented_views]
    augmented = augmented_views[0] if augmented_views else None
    # metrics the views make impossible are not planned (SCORE says so in one line)
    base = [m for m in per_model_metrics(config.metrics) if view_reason(config, m) is None]
    # every augmented view is scored: the first under the plain names, the others as <name>@<view>
    wanted = [(m, clean if metric_inputs(m) == "clean" else augmented) for m in base]
    wanted += [(f"{m}@{v}", v) for v in augmented_views[1:] for m in base
               if metric_inputs(m) == "augmented"]
    plan = ScorePlan()
    for dataset in (d.name for d in config.datasets):
        plan.eligible[dataset] = []
        members: dict[str, list[str]] = defaultdict(list)
        for model in models:
            mid = model.model_id
            if not wants(model, dataset):
                continue  # the model entry restricts it to other datasets
            if (dataset, mid) in failed:
                plan.failed.append((dataset, mid))
                continue
            clean_fp = done.get((dataset, clean, mid)) if clean else None
            aug_fp = done.get((dataset, augmented, mid)) if augmented else None
            if clean_fp is None and not any((dataset, v, mid) in done for v in augmented_views):
                plan.missing.append((dataset, mid))
                continue
            plan.eligible[dataset].append(mid)
            if model.group and clean_fp is not None:
                members[model.group].append(mid)
            todo, fps = [], []
            for metric, view in wanted:
                entry = done.get((dataset, view, mid)) if view else None
                fp = metric_fingerprint(metric, dataset, view, entry, options, seed)
                if stored.get((mid, dataset, metric)) != fp:
                    todo.append(metric)
                    fps.append((metric, fp))
            if todo:
                reads = {view for metric, view in wanted if metric in todo and view}
                plan.model_tasks.append(
                    ModelTask(dataset, mid, clean if clean_fp else None,
                              augmented if aug_fp else None, tuple(todo), tuple(fps),
                              tuple((v, shards.get((dataset, v, mid))) for v in sorted(reads)
                                    if (dataset, v, mid) in done))
                )
            else:
                plan.up_to_date += 1
        if not ensemble_metrics(config):
            continue
        plan.ensembles[dataset] = {}
        for group, ids in sorted(members.items()):
            if len(ids) < 2:
                continue
            plan.ensembles[dataset][group] = tuple(ids)
            fp = group_fingerprint(
                dataset, group, [(m, done[(dataset, clean, m)]) for m in ids], options, seed
            )
            current = all(stored.get((m, dataset, registry.ensemble_metric().name)) == fp
                          for m in ids)
            if not (current and reliability_exists(dataset, group)):
                plan.group_tasks.append(GroupTask(
                    dataset, group, tuple(ids), clean, fp,
                    tuple((m, shards.get((dataset, clean, m))) for m in ids)))
    return plan


def remaining_plan(expected: ScorePlan, stored: dict[tuple[str, str, str], str],
                   reliability_exists: Any = lambda dataset, group: True) -> ScorePlan:
    """``expected`` (:func:`plan_score` with nothing stored) minus the rows ``stored`` holds with
    their expected fingerprint: what :func:`plan_score` gives with those rows stored."""
    plan = ScorePlan(eligible={d: list(ids) for d, ids in expected.eligible.items()},
                     missing=list(expected.missing), failed=list(expected.failed),
                     ensembles={d: dict(g) for d, g in expected.ensembles.items()},
                     up_to_date=expected.up_to_date)
    for task in expected.model_tasks:
        fps = tuple((m, fp) for m, fp in task.fingerprints
                    if stored.get((task.model_id, task.dataset, m)) != fp)
        if fps:
            plan.model_tasks.append(dataclasses.replace(
                task, metrics=tuple(m for m, _ in fps), fingerprints=fps))
        else:
            plan.up_to_date += 1
    for g in expected.group_tasks:
        current = all(stored.get((m, g.dataset, registry.ensemble_metric().name)) == g.fingerprint
                      for m in g.members)
        if not (current and reliability_exists(g.dataset, g.group)):
            plan.group_tasks.append(g)
    return plan


def clid_pools(
    config: RunConfig, models: list[ModelInfo], plan: ScorePlan
) -> list[tuple[str, str, list[str], dict[str, Any] | None]]:
    """(metric, dataset, members, extra) of every pool of every configured pool metric (registry
    inputs ``pool``): over each dataset's eligible models, or per value of the metric's
    :func:`pool_key` (``clid_family``: per family, ``extra`` = ``{"family": …}``)."""
    out: list[tuple[str, str, list[str], dict[str, Any] | None]] = []
    for metric in pool_metrics(config):
        by = pool_key(metric)
        for dataset, ids in plan.eligible.items():
            if not ids:
                continue
            if by is None:
                out.append((metric, dataset, ids, None))
                continue
            value_of = {m.model_id: getattr(m, by, None) for m in models}
            groups: dict[str, list[str]] = defaultdict(list)
            for m in ids:
                if value_of.get(m):
                    groups[value_of[m]].append(m)
            out += [(metric, dataset, members, {by: value})
                    for value, members in sorted(groups.items())]
    return out


def expected_pool_fingerprint(
    metric: str, dataset: str, members: list[str], extra: dict[str, Any] | None,
    fingerprints: dict[tuple[str, str, str], str],
) -> str:
    """A pool's fingerprint from the expected fingerprints (model, dataset, term) of its members'
    required terms (what :func:`pool_fingerprint` gives the rows SCORE writes)."""
    terms = [(m, t, fingerprints.get((m, dataset, t)))
             for m in members for t in registry.info(metric).requires]
    return pool_fingerprint(metric, dataset, terms, extra)


def reliability_path(dataset: str, group: str) -> str:
    """Where a seed ensemble's per-sample reliability table lives in the store."""
    return layout.reliability_file(dataset, group)


