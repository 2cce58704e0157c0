"""``zoorank calibrate``: the per-model table of labelled stores, and the record of the protocol
by unit over it (:mod:`zoorank.evaluation`); and the record a run's config names.

A labelled store is one RANK ran on with the label oracle on: its leaderboard carries, per
dataset, every label-free metric (``<dataset>/<metric>``) and the oracle's kNN accuracy
(``<dataset>/knn_accuracy``, the truth; on a board of classifier heads, the heads' top-1,
``<dataset>/head_accuracy``, when present). Each (store, dataset) is one zoo; each store is one
unit (its models were trained independently of another store's) unless its argument names the
unit (``UNIT=STORE``): stores of the same networks on other domains should share one.
The record a run uses is :mod:`zoorank.decide.run_record`'s.
"""

from __future__ import annotations

from collections.abc import Sequence
from pathlib import Path
from typing import Any

import numpy as np
import pandas as pd

from zoorank.decide.leaderboard import read_leaderboard
from zoorank.errors import InputError
from zoorank.evaluation import build_record, load_record, write_record
from zoorank.metrics import registry
from zoorank.store import Store

KNN, HEAD = "knn_accuracy", "head_accuracy"


def parse_store_argument(argument: str) -> tuple[str, str]:
    """``UNIT=STORE`` → (unit, store); ``STORE`` → (its folder's name, store)."""
    unit, sep, store = argument.partition("=")
    if sep and unit and "://" not in unit and "/" not in unit:
        return unit, store
    return Path(argument.rstrip("/")).name or argument, argument


def store_rows(store_uri: str, unit: str) -> pd.DataFrame:
    """The per-model rows of one labelled store (module docstring); ``InputError`` naming the
    store when it has no leaderboard or no oracle rows."""
    store = Store(store_uri)
    try:
        board, settings = read_leaderboard(store)
    except Exception as err:  # noqa: BLE001 - any unreadable store is an input error here
        raise InputError(f"{store_uri}: no leaderboard to read ({type(err).__name__}: {err}); "
                         "run `zoorank run` on it with the label oracle on") from None
    if board is None or board.empty:
        raise InputError(f"{store_uri}: no leaderboard; run `zoorank run` on it first")
    datasets = list(dict.fromkeys(c.split("/", 1)[0] for c in board.columns
                                  if c.endswith(f"/{KNN}") or c.endswith(f"/{HEAD}")))
    if not datasets:
        raise InputError(f"{store_uri}: no label oracle rows (knn_accuracy); calibrate needs "
                         "labelled zoos: set `oracle: {knn: true}` in the config and rerun RANK")
    params = _param_counts(store)
    heads = "signal" in board and board["signal"].astype(str).str.contains("head").any()
    frames = []
    for ds in datasets:
        truth_col = f"{ds}/{HEAD}" if heads and f"{ds}/{HEAD}" in board else f"{ds}/{KNN}"
        out = pd.DataFrame({
            "zoo": f"{unit}:{ds}" if len(datasets) > 1 else unit, "unit": unit,
            "store": store_uri, "dataset": ds, "board": "heads" if heads else "embeddings",
            "kind": settings.get("zoo_kind") or "user zoo",
            "model_id": board["model_id"].astype(str).to_numpy(),
            "family": board["family"].astype(str).to_numpy() if "family" in board else "",
            "truth": pd.to_numeric(board[truth_col], errors="coerce").to_numpy(np.float64),
            "n_params": board["model_id"].astype(str).map(params).to_numpy(np.float64),
        })
        for column in board.columns:
            head, _, name = column.partition("/")
            if head == ds and name in registry.REGISTRY and registry.is_label_free(name):
                out[name] = pd.to_numeric(board[column], errors="coerce").to_numpy(np.float64)
        frames.append(out)
    return pd.concat(frames, ignore_index=True)


def _param_counts(store: Store) -> dict[str, float]:
    try:
        manifest = store.read_manifest()
    except Exception:  # noqa: BLE001 - parameter counts are optional metadata
        return {}
    if "param_count" not in manifest:
        return {}
    m = manifest[manifest["status"] == "done"].dropna(subset=["param_count"])
    return {str(k): float(v) for k, v in zip(m["model_id"], m["param_count"])}


def stores_table(arguments: Sequence[str]) -> pd.DataFrame:
    """The per-model table of the labelled stores ``arguments`` (``STORE`` or ``UNIT=STORE``)."""
    frames = [store_rows(store, unit) for unit, store in map(parse_store_argument, arguments)]
    return pd.concat(frames, ignore_index=True)


def read_table(path: str | Path) -> pd.DataFrame:
    """A per-model table from Parquet (``InputError`` naming the file when it cannot be read);
    a table without ``unit`` takes one unit per ``zoo``."""
    try:
        table = pd.read_parquet(path)
    except Exception as err:  # noqa: BLE001
        raise InputError(f"{path}: not a readable Parquet table ({type(err).__name__}: "
                         f"{err})") from None
    if "unit" not in table and "zoo" in table:
        table = table.assign(unit=table["zoo"])
    if "role" not in table and "held_out" in table:
        table = table.assign(role=np.where(table["held_out"].astype(bool), "held_out",
                                           "calibration"))
    return table


def calibrate(stores: Sequence[str], out: str | Path, table: str | Path | None = None,
              seed: int = 0) -> dict[str, Any]:
    """Build the record of the labelled ``stores`` (and/or a per-model ``table``) and write it to
    ``out``; the record as written."""
    frames = ([stores_table(stores)] if stores else []) + ([read_table(table)] if table else [])
    if not frames:
        raise InputError("calibrate: give labelled stores (STORE ...) or --table PARQUET")
    models = pd.concat(frames, ignore_index=True)
    try:
        record = build_record(models, seed=seed)
    except ValueError as err:
        raise InputError(f"calibrate: {err}") from None
    record["inputs"] = [str(s) for s in stores] + ([str(table)] if table else [])
    write_record(record, out)
    return load_record(out)
