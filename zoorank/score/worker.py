"""The SCORE worker: scores one model (or one seed ensemble) from its stored embeddings, in a Ray task.

Rows are ``metrics.parquet`` rows (contract 2 columns plus ``fingerprint``); params are strict
JSON (NaN and infinities as strings).
"""

from __future__ import annotations

import json
import math
import time
from collections import defaultdict
from typing import Any

import numpy as np
import pandas as pd

import zoorank
from zoorank.catalog import GroupTask, ModelTask
from zoorank.config import ScoreOptions
from zoorank.metrics import registry
from zoorank.metrics.suite import label_free_suite, metric_inputs, select_samples
from zoorank.store import Store

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
    store: Store, dataset: str, view: str, model_id: str, max_samples: int | None, seed: int,
    shards: list[str] | None = None,
) -> tuple[np.ndarray, np.ndarray]:
    """(sample_ids, n × d) clean embeddings, capped to ``max_samples`` deterministically; from
    exactly ``shards`` when given (the task's, from the catalog), else those the manifest lists."""
    emb = store.read_embeddings(dataset, view, model_id, shards)
    first = emb.view_index == emb.view_index.min() if len(emb.view_index) else slice(None)
    ids, Z = emb.sample_id[first], emb.embedding[first]
    keep = select_samples(ids, max_samples, seed)
    return ids[keep], Z[keep]


def load_augmented(
    store: Store, dataset: str, view: str, model_id: str, shards: list[str] | None = None,
) -> tuple[np.ndarray, np.ndarray]:
    """(sample_ids, n × q × d) augmented views grouped by clean sample (from ``shards`` when
    given, as :func:`load_clean`)."""
    return store.read_embeddings(dataset, view, model_id, shards).grouped()


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
        limit_threads(threads)

    def ready(self) -> bool:
        return True

    def score_model(self, task: ModelTask) -> list[dict[str, Any]]:
        o, seed = self.options, self.seed
        clean = views = None
        problems: dict[str, str] = {}
        if task.clean_view:
            _, clean = load_clean(self.store, task.dataset, task.clean_view, task.model_id,
                                  o.max_samples, seed, task.shards_of(task.clean_view))
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
                    _, views = load_augmented(self.store, task.dataset, view, task.model_id,
                                              task.shards_of(view))
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
        loaded = [load_clean(self.store, task.dataset, task.clean_view, m, o.max_samples, seed,
                             task.shards_of(m))
                  for m in task.members]
        common = loaded[0][0]
        for ids, _ in loaded[1:]:
            common = np.intersect1d(common, ids)
        members = [Z[np.searchsorted(ids, common)] for ids, Z in loaded]
        params: dict[str, Any] = {"group": task.group, "members_ids": list(task.members)}
        start = time.perf_counter()
        ensemble = registry.ensemble_metric()  # NC: its function, name and settings
        try:
            table, nc_params = ensemble.function(members, common, o, seed)
            params.update(nc_params)
            value, n, frame = (float(np.mean(table[ensemble.name])), nc_params["n_test"],
                               pd.DataFrame(table))
        except ValueError as err:
            params.update(ensemble.kwargs(o, seed))
            params["error"] = str(err)
            value, n, frame = math.nan, 0, None
        params["seconds"] = round(time.perf_counter() - start, 4)
        rows = [
            metric_row(m, task.dataset, ensemble.name, value, params, n, Z.shape[1], seed,
                       task.fingerprint)
            for m, Z in zip(task.members, members)
        ]
        return rows, frame


def limit_threads(threads: int) -> None:
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


#: tasks in flight per core when the store is an object store: a task waits on reads (each a
#: request) for much of its time, and a second task per core keeps the core busy meanwhile
#: (bench_scale, 300 models on a loopback S3 at 20 ms a request: cores ~20% busy with one).
OBJECT_STORE_TASKS_PER_CORE = 2


def pool_size(n_tasks: int, num_cpus_per_actor: float, cpus: float, gpus: float,
              object_store: bool = False) -> tuple[int, float, int]:
    """(actors, GPUs per actor, BLAS threads per actor) for a cluster with ``cpus`` and ``gpus``;
    ``object_store``: :data:`OBJECT_STORE_TASKS_PER_CORE` CPU tasks per core."""
    if gpus >= 1:
        # One actor per GPU (faiss-gpu neighbours), each with its share of the cores: the rest of
        # the suite is BLAS on the CPU, and one thread per actor left most cores idle (bench_scale).
        actors = max(1, min(n_tasks, int(gpus)))
        return actors, 1.0, max(1, int(num_cpus_per_actor), int(cpus // actors))
    # One actor per core keeps every core busy; each actor reserves only a fraction of a CPU, so
    # the pool never starves other Ray work (the 2-core deadlock of ENVIRONMENT.md).
    per_core = OBJECT_STORE_TASKS_PER_CORE if object_store else 1
    actors = max(1, min(n_tasks, int(cpus) * per_core))
    return actors, 0.0, max(1, int(cpus // actors))


def score_task(store_uri: str, options: dict, seed: int, metrics: list[str], threads: int,
                entries: list[registry.MetricInfo], task: ModelTask | GroupTask) -> Any:
    """Ray task body: score one model (or one ensemble) with a :class:`ScoreWorker`
    (``entries``: the registry entries of the metrics, for metrics registered at run time)."""
    worker = ScoreWorker(store_uri, options, seed, metrics, threads, entries)
    return worker.score_group(task) if isinstance(task, GroupTask) else worker.score_model(task)
