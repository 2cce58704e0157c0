"""Resampled metric rows (rank uncertainty) and embedding health: the tables SCORE stores
(its rows: :mod:`zoorank.score.fold_rows`), their fingerprints, and the readers RANK uses.

Two store tables beside ``metrics``:

* ``resamples`` (a table) — one row per (model_id, dataset, metric, fold): the metric computed on
  fold ``fold`` of the images (:func:`zoorank.stats.uncertainty.fold_assignment`, the same
  folds for every model). Per-model metrics are recomputed on each fold; ``nc`` takes the fold
  means of its stored per-sample table; ``clid`` / ``clid_family`` are z(CL) + z(ID) over the
  pool on each fold (the pool step included). Only the ranked metrics are resampled: the
  registry's primary-eligible ones (CLID's terms included), augmented metrics on the first
  augmented view only.
* ``health`` (a table) — one row per (model_id, dataset): :func:`zoorank.stats.health.embedding_health`
  of its clean embeddings.

Freshness. A fold row's fingerprint hashes the fingerprint of the metric row it resamples (which
already covers embeddings, settings, seed and versions), the fold settings and
:data:`RESAMPLE_VERSION`; a health row's hashes its clean embedding entry and
:data:`HEALTH_VERSION`. Readers keep only rows whose fingerprint is the expected one, exactly as
:mod:`zoorank.catalog` does for metric rows.
"""

from __future__ import annotations

from typing import Any

import pandas as pd

from zoorank.config import ScoreOptions
from zoorank.config.digests import fingerprint

RESAMPLES = "resamples"
RESAMPLES_KEY = ["model_id", "dataset", "metric", "fold"]
RESAMPLES_COLUMNS = ["model_id", "dataset", "metric", "fold", "value", "fingerprint"]
HEALTH = "health"
HEALTH_KEY = ["model_id", "dataset"]
HEALTH_STATS = ["n", "dim", "non_finite_fraction", "relative_spread", "effective_rank",
                "duplicate_fraction"]
HEALTH_COLUMNS = ["model_id", "dataset", *HEALTH_STATS, "fingerprint"]
#: bump when the fold maths (assignment, per-fold computation) changes.
RESAMPLE_VERSION = 1
#: bump when zoorank.stats.health.embedding_health changes.
HEALTH_VERSION = 1


def enabled(options: ScoreOptions) -> bool:
    return options.resample_folds >= 2


def fold_fingerprint(metric_fp: str, options: ScoreOptions) -> str:
    """Fingerprint of the fold rows of the metric row with fingerprint ``metric_fp``."""
    return fingerprint("folds", metric_fp, options.resample_folds, options.resample_fraction,
                       RESAMPLE_VERSION)


def health_fingerprint(entry_fp: str) -> str:
    return fingerprint("health", entry_fp, HEALTH_VERSION)


# -- readers -----------------------------------------------------------------------------------------


def fresh_resamples(store: Any, metrics: pd.DataFrame, options: ScoreOptions) -> pd.DataFrame:
    """The fold rows whose fingerprint matches the fresh metric row (``metrics``) they resample."""
    table = store.read_frame(RESAMPLES, RESAMPLES_COLUMNS)
    if table.empty or metrics.empty or not enabled(options):
        return pd.DataFrame(columns=RESAMPLES_COLUMNS)
    expected = {(r.model_id, r.dataset, r.metric): fold_fingerprint(r.fingerprint, options)
                for r in metrics[["model_id", "dataset", "metric", "fingerprint"]]
                .itertuples(index=False)}
    keys = zip(table["model_id"], table["dataset"], table["metric"], table["fingerprint"])
    keep = [expected.get((m, d, k)) == fp for m, d, k, fp in keys]
    return table[keep].reset_index(drop=True)


def fresh_health(store: Any, manifest: pd.DataFrame, clean_view: str | None) -> pd.DataFrame:
    """The health rows whose fingerprint matches the fresh clean entry (a fresh manifest)."""
    table = store.read_frame(HEALTH, HEALTH_COLUMNS)
    if table.empty or manifest.empty or clean_view is None:
        return pd.DataFrame(columns=HEALTH_COLUMNS)
    done = manifest[(manifest["status"] == "done") & (manifest["view"] == clean_view)]
    expected = {(r.model_id, r.dataset): health_fingerprint(str(r.fingerprint))
                for r in done.itertuples(index=False)}
    keep = [expected.get((m, d)) == fp
            for m, d, fp in zip(table["model_id"], table["dataset"], table["fingerprint"])]
    return table[keep].reset_index(drop=True)
