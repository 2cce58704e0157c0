"""A small store written directly (no embed/score stage) for the RANK and REPORT tests.

Real inputs: scikit-learn's digits (the first ``n`` images, pixels in 0..16) and embeddings made
from them whose quality is known by construction:

* ``proj-a`` / ``proj-b``: seeded Gaussian random projections of the 64 pixels to 24 dimensions;
* ``rot-0`` / ``rot-1``: ``proj-a`` followed by two random rotations (a seed ensemble, group
  ``rot``: its NC is 1 for every point);
* ``lowrank``: a rank-2 projection (little information);
* ``noise``: Gaussian noise independent of the image (no information);
* ``collapsed``: a constant vector (every label-free metric that needs spread fails or is minimal);
* ``broken``: listed in the manifest as failed (no embeddings, no metrics).

Label-free metrics are real calls (RankMe, uniformity) on these arrays; NC and its baselines come
from ``zoorank.metrics.label_free.reliability``.
"""

from __future__ import annotations

import json
import math

import numpy as np
import pandas as pd
from sklearn.datasets import load_digits

from zoorank.store import Store
from zoorank.store.schema import METRICS_COLUMNS

DATASET = "digits"
FAMILIES = {"proj-a": "proj", "proj-b": "proj", "lowrank": "proj", "rot-0": "rot",
            "rot-1": "rot", "noise": "", "collapsed": ""}
GROUPS = {"rot-0": "rot", "rot-1": "rot"}


def _orthogonal(d: int, seed: int) -> np.ndarray:
    q, r = np.linalg.qr(np.random.default_rng(seed).normal(size=(d, d)))
    return q * np.sign(np.diag(r))


def embeddings(n: int = 300, offset: int = 0
               ) -> tuple[np.ndarray, np.ndarray, dict[str, np.ndarray]]:
    """sample_ids, labels and the models' embeddings of digits images offset .. offset + n."""
    d = load_digits()
    X, y = d.data[offset:offset + n].astype(np.float64), d.target[offset:offset + n]
    rng = np.random.default_rng(0)
    P = rng.normal(size=(64, 24)) / 8
    proj_a = X @ P
    models = {
        "proj-a": proj_a,
        "proj-b": X @ (np.random.default_rng(1).normal(size=(64, 24)) / 8),
        "rot-0": proj_a @ _orthogonal(24, 10),
        "rot-1": proj_a @ _orthogonal(24, 11),
        "lowrank": X @ (np.random.default_rng(2).normal(size=(64, 2)) / 8),
        "noise": np.random.default_rng(3).normal(size=(n, 24)),
        "collapsed": np.ones((n, 24)),
    }
    return np.arange(n, dtype=np.int64), y, {k: v.astype(np.float32) for k, v in models.items()}


def config_dict(store: str, oracle: dict | None = None, datasets: tuple[str, ...] = (DATASET,),
                **rank) -> dict:
    models = [{"id": m, "source": "python", "name": "fixtures:unused",
               **({"family": FAMILIES[m]} if FAMILIES[m] else {}),
               **({"group": GROUPS[m]} if m in GROUPS else {})} for m in FAMILIES]
    models.append({"id": "broken", "source": "python", "name": "fixtures:unused"})
    out = {"store": store, "seed": 0,
           "datasets": [{"name": d, "source": "sklearn_digits", "limit": 300} for d in datasets],
           "models": models, "metrics": ["rankme", "uniformity", "nc"],
           "rank": {"primary_metric": "rankme", "bootstrap": 200, **rank}}
    if oracle is not None:
        out["oracle"] = oracle
    return out


def _metric_row(model_id: str, metric: str, value: float, params: dict, n: int, dim: int,
                dataset: str = DATASET) -> dict:
    return {"model_id": model_id, "dataset": dataset, "metric": metric, "value": value,
            "params": json.dumps(params), "n": n, "dim": dim, "seed": 0,
            "zoorank_version": "test", "fingerprint": f"{model_id}-{metric}"}


def entry_fingerprints(config) -> dict[tuple[str, str, str], str]:
    """What EMBED would record for each (dataset, view, model) of ``config`` (a store written by
    hand must carry them, or every reader treats its rows as stale)."""
    from zoorank.catalog import build_catalog

    return {key: fps[0] for key, fps in build_catalog(config).entries.items()}


def stamp_fingerprints(config, store: Store) -> None:
    """Give a hand-written store's manifest, metric rows and sample tables the fingerprints the
    catalog of ``config`` expects (rows of other models/metrics are left as they are)."""
    from zoorank.catalog import build_catalog, samples_path

    catalog = build_catalog(config)
    fps = {key: fp[0] for key, fp in catalog.entries.items()}
    manifest = store.read_manifest()
    keys = zip(manifest["dataset"], manifest["view"], manifest["model_id"])
    manifest["fingerprint"] = [fps.get(k, fp) for k, fp in zip(keys, manifest["fingerprint"])]
    store.write_parquet("manifest", manifest)
    for dataset in catalog.indexes:
        if store.table_exists(samples_path(dataset)):
            samples = store.read_frame(samples_path(dataset))
            samples["fingerprint"] = catalog.labels_fingerprint(dataset)
            store.replace_table(samples_path(dataset), samples)
    expected = catalog.metric_fingerprints(catalog.fresh_manifest(manifest))
    metrics = store.read_metrics()
    keys = zip(metrics["model_id"], metrics["dataset"], metrics["metric"])
    metrics["fingerprint"] = [expected.get(k, fp) for k, fp in zip(keys, metrics["fingerprint"])]
    store.write_parquet("metrics", metrics)


def write_store(root: str, n: int = 300, datasets: tuple[str, ...] = (DATASET,)
                ) -> dict[str, np.ndarray]:
    """Write samples, embeddings, manifest, metrics and reliability per dataset (dataset i uses
    the digits images i·n .. (i+1)·n); returns the first dataset's embeddings."""
    from zoorank.metrics.label_free.geometry import uniformity
    from zoorank.metrics.label_free.rankme import rankme
    from zoorank.metrics.label_free.reliability import (
        embedding_norm,
        feature_variance,
        mean_knn_distance,
        neighborhood_consistency,
    )

    store = Store(root)
    manifest, rows, first = [], [], None
    for i, dataset in enumerate(datasets):
        ids, y, models = embeddings(n, offset=i * n)
        first = first or models
        store.write_parquet(f"datasets/{dataset}/samples", pd.DataFrame({
            "sample_id": ids, "label": y.astype(np.int64), "label_name": [str(v) for v in y],
            "source": ["sklearn_digits"] * n}))
        for model_id, Z in models.items():
            store.write_shard(dataset, "clean", model_id, 0, ids, np.zeros(n, np.int32), Z)
            manifest.append({"dataset": dataset, "view": "clean", "model_id": model_id,
                             "fingerprint": f"emb-{model_id}", "status": "done", "error": None,
                             "rows": n, "dim": Z.shape[1], "seconds": 0.1, "bad_images": 0})
            for metric, fn in (("rankme", rankme), ("uniformity", uniformity)):
                try:
                    value, params = float(fn(Z)), {}
                except ValueError as err:
                    value, params = math.nan, {"error": str(err)}
                rows.append(_metric_row(model_id, metric, value, params, n, Z.shape[1], dataset))
        manifest.append({"dataset": dataset, "view": "clean", "model_id": "broken",
                         "fingerprint": "emb-broken", "status": "failed",
                         "error": "CheckpointError: corrupt checkpoint", "rows": 0, "dim": 0,
                         "seconds": 0.0, "bad_images": 0})
        # the "rot" seed ensemble: reference set = the first 100 points, test points = the rest
        members = [models["rot-0"], models["rot-1"]]
        ref, test = [m[:100] for m in members], [m[100:] for m in members]
        nc = neighborhood_consistency(test, ref, k=10, metric="cosine")
        store.write_parquet(f"reliability/{dataset}/rot.parquet", pd.DataFrame({
            "sample_id": ids[100:], "nc": nc,
            "mean_knn_distance": mean_knn_distance(test, ref, k=1, metric="cosine"),
            "embedding_norm": embedding_norm(test), "feature_variance": feature_variance(test)}))
        for model_id in ("rot-0", "rot-1"):
            rows.append(_metric_row(model_id, "nc", float(np.mean(nc)), {"group": "rot"},
                                    n - 100, 24, dataset))
    store.update_manifest(manifest)
    store.write_parquet("metrics", pd.DataFrame(rows, columns=METRICS_COLUMNS))
    from zoorank.config.loading import parse_config

    stamp_fingerprints(parse_config(config_dict(root, datasets=datasets)), store)
    return first


#: hand-made kNN accuracies of :func:`write_store`'s models: the label oracle's view of them
ORACLE_ACCURACY = {"proj-a": 0.91, "proj-b": 0.93, "rot-0": 0.91, "rot-1": 0.90, "lowrank": 0.35,
                   "noise": 0.10, "collapsed": 0.10}


def oracle_rows(models) -> pd.DataFrame:
    """The label oracle's rows (``knn_accuracy`` per model, :data:`ORACLE_ACCURACY`) of
    :func:`write_store`'s ``models``, in the metrics table's long format."""
    return pd.DataFrame([
        {"model_id": m, "dataset": DATASET, "metric": "knn_accuracy",
         "value": ORACLE_ACCURACY[m], "params": json.dumps({"k": 20}), "n": 150, "dim": 24,
         "seed": 0, "zoorank_version": "test", "fingerprint": f"o-{m}"} for m in models
    ], columns=METRICS_COLUMNS)
