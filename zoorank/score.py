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

import json
import math
import time
import warnings
from collections import defaultdict
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
    select_samples,
)
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
                 threads: int):
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


def _finite_terms(metrics: pd.DataFrame, dataset: str, model_ids: list[str]) -> dict[str, Any]:
    """model_id → {metric: (value, fingerprint, n, dim)} for the CLID terms."""
    sub = metrics[(metrics["dataset"] == dataset) & metrics["metric"].isin(CLID_TERMS)
                  & metrics["model_id"].isin(model_ids)]
    terms: dict[str, dict[str, tuple]] = defaultdict(dict)
    for r in sub.itertuples(index=False):
        terms[r.model_id][r.metric] = (float(r.value), r.fingerprint, int(r.n), int(r.dim))
    return terms


def pool_rows(
    metric: str, dataset: str, model_ids: list[str], metrics: pd.DataFrame, seed: int,
    extra: dict[str, Any] | None = None,
) -> list[dict[str, Any]]:
    """CLID rows (z(CL) + z(ID) over the pool of ``model_ids`` with both terms finite).

    Every candidate gets a row: the pool members a finite value, the others NaN with the reason;
    with fewer than 2 pool members every row is NaN with the reason. The fingerprint hashes the
    candidates' CL and ID fingerprints, so any change in the pool recomputes it.
    """
    from zoorank.metrics.learnability import clid

    terms = _finite_terms(metrics, dataset, model_ids)
    fp = pool_fingerprint(
        metric, dataset,
        [(m, t, terms.get(m, {}).get(t, (None, None))[1]) for m in model_ids for t in CLID_TERMS],
        extra,
    )
    pool = [m for m in model_ids
            if all(t in terms[m] and math.isfinite(terms[m][t][0]) for t in CLID_TERMS)]
    base = {"mode": "zscore", "terms": list(CLID_TERMS), "pool": pool, "pool_size": len(pool),
            **(extra or {})}
    values: dict[str, float] = {}
    if len(pool) >= 2:
        cl = np.array([terms[m]["cluster_learnability"][0] for m in pool])
        id_ = np.array([terms[m]["twonn_id"][0] for m in pool])
        with warnings.catch_warnings(record=True) as caught:
            warnings.simplefilter("always")
            values = dict(zip(pool, clid(cl, id_, mode="zscore")))
        if caught:
            base["warnings"] = [str(w.message) for w in caught]
    rows = []
    for m in model_ids:
        params = dict(base)
        _, _, n, dim = terms.get(m, {}).get("cluster_learnability", (0, None, 0, 0))
        if m in values:
            params["cl"] = terms[m]["cluster_learnability"][0]
            params["id"] = terms[m]["twonn_id"][0]
            value = float(values[m])
        elif m not in pool:
            value = math.nan
            params["error"] = "CL or ID is undefined for this model (see its rows)"
        else:
            value = math.nan
            params["error"] = f"{metric} needs at least 2 models with both CL and ID, got {len(pool)}"
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
                task: ModelTask | GroupTask) -> Any:
    """Ray task body: score one model (or one ensemble) with a :class:`ScoreWorker`."""
    worker = ScoreWorker(store_uri, options, seed, metrics, threads)
    return worker.score_group(task) if isinstance(task, GroupTask) else worker.score_model(task)


def _execute(store: Store, config: RunConfig, plan: ScorePlan, on_done) -> list[str]:
    """Run every task on :func:`zoorank.runner.run_tasks`, ``pool_size`` at once;
    ``on_done(task, result, error)`` as results arrive (``result`` None and ``error`` the reason
    when the task raised or its worker died)."""
    import contextlib

    import ray

    from zoorank.runner import Task, run_tasks

    tasks: list[ModelTask | GroupTask] = [*plan.model_tasks, *plan.group_tasks]
    resources = ray.cluster_resources()
    n_workers, gpus, threads = pool_size(len(tasks), config.score.num_cpus_per_actor,
                                         resources.get("CPU", 1.0), resources.get("GPU", 0.0))
    args = (store.uri, config.score.model_dump(mode="json"), config.seed, list(config.metrics),
            threads)
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
