"""Resampled metric rows (rank uncertainty) and embedding health: what SCORE stores, what RANK reads.

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

import math
import warnings
from collections.abc import Iterable, Sequence
from typing import Any

import numpy as np
import pandas as pd

from zoorank.config import RunConfig, ScoreOptions
from zoorank.config.digests import fingerprint
from zoorank.metrics import registry

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


def resampled_metrics(config: RunConfig) -> list[str]:
    """Per-model metric names SCORE recomputes on every fold (primary-eligible ones)."""
    from zoorank.metrics.suite import per_model_metrics

    return [m for m in per_model_metrics(config.metrics) if registry.info(m).primary]


def fold_fingerprint(metric_fp: str, options: ScoreOptions) -> str:
    """Fingerprint of the fold rows of the metric row with fingerprint ``metric_fp``."""
    return fingerprint("folds", metric_fp, options.resample_folds, options.resample_fraction,
                       RESAMPLE_VERSION)


def health_fingerprint(entry_fp: str) -> str:
    return fingerprint("health", entry_fp, HEALTH_VERSION)


def fold_values(
    clean_ids: np.ndarray | None, clean: np.ndarray | None, aug_ids: np.ndarray | None,
    views: np.ndarray | None, names: Sequence[str], options: ScoreOptions, seed: int,
) -> dict[str, list[float]]:
    """metric → its value on each fold (NaN where it fails on a fold), the suite's settings."""
    from zoorank.metrics.suite import label_free_suite
    from zoorank.stats.uncertainty import fold_assignment

    F, frac = options.resample_folds, options.resample_fraction
    fc = fold_assignment(clean_ids, F, frac, seed) if clean is not None else None
    fa = fold_assignment(aug_ids, F, frac, seed) if views is not None else None
    out: dict[str, list[float]] = {m: [] for m in names}
    for k in range(F):
        c = clean[fc == k] if fc is not None else None
        v = views[fa == k] if fa is not None else None
        with warnings.catch_warnings():
            warnings.simplefilter("ignore")
            rows = label_free_suite(c, v, names, options, seed)
        for r in rows:
            out[r["metric"]].append(float(r["value"]))
    return out


def fold_rows(model_id: str, dataset: str, metric: str, values: Iterable[float],
              fp: str) -> list[dict[str, Any]]:
    return [{"model_id": model_id, "dataset": dataset, "metric": metric, "fold": int(k),
             "value": float(v), "fingerprint": fp} for k, v in enumerate(values)]


def nc_fold_values(reliability: pd.DataFrame, options: ScoreOptions, seed: int) -> list[float]:
    """Fold means of an ensemble's per-sample NC (its stored test points)."""
    from zoorank.stats.uncertainty import fold_assignment

    folds = fold_assignment(reliability["sample_id"].to_numpy(), options.resample_folds,
                            options.resample_fraction, seed)
    nc = reliability[registry.ensemble_metric().name].to_numpy(dtype=np.float64)
    return [float(np.mean(nc[folds == k])) if np.any(folds == k) else math.nan
            for k in range(options.resample_folds)]


def clid_fold_values(cl: np.ndarray, id_: np.ndarray) -> np.ndarray:
    """(m, F) CLID fold values of a pool from its (m, F) CL and ID fold values: z(CL) + z(ID) on
    each fold over the members finite on that fold (NaN elsewhere, and on a fold with < 2)."""
    from zoorank.metrics.label_free.clid import clid

    out = np.full(cl.shape, np.nan)
    for k in range(cl.shape[1]):
        ok = np.isfinite(cl[:, k]) & np.isfinite(id_[:, k])
        if ok.sum() >= 2:
            with warnings.catch_warnings():
                warnings.simplefilter("ignore")
                out[ok, k] = clid(cl[ok, k], id_[ok, k], mode="zscore")
    return out


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
