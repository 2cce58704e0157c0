"""Consensus among label-free metrics (no oracle): how alike their orders of the models are, Kendall's
W over them, and each model's spread of ranks across them. Ranks follow :mod:`zoorank.stats.ranks`.
"""

from __future__ import annotations

import warnings
from collections.abc import Mapping, Sequence
from typing import Any

import numpy as np
import pandas as pd
from scipy import stats

from zoorank.stats.agreement import quiet_statistic
from zoorank.stats.ranks import rank_within

__all__ = ["rank_agreement_matrix", "kendall_w", "rank_disagreement"]


def rank_agreement_matrix(values: pd.DataFrame, directions: Mapping[str, int]) -> pd.DataFrame:
    """Signed Kendall τ-b between every pair of metrics (columns of ``values``, rows = models).

    Each column is oriented by its direction and NaN ranks last (:func:`rank_within`), so entry
    (a, b) is +1 when metrics a and b order the models identically. Undefined entries are NaN.
    """
    cols: Sequence[str] = list(values.columns)
    scores = {c: -rank_within(values[c].to_numpy(np.float64), directions.get(c, 1)) for c in cols}
    out = pd.DataFrame(np.nan, index=cols, columns=cols, dtype=np.float64)
    for i, a in enumerate(cols):
        for b in cols[i:]:
            tau = quiet_statistic(stats.kendalltau, scores[a], scores[b]) if len(values) >= 2 else np.nan
            out.loc[a, b] = out.loc[b, a] = tau
    return out


def kendall_w(ranks: Any) -> float:
    """Kendall's coefficient of concordance W of m metrics ranking n models.

    Parameters
    ----------
    ranks : (m, n) ranks, one row per metric (1 = best; ties averaged as :func:`rank_within`
        gives them). Only models ranked by every metric (no NaN in their column) are used.

    Returns
    -------
    float in [0, 1]: ``W = 12 S / (m² (n³ − n) − m Σ T)`` with ``S = Σ_i (R_i − m(n + 1)/2)²``,
    ``R_i`` the rank sum of model i and ``T = Σ (t³ − t)`` over each metric's tie groups of size t
    (Kendall & Babington Smith 1939, tie-corrected). 1: every metric orders the models the same way;
    0: no concordance. NaN with fewer than 2 metrics or 2 models, or when every metric ties all.
    """
    r = np.asarray(ranks, dtype=np.float64)
    if r.ndim != 2:
        raise ValueError(f"ranks must be (m metrics, n models), got shape {r.shape}")
    r = r[:, ~np.isnan(r).any(axis=0)]
    m, n = r.shape
    if m < 2 or n < 2:
        return float("nan")
    # re-rank the complete cases so each row is a ranking of exactly these n models
    r = np.vstack([stats.rankdata(row, method="average") for row in r])
    totals = r.sum(axis=0)
    s = float(np.sum((totals - m * (n + 1) / 2.0) ** 2))
    ties = 0.0
    for row in r:
        _, counts = np.unique(row, return_counts=True)
        ties += float(np.sum(counts.astype(np.float64) ** 3 - counts))
    den = m * m * (n ** 3 - n) - m * ties
    return float(12.0 * s / den) if den > 0 else float("nan")


def rank_disagreement(ranks: Any) -> np.ndarray:
    """Per model: how much the metrics disagree about its rank, in [0, 1].

    The standard deviation (population, over the metrics that rank it) of a model's ranks in the
    (m, n) matrix ``ranks``, divided by its largest possible value (n − 1)/2: 0 when every metric
    gives it the same rank, 1 when half put it first and half last. NaN when fewer than 2 metrics
    rank it or n < 2.
    """
    r = np.asarray(ranks, dtype=np.float64)
    if r.ndim != 2:
        raise ValueError(f"ranks must be (m metrics, n models), got shape {r.shape}")
    n = r.shape[1]
    out = np.full(n, np.nan)
    counts = (~np.isnan(r)).sum(axis=0)
    ok = counts >= 2
    if n < 2 or not ok.any():
        return out
    with warnings.catch_warnings():
        warnings.simplefilter("ignore", RuntimeWarning)
        sd = np.nanstd(r[:, ok], axis=0)
    out[ok] = sd / ((n - 1) / 2.0)
    return out
