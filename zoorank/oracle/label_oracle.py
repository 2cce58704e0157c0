"""The label oracle of the RANK stage: seeded splits, one Ray task per model and dataset (what it
measures: :mod:`zoorank.oracle.measures`), the rows committed in batches.

``oracle`` holds the label oracle in the long format of ``metrics`` (model_id,
dataset, metric, value, params, n, dim, seed, zoorank_version, fingerprint): ``knn_accuracy``,
``linear_probe_accuracy``, ``recall_at_1``, ``r_auroc_nc`` / ``r_auroc_<baseline>``,
``sdl_eps<ε>``, ``esc_eps<ε>``, ``mdl`` and the few-label cells of :mod:`zoorank.oracle.budget`. Rows are
keyed by the catalog's fingerprint (:meth:`zoorank.catalog.Catalog.oracle_fingerprints`: the
model's fresh clean embeddings, the oracle settings, the labels, the group's fresh reliability
table and :data:`ORACLE_VERSION`): a rerun skips models whose rows exist with the same
fingerprint. The maths is :mod:`zoorank.metrics.few_label.oracle_metrics`.
"""

from __future__ import annotations

import json
from collections.abc import Sequence
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
from zoorank.metrics.few_label.oracle_metrics import oracle_split  # noqa: F401  (the one split rule; public here before)
from zoorank.oracle.measures import oracle_suite
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
        from zoorank.stats.uncertainty import fold_assignment

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
    catalog = build_catalog(config, models, store=store) if catalog is None else catalog
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
    """Run the oracle tasks on :func:`zoorank.tasks.runner.run_tasks`; commit the rows per K models or
    T seconds, upserted on (model_id, dataset, metric), each batch superseding the older rows of
    its (model, dataset) (:func:`zoorank.store.batching.superseding`); (model, dataset) failures
    with the reason (a task that raised, or whose worker died).
    """
    import contextlib

    import ray

    from zoorank.runtime import ensure_ray
    from zoorank.tasks.runner import Task, run_tasks

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
