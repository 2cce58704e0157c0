"""SCORE's resampled rows (rank uncertainty): each ranked metric on seeded folds of the images,
``nc``'s fold means, CLID's pool step on each fold. The tables they go to, their fingerprints and
their readers (RANK's side) are :mod:`zoorank.oracle.resample`."""

from __future__ import annotations

import math
import warnings
from collections.abc import Iterable, Sequence
from typing import Any

import numpy as np
import pandas as pd

from zoorank.config import RunConfig, ScoreOptions
from zoorank.metrics import registry


def resampled_metrics(config: RunConfig) -> list[str]:
    """Per-model metric names SCORE recomputes on every fold (primary-eligible ones)."""
    from zoorank.metrics.suite import per_model_metrics

    return [m for m in per_model_metrics(config.metrics) if registry.info(m).primary]


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
