"""SCORE stage: stored embeddings → ``metrics.parquet`` and per-ensemble reliability tables.

Orchestration only; the maths is :mod:`zoorank.metrics.suite` over the contract-3 functions.

1. Plan (driver, pure): for every dataset × resolved model whose embeddings are ``done`` in the
   manifest (and none ``failed``), the per-model metrics whose stored fingerprint is missing or
   different; for every seed ensemble (models sharing a ``group``, ≥ 2 done members) its NC unless
   up to date. A metric row's fingerprint hashes the manifest fingerprints of the embeddings it
   reads, its settings, ``max_samples``, the run seed and the zoorank version.
2. Run: Ray tasks on :func:`zoorank.tasks.runner.run_tasks` (``num_cpus=score.num_cpus_per_actor``;
   one per core at once on CPU, one per GPU when the cluster has GPUs; either way each task's
   BLAS/faiss threads share out the cores), each reading one model's shards (or one ensemble's)
   from the store; a task that raises or whose worker dies leaves NaN rows marked ``crashed``
   with the reason (a rerun computes them again); the
   driver upserts the rows into ``metrics.parquet`` as results arrive, so an interrupted run keeps
   what it finished and a rerun skips it.
3. Pool level (driver): ``clid`` = z(CL) + z(ID) over the dataset's pool of models, ``clid_family``
   within each ``family``; recomputed whenever a pool member's CL or ID row changes.
4. Classifier heads (driver, :mod:`.heads`): for models whose manifest has ``logit_dim > 0``, the
   label-free accuracy estimates of :mod:`zoorank.metrics.heads.classifier` from the clean shards'
   ``logits`` (with their fold rows), and ``head_accuracy`` where the dataset has labels.

Failed models (manifest status ``failed``) get no metrics (rows left from an earlier success are
removed), nor do models outside a seed ensemble get ``nc``; the leaderboard lists failed models
from the manifest.

The stage is this module; the worker that scores one model or ensemble: :mod:`.worker`; pool
scores (CLID): :mod:`.pools`; resampled rows and embedding health: :mod:`.resampling`.
"""

from __future__ import annotations

import contextlib
import math
import time
from typing import Any

import pandas as pd

from zoorank.catalog import (
    METRICS_KEY,
    Catalog,
    GroupTask,
    ModelTask,
    ScorePlan,
    reliability_path,
)
from zoorank.catalog.applicability import skipped_line
from zoorank.catalog.context import RunContext
from zoorank.config import RunConfig
from zoorank.metrics import registry
from zoorank.metrics.suite import per_model_metrics
from zoorank.oracle import resample
from zoorank.score.head_scores import score_heads
from zoorank.score.pools import plan_pool_rows
from zoorank.score.resampling import score_resamples
from zoorank.score.worker import metric_row, pool_size, score_task
from zoorank.store import METRICS, Store
from zoorank.store.layout import POOLS, reliability_dir
from zoorank.store.schema import METRICS_COLUMNS
from zoorank.tasks.runner import Task, run_tasks

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
        nc = (metrics["metric"] == registry.ensemble_metric().name) & metrics["dataset"].isin(
            list(plan.ensembles))
        stale = keys.isin(plan.failed) | (nc.to_numpy() & ~keys.isin(members))
        if stale.any():
            store.delete_rows(METRICS, metrics[stale], METRICS_KEY)
    for dataset, groups in plan.ensembles.items():
        for file in store.list_files(reliability_dir(dataset), suffix=".parquet"):
            if file.removesuffix(".parquet") not in groups:
                store.delete(reliability_path(dataset, file.removesuffix(".parquet")))


def _execute(store: Store, config: RunConfig, plan: ScorePlan, on_done, on_wait=None
             ) -> list[str]:
    """Run every task on :func:`zoorank.tasks.runner.run_tasks`, ``pool_size`` at once;
    ``on_done(task, result, error)`` as results arrive (``result`` None and ``error`` the reason
    when the task raised or its worker died); ``on_wait`` while waiting for them (the runner's)."""
    import ray

    tasks: list[ModelTask | GroupTask] = [*plan.model_tasks, *plan.group_tasks]
    resources = ray.cluster_resources()
    n_workers, gpus, threads = pool_size(len(tasks), config.score.num_cpus_per_actor,
                                         resources.get("CPU", 1.0), resources.get("GPU", 0.0),
                                         object_store=not store.is_local)
    args = (store.uri, config.score.model_dump(mode="json"), config.seed, list(config.metrics),
            threads, registry.portable(per_model_metrics(config.metrics)))
    results = run_tasks(score_task, [Task(i, (*args, t)) for i, t in enumerate(tasks)],
                        options={"num_cpus": config.score.num_cpus_per_actor, "num_gpus": gpus},
                        max_in_flight=n_workers, reruns=1, label="score: models",
                        on_wait=on_wait)
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
    reason) and ``"crashed": true``, so the next run tries them again.
    """
    params = {"error": f"score task failed: {error}", "crashed": True}
    if isinstance(task, GroupTask):
        return [metric_row(m, task.dataset, registry.ensemble_metric().name, math.nan, params, 0,
                           0, seed, task.fingerprint) for m in task.members]
    return [metric_row(task.model_id, task.dataset, metric, math.nan, params, 0, 0, seed, fp)
            for metric, fp in task.fingerprints]


def _task_name(task: ModelTask | GroupTask) -> str:
    if isinstance(task, GroupTask):
        return f"{task.dataset}/ensemble {task.group}"
    return f"{task.dataset}/{task.model_id}"


def run_score(context: RunContext | RunConfig, address: str | None = None,
              catalog: Catalog | None = None) -> pd.DataFrame:
    """The SCORE stage: the catalog's metric rows minus the fresh stored ones → run → commit;
    returns the whole metrics table (``metrics.parquet``)."""
    from rich.console import Console

    from zoorank.console import counts_line

    console = Console(stderr=True)
    start = time.perf_counter()
    context = RunContext.of(context, catalog, address)
    config = context.config
    store, catalog = context.store, context.catalog
    models = catalog.models
    metrics = store.read_metrics()
    manifest = catalog.fresh_manifest(store.read_manifest())
    plan = catalog.plan_score(
        manifest, metrics, lambda dataset, group: store.exists(reliability_path(dataset, group)),
    )
    _drop_stale(store, plan, metrics)
    skipped = skipped_line(config, models)
    if skipped:  # metrics the config makes impossible: one line, no rows, no failure flags
        console.print(f"score: {skipped}", markup=False, highlight=False, soft_wrap=True)
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
        context.ensure_ray()
        work_start = time.perf_counter()

        # rows are committed per K models or T seconds, also while the next task runs
        # (zoorank.store.batching): a killed run loses at most one batch, a stopped one nothing
        with store.batched(METRICS, METRICS_KEY) as out:

            def on_done(task, result, error):
                if result is None:
                    rows = crashed_rows(task, error, config.seed)
                elif isinstance(task, GroupTask):
                    rows, frame = result
                    if frame is not None:  # before its rows: a fresh row finds its table
                        store.write_parquet(reliability_path(task.dataset, task.group), frame)
                else:
                    rows = result
                out.add(rows)

            errors = _execute(store, config, plan, on_done, on_wait=out.flush_due)
        work_s = time.perf_counter() - work_start

    pool, pools = plan_pool_rows(config, models, plan, store.read_metrics())
    if pool:
        store.upsert_rows(POOLS, pools, key=["pool_id"])
        store.upsert_rows(METRICS, pool, key=METRICS_KEY)
    errors += score_resamples(config, store, models, plan, manifest, context.address)
    heads, head_errors = score_heads(config, store, catalog.plan_heads(manifest), store.read_metrics())
    errors += head_errors
    if plan.model_tasks or plan.group_tasks or pool or heads:  # a stage that wrote nothing commits nothing
        for name in (METRICS, resample.RESAMPLES, resample.HEALTH):
            store.compact_table(name)  # few files and a checkpointed log for every reader

    elapsed = time.perf_counter() - start
    scored = len(plan.model_tasks)
    rate = f", {scored / work_s * 60:.1f} models/min once Ray was up" if scored and work_s else ""
    console.print(counts_line("score", [
        (scored, "model(s) scored"), (plan.up_to_date, "up to date"),
        (len(plan.group_tasks), "ensemble(s)"),
        (len({r["model_id"] for r in pool}), "pool score(s) updated"),
        (heads, "dataset(s) of classifier heads estimated"),
        (len(set(plan.failed)), "failed upstream"), (len(errors), "error(s)")],
        f"{elapsed:.1f} s{rate}"), markup=False, highlight=False)
    for line in errors:
        console.print(f"[red]score: {line} (recorded as missing; a rerun tries it again)")
    table = store.read_metrics()
    return table[[c for c in METRICS_COLUMNS if c in table]]
