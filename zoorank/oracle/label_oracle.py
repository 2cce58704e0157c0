"""The label oracle of the RANK stage: seeded splits, the oracle suite per model, Ray tasks.

``oracle`` holds the label oracle in the long format of ``metrics`` (model_id,
dataset, metric, value, params, n, dim, seed, zoorank_version, fingerprint): ``knn_accuracy``,
``linear_probe_accuracy``, ``recall_at_1``, ``r_auroc_nc`` / ``r_auroc_<baseline>``,
``sdl_eps<ε>``, ``esc_eps<ε>``, ``mdl`` and the few-label cells of :mod:`zoorank.oracle.budget`. Rows are
keyed by the catalog's fingerprint (:meth:`zoorank.catalog.Catalog.oracle_fingerprints`: the
model's fresh clean embeddings, the oracle settings, the labels, the group's fresh reliability
table and :data:`ORACLE_VERSION`): a rerun skips models whose rows exist with the same
fingerprint. The maths is :mod:`zoorank.metrics.oracle`.
"""

from __future__ import annotations

import json
import math
import time
import warnings
from collections.abc import Mapping, Sequence
from typing import Any

import numpy as np
import pandas as pd

from zoorank.catalog import (
    ORACLE_VERSION,
    Catalog,
    build_catalog,
    entry_shards,
    reliability_path,
    samples_path,
)
from zoorank.config import OracleSpec, RunConfig
from zoorank.metrics import registry
from zoorank.metrics.oracle import oracle_split  # noqa: F401  (the one split rule; public here before)
from zoorank.store import Store
from zoorank.store.batching import superseding
from zoorank.store.layout import ORACLE
from zoorank.store.schema import METRICS_COLUMNS

#: per-sample reliability columns (``reliability/<dataset>/<group>.parquet``) turned into an
#: uncertainty for R-AUROC (larger = less reliable): sign applied to the column.
UNCERTAINTY_SIGNS: dict[str, int] = {
    registry.ensemble_metric().name: -1,
    "mean_knn_distance": +1,
    "embedding_norm": -1,
    "feature_variance": +1,
}

__all__ = ["ORACLE_VERSION"]  # re-exported from zoorank.catalog (the oracle rows' fingerprints)


def oracle_direction(metric: str) -> int:
    """+1 for accuracies, R@1, R-AUROC and few-label scores; −1 for the loss-data costs (SDL, εSC,
    MDL): the metric registry's direction (KeyError for an unknown oracle metric)."""
    return registry.label_info(metric).direction


def loss_data_sizes(n_train: int, points: int = 8) -> list[int]:
    """Log-uniform grid of subset sizes from 10 (or n_train) to n_train (reprieve's logspace)."""
    low = min(10, n_train)
    grid = np.ceil(np.logspace(np.log10(low), np.log10(n_train), points)).astype(int)
    return sorted({int(min(max(g, 1), n_train)) for g in grid})


def _eps_name(eps: float) -> str:
    return f"{float(eps):g}"


def _measure(name: str, fn, params: dict[str, Any]) -> tuple[float, dict[str, Any]]:
    """Run one oracle metric: ValueError → NaN with params['error']; warnings recorded."""
    start = time.perf_counter()
    with warnings.catch_warnings(record=True) as caught:
        warnings.simplefilter("always")
        try:
            value = float(fn())
        except ValueError as err:
            value, params = math.nan, {**params, "error": str(err)}
    messages = list(dict.fromkeys(str(w.message) for w in caught))
    if messages:
        params = {**params, "warnings": messages}
    return value, {**params, "seconds": round(time.perf_counter() - start, 4)}


def oracle_suite(
    train_Z: np.ndarray,
    train_y: np.ndarray,
    test_Z: np.ndarray,
    test_y: np.ndarray,
    spec: OracleSpec,
    seed: int = 0,
    uncertainties: Mapping[str, np.ndarray] | None = None,
    uncertainty_index: np.ndarray | None = None,
    test_folds: np.ndarray | None = None,
) -> list[dict[str, Any]]:
    """The label oracle of one model on one dataset: rows ``{metric, value, params, n, dim}``.

    ``uncertainties`` maps a reliability name (``nc``, ``mean_knn_distance``, ...) to per-sample
    uncertainties (larger = less reliable) of the test points at positions ``uncertainty_index``
    of ``test_Z``; R@1 correctness is computed on the whole test split (cosine, self excluded) and
    R-AUROC on the points with an uncertainty. The loss-data curve trains on subsets of the train
    split and measures the loss on the test split.

    ``test_folds`` (fold index per test point, :func:`zoorank.metrics.uncertainty.fold_assignment`
    over the test ids; −1 left out): the kNN and linear-probe rows then carry their accuracy on each
    fold in ``params["fold_values"]`` (with ``params["n_folds"]``), the input of the oracle's own
    top set (:func:`zoorank.decide.oracle_top_sets.oracle_top_sets`). Rows without them (older runs) have no
    oracle top set.
    """
    from zoorank.metrics import loss_data_costs as costs
    from zoorank.metrics import oracle as om
    from zoorank.metrics.loss_data import loss_data_curve
    from zoorank.metrics.uncertainty import fold_means

    dim = int(train_Z.shape[1])
    n_tr, n_te = len(train_y), len(test_y)
    rows: list[dict[str, Any]] = []

    def add(metric: str, value: float, params: dict[str, Any], n: int) -> None:
        rows.append({"metric": metric, "value": value, "params": params, "n": n, "dim": dim})

    def with_folds(fn) -> Any:
        """fn(return_correct) → accuracy; with ``test_folds``, the fold accuracies go to params."""
        holder: dict[str, Any] = {}

        def run() -> float:
            if test_folds is None:
                return fn(False)
            value, correct = fn(True)
            folds = int(test_folds.max()) + 1
            holder.update(n_folds=folds, fold_values=[
                round(float(v), 8) for v in fold_means(correct, test_folds, folds)])
            return value
        return run, holder

    if spec.knn:
        k = min(spec.knn_k, n_tr)
        p = {"k": k, "temperature": spec.knn_temperature, "n_train": n_tr}
        run, extra = with_folds(lambda rc: om.knn_accuracy(
            train_Z, train_y, test_Z, test_y, k=k, temperature=spec.knn_temperature,
            return_correct=rc))
        value, p = _measure("knn_accuracy", run, p)
        add("knn_accuracy", value, {**p, **extra}, n_te)
    if spec.linear_probe:
        p = {"n_train": n_tr, "seed": seed}
        run, extra = with_folds(lambda rc: om.linear_probe_accuracy(
            train_Z, train_y, test_Z, test_y, seed=seed, return_correct=rc))
        value, p = _measure("linear_probe_accuracy", run, p)
        add("linear_probe_accuracy", value, {**p, **extra}, n_te)
    correct: np.ndarray | None = None
    if spec.recall_at_1 or spec.r_auroc:
        holder: dict[str, Any] = {}

        def r1() -> float:
            value, holder["correct"] = om.recall_at_1(test_Z, test_y, return_correct=True)
            return value

        value, p = _measure("recall_at_1", r1, {"metric": "cosine"})
        correct = holder.get("correct")
        if spec.recall_at_1:
            add("recall_at_1", value, p, n_te)
    if spec.r_auroc and uncertainties:
        for name, u in uncertainties.items():
            p = {"uncertainty": name, "positive": "R@1 wrong"}
            if correct is None:
                add(f"r_auroc_{name}", math.nan, {**p, "error": "R@1 correctness unavailable"}, 0)
                continue
            c = correct[uncertainty_index]
            add(f"r_auroc_{name}", *_measure(f"r_auroc_{name}", lambda u=u, c=c: om.r_auroc(u, c),
                                             p), len(c))
    if spec.loss_data_curve:
        sizes = loss_data_sizes(n_tr, spec.loss_data_points)
        seeds = [seed + s for s in range(spec.loss_data_seeds)]
        base = {"sizes": sizes, "seeds": seeds, "probe": "linear", "val": "oracle test split",
                "train_steps": spec.loss_data_steps}
        curve: dict[str, Any] = {}

        def run_curve() -> float:
            curve["ns"], curve["losses"] = loss_data_curve(
                train_Z, train_y, test_Z, test_y, sizes, seeds, train_steps=spec.loss_data_steps)
            return float(curve["losses"][-1])

        _, cp = _measure("loss_data_curve", run_curve, base)
        base["curve_seconds"] = cp["seconds"]
        if "ns" not in curve:
            for name in [*(f"sdl_eps{_eps_name(e)}" for e in spec.sdl_eps),
                         *(f"esc_eps{_eps_name(e)}" for e in spec.sdl_eps), "mdl"]:
                add(name, math.nan, cp, n_tr)
        else:
            ns, losses = curve["ns"], curve["losses"]
            base = {**base, "losses": [round(float(v), 6) for v in losses]}
            for eps in spec.sdl_eps:
                bound: dict[str, Any] = {}

                def sdl_value(eps=eps, bound=bound) -> float:
                    value, bound["lower_bound"] = costs.sdl(ns, losses, eps, return_bound=True)
                    return value

                v, p = _measure("sdl", sdl_value, {**base, "eps": eps})
                add(f"sdl_eps{_eps_name(eps)}", v, {**p, **bound}, n_tr)
                # A curve that never reaches ε has εSC > max n: stored as +inf (ranks last).
                v, p = _measure("esc", lambda eps=eps: costs.esc(ns, losses, eps), {**base, "eps": eps})
                add(f"esc_eps{_eps_name(eps)}", v, p, n_tr)
            v, p = _measure("mdl", lambda: costs.mdl(ns, losses), base)
            add("mdl", v, p, n_tr)
    if spec.transferability:
        from zoorank.oracle.budget import transferability_rows

        rows += transferability_rows(train_Z, train_y, spec.transferability,
                                     spec.labels_per_class, spec.label_budget_seeds, seed)
    return rows


def _oracle_task(
    store_uri: str,
    dataset: str,
    view: str,
    model_id: str,
    train_ids: np.ndarray,
    train_y: np.ndarray,
    test_ids: np.ndarray,
    test_y: np.ndarray,
    spec: OracleSpec,
    seed: int,
    reliability: pd.DataFrame | None,
    shards: list[str] | None = None,
    n_folds: int = 0,
) -> list[dict[str, Any]]:
    """Ray task body: read one model's clean embeddings (exactly ``shards``, the catalog's list
    from the snapshot the fingerprint hashes), run the oracle on the split (with ``n_folds`` ≥ 2,
    also on each fold of the test split: the score stage's fold rule)."""
    import torch

    torch.set_num_threads(1)
    try:
        import faiss

        faiss.omp_set_num_threads(1)
    except (ImportError, AttributeError):
        pass
    emb = Store(store_uri).read_embeddings(dataset, view, model_id, shards)
    clean = emb.view_index == 0
    ids, Z = emb.sample_id[clean], emb.embedding[clean]
    pos = pd.Series(np.arange(len(ids)), index=ids)
    tr_keep = np.isin(train_ids, ids)
    te_keep = np.isin(test_ids, ids)
    train_ids, train_y = train_ids[tr_keep], train_y[tr_keep]
    test_ids, test_y = test_ids[te_keep], test_y[te_keep]
    train_Z = Z[pos.loc[train_ids].to_numpy()]
    test_Z = Z[pos.loc[test_ids].to_numpy()]
    uncertainties: dict[str, np.ndarray] = {}
    index = None
    if reliability is not None and spec.r_auroc:
        rel = reliability.set_index("sample_id")
        common = np.isin(test_ids, rel.index.to_numpy())
        index = np.flatnonzero(common)
        for column, sign in UNCERTAINTY_SIGNS.items():
            if column in rel.columns:
                uncertainties[column] = sign * rel.loc[test_ids[common], column].to_numpy(float)
    test_folds = None
    if n_folds >= 2 and len(test_ids) >= n_folds:
        from zoorank.metrics.uncertainty import fold_assignment

        test_folds = fold_assignment(test_ids, n_folds, 1.0, seed)
    return oracle_suite(train_Z, train_y, test_Z, test_y, spec, seed, uncertainties, index,
                        test_folds)


def _labelled_split(store: Store, dataset: str, spec: OracleSpec, seed: int):
    from zoorank.data import read_samples

    samples = read_samples(store, dataset)
    labelled = samples[samples["label"].notna()]
    labels = labelled["label"].to_numpy(dtype=np.int64)
    if len(labelled) < 10 or len(np.unique(labels)) < 2:
        return None
    ids = labelled["sample_id"].to_numpy(dtype=np.int64)
    tr, te, note = oracle_split(ids, labels, spec.test_fraction, seed)
    by_id = pd.Series(labels, index=ids)
    return tr, by_id.loc[tr].to_numpy(), te, by_id.loc[te].to_numpy(), note


def sync_samples(catalog: Catalog, store: Store) -> list[str]:
    """Rewrite the sample and label tables that are not the catalog's (another ``label_column``,
    other labels or samples); returns those datasets."""
    stale = catalog.stale_samples(store)
    for name in stale:
        store.replace_table(samples_path(name), catalog.samples_frame(name))
    return stale


def run_oracle(config: RunConfig, store: Store, models: Sequence[Any],
               address: str | None = None, manifest: pd.DataFrame | None = None,
               catalog: Catalog | None = None,
               ) -> tuple[pd.DataFrame, list[dict[str, Any]]]:
    """Label oracle over the labelled datasets as parallel Ray tasks; (current rows, failures).

    The catalog's oracle rows minus the stored ones run; only fresh clean embeddings, fresh labels
    (the sample table is rewritten first when stale) and fresh reliability tables are used.
    ``manifest``: a fresh manifest (:meth:`zoorank.catalog.Catalog.fresh_manifest`).
    """
    catalog = build_catalog(config, models) if catalog is None else catalog
    if not catalog.oracle_wanted():
        return pd.DataFrame(columns=METRICS_COLUMNS), []
    spec, clean_view = config.oracle, config.clean_view
    from zoorank import __version__ as version

    if manifest is None:
        manifest = catalog.fresh_manifest(store.read_manifest())
    expected = catalog.oracle_fingerprints(manifest, store.read_metrics())
    existing = store.read_frame(ORACLE, METRICS_COLUMNS)
    have = set(zip(existing["model_id"], existing["dataset"], existing["fingerprint"]))
    todo = {k: v for k, v in expected.items() if (*k, v[0]) not in have}
    shards = entry_shards(manifest)
    if todo:
        sync_samples(catalog, store)
    work: list[tuple[str, str, str, tuple]] = []
    for ds in config.datasets:
        if not any(k[1] == ds.name for k in todo):
            continue
        split = _labelled_split(store, ds.name, spec, config.seed)
        if split is None:
            continue
        tr, ytr, te, yte, note = split
        rel_cache: dict[str, pd.DataFrame | None] = {}
        for m in models:
            if (m.model_id, ds.name) not in todo:
                continue
            fp, group = todo[(m.model_id, ds.name)]
            if group not in rel_cache:
                rel_cache[group] = (store.read_frame(reliability_path(ds.name, group))
                                    if group else None)
            names = shards.get((ds.name, clean_view.name, m.model_id))
            args = (store.root if store.is_local else store.uri, ds.name, clean_view.name,
                    m.model_id, tr, ytr, te, yte, spec, config.seed, rel_cache[group],
                    None if names is None else list(names), config.score.resample_folds)
            work.append((m.model_id, ds.name, fp, (note, args)))
    failures: list[dict[str, Any]] = []
    if work:
        failures = _run_oracle_tasks(store, work, config.seed, version, address, existing)
        store.compact_table(ORACLE)  # few files and a checkpointed log for every reader
    table = store.read_frame(ORACLE, METRICS_COLUMNS)
    if table.empty:
        return table, failures
    fp_now = [expected.get((m, d), (None,))[0] for m, d in zip(table["model_id"], table["dataset"])]
    return table[(np.asarray(fp_now, dtype=object) == table["fingerprint"].to_numpy(object))
                 ].reset_index(drop=True), failures


def _run_oracle_tasks(store: Store, work: list, seed: int, version: str,
                      address: str | None, existing: pd.DataFrame) -> list[dict[str, Any]]:
    """Run the oracle tasks on :func:`zoorank.run.runner.run_tasks`; commit the rows per K models or
    T seconds, upserted on (model_id, dataset, metric), each batch superseding the older rows of
    its (model, dataset) (:func:`zoorank.store.batching.superseding`); (model, dataset) failures
    with the reason (a task that raised, or whose worker died).
    """
    import contextlib

    import ray

    from zoorank.run.runner import Task, run_tasks
    from zoorank.runtime import ensure_ray

    ensure_ray(address)
    shared: dict[int, Any] = {}

    def by_ref(value: Any) -> Any:
        # The split and the reliability table are shared by every model of a dataset: one copy
        # in the object store instead of one per task.
        if isinstance(value, (np.ndarray, pd.DataFrame)):
            if id(value) not in shared:
                shared[id(value)] = ray.put(value)
            return shared[id(value)]
        return value

    key = ["model_id", "dataset", "metric"]
    write = superseding(store, ORACLE, key, existing, owner=["model_id", "dataset"])

    tasks = [Task((model_id, dataset, args[2], fp, note), tuple(by_ref(a) for a in args))
             for model_id, dataset, fp, (note, args) in work]
    cpus = float(ray.cluster_resources().get("CPU", 1.0))
    failures: list[dict[str, Any]] = []
    with store.batched(ORACLE, key, write=write) as out:
        results = run_tasks(_oracle_task, tasks, options={"num_cpus": 0.5},
                            max_in_flight=max(1, int(cpus / 0.5)), reruns=1,
                            label="oracle (models × datasets)", on_wait=out.flush_due)
        with contextlib.closing(results):
            for outcome in results:
                model_id, dataset, view, fp, note = outcome.task.key
                if not outcome.ok:  # this model's failure, not the run's
                    failures.append({"model_id": model_id, "dataset": dataset, "view": view,
                                     "stage": "oracle", "error": outcome.error})
                    continue
                out.add([{
                    "model_id": model_id, "dataset": dataset, "metric": r["metric"],
                    "value": float(r["value"]),
                    "params": json.dumps({**r["params"], "split": note}, sort_keys=True,
                                         default=str),
                    "n": int(r["n"]), "dim": int(r["dim"]), "seed": seed,
                    "zoorank_version": version, "fingerprint": fp,
                } for r in outcome.value])
    return failures
