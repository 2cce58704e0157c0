"""``zoorank metrics EMBEDDINGS``: score one embedding matrix a user already has.

Inputs: ``.npy`` (a 2-D array), ``.npz`` (key ``embeddings``/``embedding``/``Z``, or its only 2-D
array), or Parquet (a file or a directory of ``part-*.parquet`` shards) with an ``embedding`` column;
zoorank's own shards carry ``sample_id``/``view_index`` and are grouped by them automatically.

With ``--views Q`` the rows are n×q augmented views, consecutive per sample: LiDAR, RankMe(aug) and
alignment use all views and the clean-set metrics use view 0 of each sample. With ``--labels`` the
oracle metrics are added (kNN and linear-probe accuracy on a seeded stratified 50/50 split, R@1).
"""

from __future__ import annotations

import argparse
import json
import math
from pathlib import Path

import numpy as np

from zoorank.errors import InputError

ARRAY_KEYS = ("embeddings", "embedding", "Z", "X", "features")


def _from_npz(path: Path, labels_key: str | None) -> tuple[np.ndarray, np.ndarray | None]:
    with np.load(path, allow_pickle=False) as data:
        key = next((k for k in ARRAY_KEYS if k in data.files), None)
        if key is None:
            two_d = [k for k in data.files if data[k].ndim == 2 and k != labels_key]
            if len(two_d) != 1:
                raise InputError(
                    f"{path}: cannot tell which array holds the embeddings (keys {data.files}); "
                    f"name it one of {list(ARRAY_KEYS)}"
                )
            key = two_d[0]
        labels = None
        if labels_key is not None:
            if labels_key not in data.files:
                raise InputError(f"{path}: no labels array {labels_key!r} (keys {data.files})")
            labels = data[labels_key]
        return data[key], labels


def _from_parquet(path: Path, labels_key: str | None):
    import pyarrow.dataset as ds

    from zoorank.store.shards import embeddings_from_table

    table = ds.dataset(str(path), format="parquet").to_table()
    if "embedding" not in table.column_names:
        raise InputError(f"{path}: no 'embedding' column (columns {table.column_names})")
    labels = None
    if labels_key is not None:
        if labels_key not in table.column_names:
            raise InputError(f"{path}: no labels column {labels_key!r} (columns {table.column_names})")
    if {"sample_id", "view_index"} <= set(table.column_names):
        if labels_key is not None:
            import pyarrow.compute as pc

            order = pc.sort_indices(table, [("sample_id", "ascending"), ("view_index", "ascending")])
            labels = table.column(labels_key).take(order).to_numpy(zero_copy_only=False)
        emb = embeddings_from_table(table)
        q = int(np.unique(emb.view_index).size)
        return emb.embedding, labels, q
    col = table.column("embedding").combine_chunks()
    Z = np.asarray(col.to_pylist(), dtype=np.float32)
    if labels_key is not None:
        labels = table.column(labels_key).to_numpy(zero_copy_only=False)
    return Z, labels, None


def load_embeddings(path: str, views: int | None, labels_key: str | None):
    """(Z (N, d), labels or None, q or None) from a user's file; InputError for anything unusable."""
    p = Path(path)
    if not p.exists():
        raise InputError(f"{path}: file not found")
    q = None
    try:
        if p.is_dir() or p.suffix == ".parquet":
            Z, labels, q = _from_parquet(p, labels_key)
        elif p.suffix == ".npz":
            Z, labels = _from_npz(p, labels_key)
        elif p.suffix == ".npy":
            if labels_key is not None:
                raise InputError(f"{path}: a .npy file holds no labels; use .npz or Parquet")
            Z, labels = np.load(p, allow_pickle=False), None
        else:
            raise InputError(f"{path}: unsupported file type (use .npy, .npz or .parquet)")
    except InputError:
        raise
    except Exception as err:  # unreadable bytes, pickles refused, ...
        raise InputError(f"{path}: cannot read embeddings: {err}") from None
    Z = np.asarray(Z)
    if Z.ndim != 2 or Z.shape[0] < 2 or Z.shape[1] < 1:
        raise InputError(f"{path}: embeddings must be a 2-D matrix (rows × dim), got shape {Z.shape}")
    if not np.issubdtype(Z.dtype, np.number):
        raise InputError(f"{path}: embeddings must be numeric, got dtype {Z.dtype}")
    if views is not None:
        q = views
    if q is not None and q > 1 and Z.shape[0] % q:
        raise InputError(f"{path}: {Z.shape[0]} rows are not a multiple of --views {q}")
    if labels is not None and len(labels) != Z.shape[0]:
        raise InputError(f"{path}: {len(labels)} labels for {Z.shape[0]} rows")
    return Z, labels, q


def score_matrix(Z: np.ndarray, labels: np.ndarray | None, q: int | None, seed: int = 0) -> dict:
    """Every label-free metric (and the oracle when labels are given) for one matrix."""
    from zoorank.config import ScoreOptions
    from zoorank.metrics import registry
    from zoorank.metrics.suite import label_free_suite

    views = None
    clean = Z
    if q is not None and q > 1:
        views = Z.reshape(-1, q, Z.shape[1])
        clean = views[:, 0, :]
        if labels is not None:
            labels = np.asarray(labels).reshape(-1, q)[:, 0]
    # every per-model metric of the registry (ensemble and pool metrics need several models)
    wanted = [
        name for name, m in registry.label_free().items()
        if m.compute is not None and (views is not None or m.inputs != "augmented")
    ]
    rows = label_free_suite(clean, views, wanted, ScoreOptions(), seed)
    result = {"n": int(clean.shape[0]), "dim": int(Z.shape[1]), "views": q or 1, "metrics": {}}
    for row in rows:
        entry = {"value": _plain(row["value"])}
        if row.get("params", {}).get("error"):
            entry["error"] = row["params"]["error"]
        result["metrics"][row["metric"]] = entry
    if labels is not None:
        result["oracle"] = oracle_scores(clean, np.asarray(labels), seed)
    return result


def oracle_scores(Z: np.ndarray, y: np.ndarray, seed: int) -> dict:
    """kNN and linear-probe accuracy on the oracle's split (50/50, seeded), R@1 on all rows."""
    from zoorank.metrics.few_label.oracle_metrics import (
        knn_accuracy,
        linear_probe_accuracy,
        oracle_split,
        recall_at_1,
    )

    tr, te, _ = oracle_split(np.arange(len(y)), y, 0.5, seed)
    return {
        "knn_accuracy": float(knn_accuracy(Z[tr], y[tr], Z[te], y[te])),
        "linear_probe_accuracy": float(linear_probe_accuracy(Z[tr], y[tr], Z[te], y[te], seed=seed)),
        "recall_at_1": float(recall_at_1(Z, y)),
    }


def _plain(v):
    v = float(v)
    return None if math.isnan(v) else v


def _print_table(path: str, result: dict) -> None:
    from rich.console import Console
    from rich.table import Table

    table = Table(title=f"{path}  n={result['n']}  dim={result['dim']}  views={result['views']}")
    table.add_column("metric")
    table.add_column("value", justify="right")
    table.add_column("note")
    for name, entry in result["metrics"].items():
        value = "—" if entry["value"] is None else f"{entry['value']:.4g}"
        table.add_row(name, value, entry.get("error", ""))
    for name, value in result.get("oracle", {}).items():
        table.add_row(f"oracle/{name}", f"{value:.4f}", "needs labels")
    Console().print(table)


def main(args: argparse.Namespace) -> int:
    Z, labels, q = load_embeddings(args.embeddings, args.views, args.labels)
    if not np.isfinite(Z).all():
        raise InputError(f"{args.embeddings}: embeddings contain NaN/Inf values")
    result = score_matrix(Z, labels, q, seed=args.seed)
    if args.json:
        print(json.dumps(result, indent=2))
    else:
        _print_table(args.embeddings, result)
    return 0
