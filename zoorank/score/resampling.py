"""Resampled SCORE rows (rank uncertainty, :mod:`zoorank.oracle.resample`) and embedding health: per model
on Ray through :func:`zoorank.tasks.runner.run_tasks`, NC and CLID folds on the driver."""

from __future__ import annotations

import contextlib
import math
from dataclasses import dataclass
from typing import Any

import numpy as np
import pandas as pd

from zoorank.catalog import (
    CLID_TERMS,
    ModelInfo,
    ScorePlan,
    clid_pools,
    entry_fingerprints,
    entry_shards,
    reliability_path,
)
from zoorank.config import RunConfig, ScoreOptions
from zoorank.metrics import registry
from zoorank.metrics.suite import metric_inputs
from zoorank.score.worker import limit_threads, load_augmented, load_clean, pool_size
from zoorank.store import Store
from zoorank.tasks.runner import Task, run_tasks

# -- resampled rows (rank uncertainty) and embedding health --------------------------------------


@dataclass(frozen=True)
class ResampleTask:
    """Fold rows and the health row to compute for one (dataset, model)."""

    dataset: str
    model_id: str
    clean_view: str | None
    augmented_view: str | None
    metrics: tuple[tuple[str, str], ...]  # (metric, fold fingerprint)
    health_fingerprint: str | None  # None: the health row is up to date (or no clean view)
    #: shard names of the clean and augmented entries (the same manifest snapshot as the
    #: fingerprints; None: the row lists none)
    clean_shards: tuple[str, ...] | None = None
    augmented_shards: tuple[str, ...] | None = None


def resample_model(store_uri: str, options: dict, seed: int, threads: int,
                   task: ResampleTask) -> tuple[list[dict[str, Any]], dict[str, Any] | None]:
    """(fold rows, health row or None) of one (dataset, model): reads its embeddings."""
    from zoorank.score import fold_rows
    from zoorank.stats.health import embedding_health

    limit_threads(threads)
    store, o = Store(store_uri), ScoreOptions.model_validate(options)
    names = [m for m, _ in task.metrics]
    clean_ids = clean = aug_ids = views = None
    if task.clean_view:
        clean_ids, clean = load_clean(store, task.dataset, task.clean_view, task.model_id,
                                      o.max_samples, seed, _names(task.clean_shards))
    if task.augmented_view and any(metric_inputs(m) == "augmented" for m in names):
        aug_ids, views = load_augmented(store, task.dataset, task.augmented_view, task.model_id,
                                        _names(task.augmented_shards))
    rows: list[dict[str, Any]] = []
    if names:
        values = fold_rows.fold_values(clean_ids, clean, aug_ids, views, names, o, seed)
        for metric, fp in task.metrics:
            rows += fold_rows.fold_rows(task.model_id, task.dataset, metric, values[metric], fp)
    health = None
    if task.health_fingerprint and clean is not None:
        health = {"model_id": task.model_id, "dataset": task.dataset, **embedding_health(clean),
                  "fingerprint": task.health_fingerprint}
    return rows, health


def _names(shards: tuple[str, ...] | None) -> list[str] | None:
    return None if shards is None else list(shards)


def score_resamples(config: RunConfig, store: Store, models: list[ModelInfo], plan: ScorePlan,
                    manifest: pd.DataFrame, address: str | None = None) -> list[str]:
    """Fold rows of every ranked metric (per model on Ray; NC and CLID pools on the driver) and
    the health rows, for the rows that are not up to date (:mod:`zoorank.oracle.resample`); returns the
    errors (a failed task leaves its rows missing, so a rerun tries it again)."""
    from zoorank.oracle import resample
    from zoorank.score import fold_rows

    o = config.score
    if not resample.enabled(o):
        return []
    metrics = store.read_metrics()
    stored = store.read_frame(resample.RESAMPLES, resample.RESAMPLES_COLUMNS)
    have = stored.groupby(["model_id", "dataset", "metric", "fingerprint"]).size().to_dict() \
        if not stored.empty else {}
    health = store.read_frame(resample.HEALTH, resample.HEALTH_COLUMNS)
    health_fps = dict(zip(zip(health["model_id"], health["dataset"]), health["fingerprint"]))
    main = {} if metrics.empty else {
        (r.model_id, r.dataset, r.metric): (r.fingerprint, r.value)
        for r in metrics[["model_id", "dataset", "metric", "fingerprint", "value"]]
        .itertuples(index=False)}

    def todo(mid: str, dataset: str, metric: str) -> str | None:
        """The fold fingerprint when (mid, dataset, metric) has a finite value and stale folds."""
        fp, value = main.get((mid, dataset, metric), (None, math.nan))
        if fp is None or not math.isfinite(value):
            return None
        ffp = resample.fold_fingerprint(fp, o)
        return None if have.get((mid, dataset, metric, ffp), 0) == o.resample_folds else ffp

    done, _ = entry_fingerprints(manifest)
    shards = entry_shards(manifest)
    clean = config.clean_view.name if config.clean_view else None
    augmented = config.augmented_views[0].name if config.augmented_views else None
    names = fold_rows.resampled_metrics(config)
    tasks = []
    for dataset, ids in plan.eligible.items():
        for mid in ids:
            wanted = tuple((m, f) for m in names if (f := todo(mid, dataset, m)))
            clean_fp = done.get((dataset, clean, mid)) if clean else None
            hfp = resample.health_fingerprint(clean_fp) if clean_fp else None
            hfp = hfp if hfp and health_fps.get((mid, dataset)) != hfp else None
            if wanted or hfp:
                aug = augmented if (dataset, augmented, mid) in done else None
                tasks.append(ResampleTask(dataset, mid, clean if clean_fp else None, aug, wanted,
                                          hfp, shards.get((dataset, clean, mid)),
                                          shards.get((dataset, aug, mid)) if aug else None))
    errors: list[str] = []
    if tasks:
        import ray

        from zoorank.runtime import ensure_ray

        ensure_ray(address)
        resources = ray.cluster_resources()
        n_workers, gpus, threads = pool_size(len(tasks), o.num_cpus_per_actor,
                                             resources.get("CPU", 1.0), 0.0,
                                             object_store=not store.is_local)
        args = (store.uri, o.model_dump(mode="json"), config.seed, threads)
        # the same runner and failure contract as every stage's Ray work: a task that raises or
        # whose worker dies is recorded, the others go on, the next run tries it again
        results = run_tasks(resample_model, [Task(i, (*args, t)) for i, t in enumerate(tasks)],
                            options={"num_cpus": o.num_cpus_per_actor}, max_in_flight=n_workers,
                            reruns=1, label="score: resamples")
        # rows are committed per K models or T seconds (zoorank.store.batching)
        with contextlib.closing(results), \
                store.batched(resample.RESAMPLES, resample.RESAMPLES_KEY) as folds_out, \
                store.batched(resample.HEALTH, resample.HEALTH_KEY) as health_out:
            for outcome in results:
                task = tasks[outcome.task.key]
                if not outcome.ok:
                    errors.append(f"{task.dataset}/{task.model_id}: resampling failed: "
                                  f"{outcome.error}")
                    continue
                rows, row = outcome.value
                folds_out.add(rows)
                if row is not None:
                    health_out.add([row])
        stored = store.read_frame(resample.RESAMPLES, resample.RESAMPLES_COLUMNS)
    # driver: NC's fold means from its per-sample table, then CLID on each fold over its pool
    pooled: list[dict[str, Any]] = []
    for dataset, groups in plan.ensembles.items():
        for group, members in groups.items():
            nc = registry.ensemble_metric().name
            wanted_nc = [(m, f) for m in members if (f := todo(m, dataset, nc))]
            if not wanted_nc or not store.exists(reliability_path(dataset, group)):
                continue
            values = fold_rows.nc_fold_values(store.read_frame(reliability_path(dataset, group)),
                                              o, config.seed)
            for m, f in wanted_nc:
                pooled += fold_rows.fold_rows(m, dataset, nc, values, f)
    fresh = resample.fresh_resamples(store, metrics, o) if not stored.empty else stored
    folds = {(r.model_id, r.dataset, r.metric, int(r.fold)): float(r.value)
             for r in fresh.itertuples(index=False)}
    for metric, dataset, members, _ in clid_pools(config, models, plan):
        live = [m for m in members if math.isfinite(main.get((m, dataset, metric), (0, math.nan))[1])]
        if not any(todo(m, dataset, metric) for m in live):
            continue
        # the z-scores of a fold are over the whole pool, so every member's folds are rewritten
        wanted_clid = [(m, resample.fold_fingerprint(main[(m, dataset, metric)][0], o))
                       for m in live]
        F = o.resample_folds
        cl, id_ = (np.array([[folds.get((m, dataset, t, k), math.nan) for k in range(F)]
                             for m, _ in wanted_clid]) for t in CLID_TERMS)
        values = fold_rows.clid_fold_values(cl, id_)
        for (m, f), row in zip(wanted_clid, values):
            pooled += fold_rows.fold_rows(m, dataset, metric, row, f)
    if pooled:
        store.upsert_rows(resample.RESAMPLES, pooled, key=resample.RESAMPLES_KEY)
    return errors
