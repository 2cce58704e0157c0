"""SCORE stage: stored embeddings → ``metrics.parquet`` and per-ensemble reliability tables.

Orchestration only; the maths is :mod:`zoorank.metrics.suite` over the contract-3 functions.

1. Plan (driver, pure): for every dataset × resolved model whose embeddings are ``done`` in the
   manifest (and none ``failed``), the per-model metrics whose stored fingerprint is missing or
   different; for every seed ensemble (models sharing a ``group``, ≥ 2 done members) its NC unless
   up to date. A metric row's fingerprint hashes the manifest fingerprints of the embeddings it
   reads, its settings, ``max_samples``, the run seed and the zoorank version.
2. Run: Ray tasks on :func:`zoorank.runner.run_tasks` (``num_cpus=score.num_cpus_per_actor``;
   one per core at once on CPU, one per GPU when the cluster has GPUs; either way each task's
   BLAS/faiss threads share out the cores), each reading one model's shards (or one ensemble's)
   from the store; a task that raises or whose worker dies leaves NaN rows marked ``crashed``
   with the reason (a rerun retries them); the
   driver upserts the rows into ``metrics.parquet`` as results arrive, so an interrupted run keeps
   what it finished and a rerun skips it.
3. Pool level (driver): ``clid`` = z(CL) + z(ID) over the dataset's pool of models, ``clid_family``
   within each ``family``; recomputed whenever a pool member's CL or ID row changes.

Failed models (manifest status ``failed``) get no metrics (rows left from an earlier success are
removed), nor do models outside a seed ensemble get ``nc``; the leaderboard lists failed models
from the manifest.
"""

from __future__ import annotations

import contextlib
import json
import math
import time
import warnings
from collections import defaultdict
from collections.abc import Iterable
from dataclasses import dataclass
from typing import Any

import numpy as np
import pandas as pd

import zoorank
from zoorank.catalog import Catalog, build_catalog
from zoorank.catalog.scoring import (  # noqa: F401  (re-exported: the stage's planning API)
    CLID_TERMS,
    METRICS_KEY,
    SCORE_VERSION,
    GroupTask,
    ModelInfo,
    ModelTask,
    ScorePlan,
    clid_pools,
    existing_fingerprints,
    group_fingerprint,
    metric_fingerprint,
    plan_score,
    pool_fingerprint,
    reliability_path,
)
from zoorank.config import RunConfig, ScoreOptions
from zoorank.metrics import registry
from zoorank.metrics.suite import (
    ensemble_reliability,
    label_free_suite,
    metric_inputs,
    nc_settings,
    per_model_metrics,
    select_samples,
)
from zoorank.runner import Task, run_tasks
from zoorank.store import METRICS, METRICS_COLUMNS, Store
from zoorank.store.layout import reliability_dir

# -- rows ------------------------------------------------------------------------------------------


def _finite_json(value: Any) -> Any:
    if isinstance(value, float) and not math.isfinite(value):
        return str(value)  # strict JSON has no NaN/Inf (DuckDB's json functions reject them)
    if isinstance(value, dict):
        return {k: _finite_json(v) for k, v in value.items()}
    if isinstance(value, (list, tuple)):
        return [_finite_json(v) for v in value]
    return value


def _params_json(params: dict[str, Any]) -> str:
    return json.dumps(_finite_json(params), sort_keys=True, allow_nan=False, default=str)


def metric_row(
    model_id: str, dataset: str, metric: str, value: float, params: dict[str, Any], n: int,
    dim: int, seed: int, fp: str,
) -> dict[str, Any]:
    """One ``metrics.parquet`` row (contract 2 columns plus ``fingerprint``)."""
    return {
        "model_id": model_id,
        "dataset": dataset,
        "metric": metric,
        "value": float(value),
        "params": _params_json(params),
        "n": int(n),
        "dim": int(dim),
        "seed": int(seed),
        "zoorank_version": zoorank.__version__,
        "fingerprint": fp,
    }


# -- reading embeddings -------------------------------------------------------------------------


def load_clean(
    store: Store, dataset: str, view: str, model_id: str, max_samples: int | None, seed: int
) -> tuple[np.ndarray, np.ndarray]:
    """(sample_ids, n × d) clean embeddings, capped to ``max_samples`` deterministically."""
    emb = store.read_embeddings(dataset, view, model_id)
    first = emb.view_index == emb.view_index.min() if len(emb.view_index) else slice(None)
    ids, Z = emb.sample_id[first], emb.embedding[first]
    keep = select_samples(ids, max_samples, seed)
    return ids[keep], Z[keep]


def load_augmented(
    store: Store, dataset: str, view: str, model_id: str
) -> tuple[np.ndarray, np.ndarray]:
    """(sample_ids, n × q × d) augmented views grouped by clean sample."""
    return store.read_embeddings(dataset, view, model_id).grouped()


# -- the worker -----------------------------------------------------------------------------------


class ScoreWorker:
    """Scores one model (or one ensemble) at a time; reads its embeddings from the store."""

    def __init__(self, store_uri: str, options: dict, seed: int, metrics: list[str],
                 threads: int, entries: list[registry.MetricInfo] = ()):
        registry.install(entries)  # metrics registered at run time on the driver
        self.store = Store(store_uri)
        self.options = ScoreOptions.model_validate(options)
        self.seed = seed
        self.metrics = metrics
        _limit_threads(threads)

    def ready(self) -> bool:
        return True

    def score_model(self, task: ModelTask) -> list[dict[str, Any]]:
        o, seed = self.options, self.seed
        clean = views = None
        problems: dict[str, str] = {}
        if task.clean_view:
            _, clean = load_clean(self.store, task.dataset, task.clean_view, task.model_id,
                                  o.max_samples, seed)
        else:
            problems["clean"] = "no done clean embeddings for this model (config.views / manifest)"
        by_view: dict[str | None, list[str]] = defaultdict(list)
        for name in task.metrics:
            by_view[registry.split_view(name)[1]].append(registry.split_view(name)[0])
        fps = dict(task.fingerprints)
        rows = []
        for extra_view, names in by_view.items():
            view = extra_view or task.augmented_view
            views = None
            if view is None:
                problems["augmented"] = "no done augmented view for this model (config.views)"
            elif any(metric_inputs(m) == "augmented" for m in names):
                try:
                    _, views = load_augmented(self.store, task.dataset, view, task.model_id)
                    problems.pop("augmented", None)
                except (ValueError, OSError) as err:
                    problems["augmented"] = f"view {view!r}: {type(err).__name__}: {err}"
            for r in label_free_suite(clean if extra_view is None else None, views, names, o,
                                      seed):
                params = r["params"]
                reason = problems.get(params["view"])
                if reason and "error" in params:
                    params["error"] = f"{params['error']}: {reason}"
                name = r["metric"] if extra_view is None else f"{r['metric']}@{extra_view}"
                if extra_view is not None:
                    params["augmented_view"] = extra_view
                rows.append(metric_row(task.model_id, task.dataset, name, r["value"], params,
                                       r["n"], r["dim"], seed, fps[name]))
        return rows

    def score_group(self, task: GroupTask) -> tuple[list[dict[str, Any]], pd.DataFrame | None]:
        o, seed = self.options, self.seed
        loaded = [load_clean(self.store, task.dataset, task.clean_view, m, o.max_samples, seed)
                  for m in task.members]
        common = loaded[0][0]
        for ids, _ in loaded[1:]:
            common = np.intersect1d(common, ids)
        members = [Z[np.searchsorted(ids, common)] for ids, Z in loaded]
        params: dict[str, Any] = {"group": task.group, "members_ids": list(task.members)}
        start = time.perf_counter()
        try:
            table, nc_params = ensemble_reliability(members, common, o, seed)
            params.update(nc_params)
            value, n, frame = float(np.mean(table["nc"])), nc_params["n_test"], pd.DataFrame(table)
        except ValueError as err:
            params.update(nc_settings(o, seed))
            params["error"] = str(err)
            value, n, frame = math.nan, 0, None
        params["seconds"] = round(time.perf_counter() - start, 4)
        rows = [
            metric_row(m, task.dataset, "nc", value, params, n, Z.shape[1], seed,
                       task.fingerprint)
            for m, Z in zip(task.members, members)
        ]
        return rows, frame


def _limit_threads(threads: int) -> None:
    """BLAS/OpenMP threads of this worker (Ray gives fractional-CPU actors one thread by default)."""
    import os

    os.environ["OMP_NUM_THREADS"] = str(threads)
    from threadpoolctl import threadpool_limits

    threadpool_limits(limits=threads)
    try:
        import faiss

        faiss.omp_set_num_threads(threads)
    except ImportError:  # pragma: no cover - faiss is a dependency
        pass


# -- pool-level scores -------------------------------------------------------------------------------


def _finite_terms(metrics: pd.DataFrame, dataset: str, model_ids: list[str],
                  needed: Iterable[str] = CLID_TERMS) -> dict[str, Any]:
    """model_id → {metric: (value, fingerprint, n, dim)} for a pool metric's terms."""
    sub = metrics[(metrics["dataset"] == dataset) & metrics["metric"].isin(list(needed))
                  & metrics["model_id"].isin(model_ids)]
    terms: dict[str, dict[str, tuple]] = defaultdict(dict)
    for r in sub.itertuples(index=False):
        terms[r.model_id][r.metric] = (float(r.value), r.fingerprint, int(r.n), int(r.dim))
    return terms


def pool_rows(
    metric: str, dataset: str, model_ids: list[str], metrics: pd.DataFrame, seed: int,
    extra: dict[str, Any] | None = None,
) -> list[dict[str, Any]]:
    """Rows of a pool metric (CLID: z(CL) + z(ID)) over the pool of ``model_ids`` whose terms
    (the registry's ``requires``) are all finite; its registered ``combine`` computes the values.

    Every candidate gets a row: the pool members a finite value, the others NaN with the reason;
    when the combination fails (CLID: fewer than 2 pool members) every row is NaN with the reason.
    The fingerprint hashes the candidates' term fingerprints, so any change in the pool recomputes it.
    """
    entry = registry.info(metric)
    needed = entry.requires
    terms = _finite_terms(metrics, dataset, model_ids, needed)
    fp = pool_fingerprint(
        metric, dataset,
        [(m, t, terms.get(m, {}).get(t, (None, None))[1]) for m in model_ids for t in needed],
        extra,
    )
    pool = [m for m in model_ids
            if all(t in terms[m] and math.isfinite(terms[m][t][0]) for t in needed)]
    base = {**entry.kwargs(), "terms": list(needed), "pool": pool, "pool_size": len(pool),
            **(extra or {})}
    values: dict[str, float] = {}
    failure = None
    if pool:
        arrays = [np.array([terms[m][t][0] for m in pool]) for t in needed]
        with warnings.catch_warnings(record=True) as caught:
            warnings.simplefilter("always")
            try:
                values = dict(zip(pool, entry.combine(*arrays, **entry.kwargs())))
            except ValueError as err:
                failure = f"{metric} over {len(pool)} model(s): {err}"
        if caught:
            base["warnings"] = [str(w.message) for w in caught]
    else:
        failure = f"{metric} needs models with every term finite ({list(needed)}); got none"
    rows = []
    for m in model_ids:
        params = dict(base)
        _, _, n, dim = terms.get(m, {}).get(needed[0], (0, None, 0, 0))
        if m in values:
            params.update({t: terms[m][t][0] for t in needed})
            value = float(values[m])
        elif m not in pool:
            value = math.nan
            params["error"] = (f"a term of {metric} ({list(needed)}) is undefined for this model "
                               "(see its rows)")
        else:
            value = math.nan
            params["error"] = failure
        rows.append(metric_row(m, dataset, metric, value, params, n, dim, seed, fp))
    return rows


def plan_pool_rows(
    config: RunConfig, models: list[ModelInfo], plan: ScorePlan, metrics: pd.DataFrame
) -> list[dict[str, Any]]:
    """The ``clid`` / ``clid_family`` rows whose fingerprint changed (empty when up to date)."""
    stored = existing_fingerprints(metrics)
    out = []
    for metric, dataset, members, extra in clid_pools(config, models, plan):
        rows = pool_rows(metric, dataset, members, metrics, config.seed, extra=extra)
        if any(stored.get((r["model_id"], dataset, r["metric"])) != r["fingerprint"]
               for r in rows):
            out.extend(rows)
    return out


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


def resample_model(store_uri: str, options: dict, seed: int, threads: int,
                   task: ResampleTask) -> tuple[list[dict[str, Any]], dict[str, Any] | None]:
    """(fold rows, health row or None) of one (dataset, model): reads its embeddings."""
    from zoorank import resample
    from zoorank.metrics.health import embedding_health

    _limit_threads(threads)
    store, o = Store(store_uri), ScoreOptions.model_validate(options)
    names = [m for m, _ in task.metrics]
    clean_ids = clean = aug_ids = views = None
    if task.clean_view:
        clean_ids, clean = load_clean(store, task.dataset, task.clean_view, task.model_id,
                                      o.max_samples, seed)
    if task.augmented_view and any(metric_inputs(m) == "augmented" for m in names):
        aug_ids, views = load_augmented(store, task.dataset, task.augmented_view, task.model_id)
    rows: list[dict[str, Any]] = []
    if names:
        values = resample.fold_values(clean_ids, clean, aug_ids, views, names, o, seed)
        for metric, fp in task.metrics:
            rows += resample.fold_rows(task.model_id, task.dataset, metric, values[metric], fp)
    health = None
    if task.health_fingerprint and clean is not None:
        health = {"model_id": task.model_id, "dataset": task.dataset, **embedding_health(clean),
                  "fingerprint": task.health_fingerprint}
    return rows, health


def score_resamples(config: RunConfig, store: Store, models: list[ModelInfo], plan: ScorePlan,
                    manifest: pd.DataFrame, address: str | None = None) -> list[str]:
    """Fold rows of every ranked metric (per model on Ray; NC and CLID pools on the driver) and
    the health rows, for the rows that are not up to date (:mod:`zoorank.resample`); returns the
    errors (a failed task leaves its rows missing, so a rerun retries it)."""
    from zoorank import resample

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

    from zoorank.catalog.scoring import _entry_fingerprints

    done, _ = _entry_fingerprints(manifest)
    clean = config.clean_view.name if config.clean_view else None
    augmented = config.augmented_views[0].name if config.augmented_views else None
    names = resample.resampled_metrics(config)
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
                                          hfp))
    errors: list[str] = []
    if tasks:
        import ray

        from zoorank.runtime import ensure_ray

        ensure_ray(address)
        resources = ray.cluster_resources()
        n_workers, gpus, threads = pool_size(len(tasks), o.num_cpus_per_actor,
                                             resources.get("CPU", 1.0), 0.0)
        args = (store.uri, o.model_dump(mode="json"), config.seed, threads)
        fold_buf: list[dict[str, Any]] = []
        health_buf: list[dict[str, Any]] = []

        def flush() -> None:
            if fold_buf:
                store.upsert_rows(resample.RESAMPLES, fold_buf, key=resample.RESAMPLES_KEY)
            if health_buf:
                store.upsert_rows(resample.HEALTH, health_buf, key=resample.HEALTH_KEY)
            fold_buf.clear()
            health_buf.clear()

        # the same runner and failure contract as every stage's Ray work: a task that raises or
        # whose worker dies is recorded, the others go on, the next run retries it
        results = run_tasks(resample_model, [Task(i, (*args, t)) for i, t in enumerate(tasks)],
                            options={"num_cpus": o.num_cpus_per_actor}, max_in_flight=n_workers,
                            retries=1, label="score: resamples")
        with contextlib.closing(results):
            for outcome in results:
                task = tasks[outcome.task.key]
                if not outcome.ok:
                    errors.append(f"{task.dataset}/{task.model_id}: resampling failed: "
                                  f"{outcome.error}")
                    continue
                rows, row = outcome.value
                fold_buf.extend(rows)
                if row is not None:
                    health_buf.append(row)
                if len(fold_buf) >= 2000:
                    flush()
        flush()
        stored = store.read_frame(resample.RESAMPLES, resample.RESAMPLES_COLUMNS)
    # driver: NC's fold means from its per-sample table, then CLID on each fold over its pool
    pooled: list[dict[str, Any]] = []
    for dataset, groups in plan.ensembles.items():
        for group, members in groups.items():
            wanted_nc = [(m, f) for m in members if (f := todo(m, dataset, "nc"))]
            if not wanted_nc or not store.exists(reliability_path(dataset, group)):
                continue
            values = resample.nc_fold_values(store.read_frame(reliability_path(dataset, group)),
                                              o, config.seed)
            for m, f in wanted_nc:
                pooled += resample.fold_rows(m, dataset, "nc", values, f)
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
        values = resample.clid_fold_values(cl, id_)
        for (m, f), row in zip(wanted_clid, values):
            pooled += resample.fold_rows(m, dataset, metric, row, f)
    if pooled:
        store.upsert_rows(resample.RESAMPLES, pooled, key=resample.RESAMPLES_KEY)
    return errors


# -- the stage --------------------------------------------------------------------------------------


def _drop_stale(store: Store, plan: ScorePlan, metrics: pd.DataFrame) -> None:
    """Remove rows and tables of ``metrics`` (as read for the plan) that no longer describe the zoo.

    Failed models get no metrics (rows left from an earlier success go). A model that left its
    seed ensemble (or whose ensemble fell below two scorable members) keeps no ``nc`` row, and a
    group that is no longer an ensemble keeps no ``reliability/<dataset>/<group>`` table.
    """
    if not metrics.empty:
        keys = pd.MultiIndex.from_frame(metrics[["dataset", "model_id"]])
        members = [(d, m) for d, groups in plan.ensembles.items() for ids in groups.values()
                   for m in ids]
        nc = (metrics["metric"] == "nc") & metrics["dataset"].isin(list(plan.ensembles))
        stale = keys.isin(plan.failed) | (nc.to_numpy() & ~keys.isin(members))
        if stale.any():
            store.delete_rows(METRICS, metrics[stale], METRICS_KEY)
    for dataset, groups in plan.ensembles.items():
        for file in store.list_files(reliability_dir(dataset), suffix=".parquet"):
            if file.removesuffix(".parquet") not in groups:
                store.delete(reliability_path(dataset, file.removesuffix(".parquet")))


def pool_size(n_tasks: int, num_cpus_per_actor: float, cpus: float, gpus: float) -> tuple[int, float, int]:
    """(actors, GPUs per actor, BLAS threads per actor) for a cluster with ``cpus`` and ``gpus``."""
    if gpus >= 1:
        # One actor per GPU (faiss-gpu neighbours), each with its share of the cores: the rest of
        # the suite is BLAS on the CPU, and one thread per actor left most cores idle (bench_scale).
        actors = max(1, min(n_tasks, int(gpus)))
        return actors, 1.0, max(1, int(num_cpus_per_actor), int(cpus // actors))
    # One actor per core keeps every core busy; each actor reserves only a fraction of a CPU, so
    # the pool never starves other Ray work (the 2-core deadlock of ENVIRONMENT.md).
    actors = max(1, min(n_tasks, int(cpus)))
    return actors, 0.0, max(1, int(cpus // actors))


def _score_task(store_uri: str, options: dict, seed: int, metrics: list[str], threads: int,
                entries: list[registry.MetricInfo], task: ModelTask | GroupTask) -> Any:
    """Ray task body: score one model (or one ensemble) with a :class:`ScoreWorker`
    (``entries``: the registry entries of the metrics, for metrics registered at run time)."""
    worker = ScoreWorker(store_uri, options, seed, metrics, threads, entries)
    return worker.score_group(task) if isinstance(task, GroupTask) else worker.score_model(task)


def _execute(store: Store, config: RunConfig, plan: ScorePlan, on_done) -> list[str]:
    """Run every task on :func:`zoorank.runner.run_tasks`, ``pool_size`` at once;
    ``on_done(task, result, error)`` as results arrive (``result`` None and ``error`` the reason
    when the task raised or its worker died)."""
    import ray

    tasks: list[ModelTask | GroupTask] = [*plan.model_tasks, *plan.group_tasks]
    resources = ray.cluster_resources()
    n_workers, gpus, threads = pool_size(len(tasks), config.score.num_cpus_per_actor,
                                         resources.get("CPU", 1.0), resources.get("GPU", 0.0))
    args = (store.uri, config.score.model_dump(mode="json"), config.seed, list(config.metrics),
            threads, registry.portable(per_model_metrics(config.metrics)))
    results = run_tasks(_score_task, [Task(i, (*args, t)) for i, t in enumerate(tasks)],
                        options={"num_cpus": config.score.num_cpus_per_actor, "num_gpus": gpus},
                        max_in_flight=n_workers, retries=1, label="score: models")
    errors: list[str] = []
    with contextlib.closing(results):
        for outcome in results:
            task = tasks[outcome.task.key]
            if outcome.ok:
                on_done(task, outcome.value, None)
                continue
            errors.append(f"{_task_name(task)}: {outcome.error}")
            on_done(task, None, outcome.error)
    return errors


def crashed_rows(task: ModelTask | GroupTask, error: str, seed: int) -> list[dict[str, Any]]:
    """NaN rows with the reason for every metric of a task that raised or whose worker died.

    They carry the task's fingerprints (the leaderboard shows the metric as missing, with the
    reason) and ``"crashed": true``, so the next run retries them.
    """
    params = {"error": f"score task failed: {error}", "crashed": True}
    if isinstance(task, GroupTask):
        return [metric_row(m, task.dataset, "nc", math.nan, params, 0, 0, seed, task.fingerprint)
                for m in task.members]
    return [metric_row(task.model_id, task.dataset, metric, math.nan, params, 0, 0, seed, fp)
            for metric, fp in task.fingerprints]


def _task_name(task: ModelTask | GroupTask) -> str:
    if isinstance(task, GroupTask):
        return f"{task.dataset}/ensemble {task.group}"
    return f"{task.dataset}/{task.model_id}"


def run_score(config: RunConfig, address: str | None = None, catalog: Catalog | None = None
              ) -> pd.DataFrame:
    """The SCORE stage: the catalog's metric rows minus the fresh stored ones → run → commit;
    returns the whole metrics table (``metrics.parquet``)."""
    from rich.console import Console

    console = Console(stderr=True)
    start = time.perf_counter()
    store = Store(config.store)
    catalog = build_catalog(config) if catalog is None else catalog
    models = catalog.models
    metrics = store.read_metrics()
    manifest = catalog.fresh_manifest(store.read_manifest())
    plan = catalog.plan_score(
        manifest, metrics, lambda dataset, group: store.exists(reliability_path(dataset, group)),
    )
    _drop_stale(store, plan, metrics)
    state = {(r.dataset, r.model_id): r.status for r in manifest.itertuples(index=False)}
    for dataset, mid in plan.missing:
        why = {"pending": "its embedding was interrupted (pending)",
               "stale": "its embeddings are stale (made under another config or version)"}.get(
            state.get((dataset, mid)), "no embeddings")
        console.print(f"[yellow]score: {mid} on {dataset}: {why}; run `zoorank embed` first; "
                      "skipped")

    errors: list[str] = []
    work_s = 0.0
    if plan.model_tasks or plan.group_tasks:
        from zoorank.runtime import ensure_ray

        ensure_ray(address)
        work_start = time.perf_counter()

        def on_done(task, result, error):
            if result is None:
                rows = crashed_rows(task, error, config.seed)
            elif isinstance(task, GroupTask):
                rows, frame = result
                if frame is not None:
                    store.write_parquet(reliability_path(task.dataset, task.group), frame)
            else:
                rows = result
            store.upsert_rows(METRICS, rows, key=METRICS_KEY)

        errors = _execute(store, config, plan, on_done)
        work_s = time.perf_counter() - work_start

    pool = plan_pool_rows(config, models, plan, store.read_metrics())
    if pool:
        store.upsert_rows(METRICS, pool, key=METRICS_KEY)
    errors += score_resamples(config, store, models, plan, manifest, address)

    elapsed = time.perf_counter() - start
    scored = len(plan.model_tasks)
    rate = f", {scored / work_s * 60:.1f} models/min once Ray was up" if scored and work_s else ""
    console.print(
        f"score: {scored} model(s) scored, {plan.up_to_date} up to date, "
        f"{len(plan.group_tasks)} ensemble(s), {len({r['model_id'] for r in pool})} pool score(s) "
        f"updated, {len(set(plan.failed))} failed upstream, {len(errors)} error(s); "
        f"{elapsed:.1f} s{rate}"
    )
    for line in errors:
        console.print(f"[red]score: {line} (recorded as missing; a rerun retries it)")
    table = store.read_metrics()
    return table[[c for c in METRICS_COLUMNS if c in table]]
