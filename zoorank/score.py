"""SCORE stage: stored embeddings → ``metrics.parquet`` and per-ensemble reliability tables.

Orchestration only; the maths is :mod:`zoorank.metrics.suite` over the contract-3 functions.

1. Plan (driver, pure): for every dataset × resolved model whose embeddings are ``done`` in the
   manifest (and none ``failed``), the per-model metrics whose stored fingerprint is missing or
   different; for every seed ensemble (models sharing a ``group``, ≥ 2 done members) its NC unless
   up to date. A metric row's fingerprint hashes the manifest fingerprints of the embeddings it
   reads, its settings, ``max_samples``, the run seed and the zoorank version.
2. Run: a pool of Ray actors (``num_cpus=score.num_cpus_per_actor``; one per core on CPU, one per
   GPU when the cluster has GPUs; either way each actor's BLAS/faiss threads share out the cores),
   each reading one model's shards (or one ensemble's) at a time from the store; the
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
from collections.abc import Iterable
from dataclasses import dataclass, field
from typing import Any

import numpy as np
import pandas as pd

import zoorank
from zoorank.config import RunConfig, ScoreOptions, fingerprint
from zoorank.freshness import fresh_manifest
from zoorank.metrics import registry
from zoorank.metrics.suite import (
    ensemble_reliability,
    label_free_suite,
    metric_inputs,
    metric_settings,
    nc_settings,
    per_model_metrics,
    select_samples,
)
from zoorank.store import METRICS, METRICS_COLUMNS, Store

METRICS_KEY = ["model_id", "dataset", "metric"]
#: version of this stage's reading of embeddings (sample selection, view grouping): bump it when
#: that changes. Each metric's own maths is versioned in zoorank.metrics.registry.
SCORE_VERSION = 1
#: the metrics that CLID combines over a pool (ID is TwoNN on L2-normalised features): the registry's.
CLID_TERMS = registry.REGISTRY["clid"].requires


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


@dataclass(frozen=True)
class GroupTask:
    """NC and baselines of one seed ensemble on one dataset."""

    dataset: str
    group: str
    members: tuple[str, ...]
    clean_view: str
    fingerprint: str


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


def _entry_fingerprints(manifest: pd.DataFrame) -> tuple[dict, set]:
    done, failed = {}, set()
    for r in manifest.itertuples(index=False):
        key = (r.dataset, r.view, r.model_id)
        if r.status == "done":
            done[key] = str(r.fingerprint)
        elif r.status == "failed":
            failed.add((r.dataset, r.model_id))
    return done, failed


def existing_fingerprints(metrics: pd.DataFrame) -> dict[tuple[str, str, str], str]:
    """(model_id, dataset, metric) → stored fingerprint; rows of a crashed task (a worker that
    died or raised: ``"crashed": true`` in params) are left out, so a rerun retries them."""
    if metrics.empty or "fingerprint" not in metrics:
        return {}
    crashed = metrics["params"].astype(str).str.contains('"crashed": true', regex=False)
    metrics = metrics[~crashed.to_numpy()]
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
    return fingerprint(
        "nc", dataset, group, sorted(entries), nc_settings(options, seed), options.max_samples,
        seed, SCORE_VERSION, registry.info("nc").version,
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
    done, failed = _entry_fingerprints(manifest)
    stored = existing_fingerprints(metrics)
    clean = config.clean_view.name if config.clean_view else None
    augmented_views = [v.name for v in config.augmented_views]
    augmented = augmented_views[0] if augmented_views else None
    base = per_model_metrics(config.metrics)
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
            if not _wants(model, dataset):
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
                plan.model_tasks.append(
                    ModelTask(dataset, mid, clean if clean_fp else None,
                              augmented if aug_fp else None, tuple(todo), tuple(fps))
                )
            else:
                plan.up_to_date += 1
        if not registry.ensemble_metrics(config.metrics):
            continue
        plan.ensembles[dataset] = {}
        for group, ids in sorted(members.items()):
            if len(ids) < 2:
                continue
            plan.ensembles[dataset][group] = tuple(ids)
            fp = group_fingerprint(
                dataset, group, [(m, done[(dataset, clean, m)]) for m in ids], options, seed
            )
            current = all(stored.get((m, dataset, "nc")) == fp for m in ids)
            if not (current and reliability_exists(dataset, group)):
                plan.group_tasks.append(GroupTask(dataset, group, tuple(ids), clean, fp))
    return plan


def _wants(model: Any, dataset: str) -> bool:
    """Whether ``model`` is ranked on ``dataset`` (a model entry's ``datasets:``; default all)."""
    wants = getattr(model, "wants", None)
    return True if wants is None else bool(wants(dataset))


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


# -- the actor ------------------------------------------------------------------------------------


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


def clid_pools(
    config: RunConfig, models: list[ModelInfo], plan: ScorePlan
) -> list[tuple[str, str, list[str], dict[str, Any] | None]]:
    """(metric, dataset, members, extra) of every pool of every pool metric the config asks for (the
    registry's): ``clid`` over each dataset's eligible models, ``clid_family`` within each family."""
    family_of = {m.model_id: m.family for m in models}
    pools: list[tuple[str, str, list[str], dict[str, Any] | None]] = []
    for metric in registry.pool_metrics(config.metrics):
        scope = registry.info(metric).scope
        for dataset, ids in plan.eligible.items():
            if not ids:
                continue
            if scope == "dataset":
                pools.append((metric, dataset, ids, None))
                continue
            families: dict[str, list[str]] = defaultdict(list)
            for m in ids:
                if family_of.get(m):
                    families[family_of[m]].append(m)
            pools += [(metric, dataset, members, {"family": family})
                      for family, members in sorted(families.items())]
    return pools


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


def reliability_path(dataset: str, group: str) -> str:
    return f"reliability/{dataset}/{group}.parquet"


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
            store.write_parquet(METRICS, metrics[~stale].reset_index(drop=True))
    for dataset, groups in plan.ensembles.items():
        for file in store.list_files("reliability", dataset, suffix=".parquet"):
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


def _execute(store: Store, config: RunConfig, plan: ScorePlan, on_done) -> list[str]:
    """Run every task on a pool of actors; ``on_done(task, result, error)`` as results arrive
    (``result`` None and ``error`` the reason when the task raised or its worker died)."""
    import ray

    tasks: list[ModelTask | GroupTask] = [*plan.model_tasks, *plan.group_tasks]
    resources = ray.cluster_resources()
    n_actors, gpus, threads = pool_size(len(tasks), config.score.num_cpus_per_actor,
                                        resources.get("CPU", 1.0), resources.get("GPU", 0.0))
    actor_cls = ray.remote(num_cpus=config.score.num_cpus_per_actor, num_gpus=gpus)(ScoreWorker)
    args = (store.uri, config.score.model_dump(mode="json"), config.seed, list(config.metrics),
            threads, registry.portable(per_model_metrics(config.metrics)))

    def new_actor():
        return actor_cls.remote(*args)

    idle = [new_actor() for _ in range(n_actors)]
    queue = list(reversed(tasks))
    pending: dict[Any, tuple[Any, Any]] = {}
    errors: list[str] = []
    while queue or pending:
        while queue and idle:
            task, actor = queue.pop(), idle.pop()
            method = actor.score_group if isinstance(task, GroupTask) else actor.score_model
            pending[method.remote(task)] = (task, actor)
        ready, _ = ray.wait(list(pending), num_returns=1)
        task, actor = pending.pop(ready[0])
        name = _task_name(task)
        try:
            result = ray.get(ready[0])
        except ray.exceptions.RayActorError as err:
            message = f"worker died: {str(err).strip().splitlines()[0] if str(err) else ''}"
            errors.append(f"{name}: {message}")
            idle.append(new_actor())
            on_done(task, None, message)
            continue
        except ray.exceptions.RayTaskError as err:
            cause = err.cause or err
            message = f"{type(cause).__name__}: {str(cause).strip().splitlines()[0][:300]}"
            errors.append(f"{name}: {message}")
            idle.append(actor)
            on_done(task, None, message)
            continue
        idle.append(actor)
        on_done(task, result, None)
    for actor in idle:
        ray.kill(actor)
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


def run_score(config: RunConfig, address: str | None = None) -> pd.DataFrame:
    """The SCORE stage; returns the whole metrics table (``metrics.parquet``)."""
    from rich.console import Console
    from rich.progress import BarColumn, MofNCompleteColumn, Progress, TimeElapsedColumn

    console = Console(stderr=True)
    start = time.perf_counter()
    store = Store(config.store)
    from zoorank.zoo import resolve_models

    models = resolve_models(config)
    metrics = store.read_metrics()
    manifest = fresh_manifest(config, store, models)
    plan = plan_score(
        config, models, manifest, metrics,
        lambda dataset, group: store.exists(reliability_path(dataset, group)),
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
        total = len(plan.model_tasks) + len(plan.group_tasks)
        with Progress("[progress.description]{task.description}", BarColumn(),
                      MofNCompleteColumn(), TimeElapsedColumn(), console=console) as progress:
            bar = progress.add_task("score: models", total=total)

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
                progress.advance(bar)

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
