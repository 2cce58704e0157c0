"""What RANK and REPORT were computed from: fingerprints that let a rerun skip them.

Every other artifact is keyed by the fingerprint of what produced it (:mod:`zoorank.catalog`); the
two derived stages are too:

* **RANK** — :func:`rank_inputs_fingerprint` hashes the fresh metric, oracle, fold and health rows
  (their fingerprints and values), the fresh manifest's statuses and errors (the ``failed``
  table), the oracle failures of this run, the models (ids, families, groups, datasets), the
  config's rank-relevant sections and :data:`RANK_VERSION`. It rides on the leaderboard's commit
  as the metadata key :data:`INPUTS_KEY`; RANK compares it before computing anything.
* **REPORT** — :func:`report_inputs_fingerprint` hashes the leaderboard commit it renders (its
  version names the agreement, failed and uncertainty tables written with it), the oracle table's
  version, the fresh reliability tables, the fresh manifest, the config and
  :data:`REPORT_VERSION`; it is kept in :data:`REPORT_INPUTS` beside the page.

A changed metric or oracle row, fold row, health row, setting or implementation version changes
the fingerprint, and the stage recomputes. Cost: one hash of each table's rows, O(rows).
"""

from __future__ import annotations

import hashlib
import json
from collections.abc import Mapping, Sequence
from typing import Any

import numpy as np
import pandas as pd

from zoorank.config import RunConfig
from zoorank.config.digests import fingerprint
from zoorank.store import Store, tables
from zoorank.store.layout import LEADERBOARD, ORACLE, REPORT_DIR

#: bump when RANK computes something else from the same inputs (board, decision, agreement maths).
RANK_VERSION = 1
#: bump when REPORT renders something else from the same inputs.
REPORT_VERSION = 1
#: metadata key of the leaderboard commit that holds :func:`rank_inputs_fingerprint`.
INPUTS_KEY = "zoorank_inputs"
#: the report's record of what it was rendered from (beside ``index.html``).
REPORT_INPUTS = f"{REPORT_DIR}/inputs.json"

#: the columns of each input table RANK's outputs depend on (absent ones are ignored).
_METRIC_COLUMNS = ["model_id", "dataset", "metric", "value", "fingerprint", "params", "dim"]
_FOLD_COLUMNS = ["model_id", "dataset", "metric", "fold", "value", "fingerprint"]
_MANIFEST_COLUMNS = ["dataset", "view", "model_id", "status", "error", "fingerprint"]


def frame_digest(frame: pd.DataFrame | None, columns: Sequence[str]) -> str:
    """sha256 of the rows of ``frame`` restricted to ``columns``, independent of row order.

    Values are hashed by :func:`pandas.util.hash_pandas_object` (floats by their bits, NaN
    included); O(rows log rows)."""
    if frame is None or frame.empty:
        return "empty"
    cols = [c for c in columns if c in frame.columns]
    part = frame[cols].astype({c: str for c in cols if frame[c].dtype == object})
    rows = np.sort(pd.util.hash_pandas_object(part, index=False).to_numpy(np.uint64))
    h = hashlib.sha256(json.dumps(cols).encode())
    h.update(rows.tobytes())
    return h.hexdigest()


def _config_part(config: RunConfig) -> dict[str, Any]:
    """The config without its store location (moving a store changes no result)."""
    return config.model_dump(mode="json", exclude={"store"})


def rank_inputs_fingerprint(
    config: RunConfig,
    models: Sequence[Any],
    metrics: pd.DataFrame,
    oracle: pd.DataFrame,
    folds: pd.DataFrame,
    health: pd.DataFrame,
    manifest: pd.DataFrame,
    oracle_failures: Sequence[Mapping[str, Any]] = (),
) -> str:
    """Fingerprint of everything RANK's outputs are computed from (see the module docstring)."""
    model_part = [(m.model_id, getattr(m, "family", None), getattr(m, "group", None),
                   list(m.datasets) if getattr(m, "datasets", None) is not None else None)
                  for m in models]
    failures = sorted(json.dumps(dict(f), sort_keys=True, default=str) for f in oracle_failures)
    return fingerprint("rank", RANK_VERSION, _config_part(config), model_part,
                       frame_digest(metrics, _METRIC_COLUMNS),
                       frame_digest(oracle, _METRIC_COLUMNS),
                       frame_digest(folds, _FOLD_COLUMNS),
                       frame_digest(health, list(health.columns) if health is not None else []),
                       frame_digest(manifest, _MANIFEST_COLUMNS), failures, length=32)


def leaderboard_commit(store: Store) -> tuple[int | None, dict[str, Any]]:
    """(version, commit info with its custom metadata) of the latest leaderboard commit, read
    from its log file alone (no data file); (None, {}) without a leaderboard."""
    version = store.table_version(LEADERBOARD)
    if version is None:
        return None, {}
    return version, tables.commit_info(
        store.read_text(f"{LEADERBOARD}/{tables.commit_file(version)}"))


def report_inputs_fingerprint(config: RunConfig, store: Store, manifest: pd.DataFrame,
                              fresh_reliability: Mapping[tuple[str, str], str],
                              metrics: str) -> str | None:
    """Fingerprint of what REPORT renders: the leaderboard commit (and the tables it names), the
    oracle table's version, the fresh reliability tables and manifest, the fresh metric rows
    (``metrics``: :func:`zoorank.leaderboard.metrics_fingerprint`, so a leaderboard gone stale is
    never taken as current), the config (the store's name is on the page) and
    :data:`REPORT_VERSION`; None without a leaderboard."""
    version, info = leaderboard_commit(store)
    if version is None:
        return None
    return fingerprint("report", REPORT_VERSION, config.model_dump(mode="json"), store.name,
                       version, info.get(INPUTS_KEY), info.get("zoorank_tables"),
                       store.table_version(ORACLE), sorted(map(list, fresh_reliability.items())),
                       frame_digest(manifest, list(manifest.columns)), metrics, length=32)


def report_is_current(store: Store, inputs: str | None) -> bool:
    """Whether the page on disk was rendered from ``inputs`` (and is still there)."""
    if inputs is None or not store.exists(f"{REPORT_DIR}/index.html") \
            or not store.exists(REPORT_INPUTS):
        return False
    try:
        return store.read_json(REPORT_INPUTS).get("fingerprint") == inputs
    except (ValueError, AttributeError):
        return False


def record_report_inputs(store: Store, inputs: str | None) -> None:
    """Keep ``inputs`` beside the page REPORT just wrote (see :func:`report_is_current`)."""
    if inputs is not None:
        store.write_json(REPORT_INPUTS, {"fingerprint": inputs, "version": REPORT_VERSION})
