"""Ranks of models under one metric, and their aggregation over datasets: pure functions.

Conventions (``specs/clid_lidar.md`` A.6, B.5):

* **Ranks**: 1 = best; ties get the average of the ranks they span (``scipy.stats.rankdata``
  ``method="average"``); a NaN (a metric that failed on degenerate input) ranks after every finite
  value, NaNs tied among themselves.
* **Direction**: +1 when a higher value is better, −1 when lower is better.
* **Joint rank** (CLID §3.5): ``sqrt(r_pred · r_acc)``, the geometric mean of a predictor's rank and
  an in-domain accuracy's rank.

No I/O, no Ray: the RANK stage (``zoorank.rank``) calls these on per-model vectors.
"""

from __future__ import annotations

from collections.abc import Mapping
from typing import Any, Literal

import numpy as np
import pandas as pd
from scipy import stats

__all__ = ["AGGREGATION_DIRECTIONS", "rank_within", "aggregate_ranks", "joint_rank",
           "merged_signal_ranks", "flagged_last"]

Aggregation = Literal["rank_product", "mean_rank", "borda"]

#: direction of each aggregate statistic: rank product and mean rank are lower-is-better, a Borda
#: count is higher-is-better.
AGGREGATION_DIRECTIONS: dict[str, int] = {"rank_product": -1, "mean_rank": -1, "borda": +1}


def model_vector(x: Any, name: str) -> np.ndarray:
    arr = np.asarray(x, dtype=np.float64)
    if arr.ndim != 1:
        raise ValueError(f"{name} must be 1-D (one value per model), got shape {arr.shape}")
    return arr


def check_direction(direction: int, name: str = "direction") -> int:
    if direction not in (1, -1):
        raise ValueError(f"{name} must be +1 (higher is better) or -1 (lower is better), "
                         f"got {direction!r}")
    return int(direction)


def rank_within(values: Any, direction: int = 1) -> np.ndarray:
    """Ranks of models by one metric: 1 = best, ties averaged, NaN last.

    Parameters
    ----------
    values : array-like (n,)
        One value per model; NaN marks a metric that could not be computed (ranked last).
    direction : {+1, -1}
        +1 when a higher value is better, −1 when lower is better.

    Returns
    -------
    ndarray (n,) float64
        ``scipy.stats.rankdata(-direction * values, method="average")`` over the finite values;
        the k NaNs share the average rank of the last k places, ``n - (k - 1) / 2``.
    """
    v = model_vector(values, "values")
    direction = check_direction(direction)
    ranks = np.empty_like(v)
    finite = ~np.isnan(v)
    n_finite = int(finite.sum())
    if n_finite:
        ranks[finite] = stats.rankdata(-direction * v[finite], method="average")
    ranks[~finite] = (n_finite + 1 + len(v)) / 2.0
    return ranks


def flagged_last(rank: Any, flagged: Any, order_flagged: bool = True,
                 method: str = "average") -> np.ndarray:
    """Ranks (1 = best) with every flagged model after every unflagged one.

    Parameters
    ----------
    rank : array-like (n,)
        Ranks of one order, lower = better; NaN = unranked (stays NaN).
    flagged : array-like (n,) bool
        Models with a blocking health flag (:data:`zoorank.stats.health.BLOCKING`).
    order_flagged : bool
        True: the flagged models keep their relative order behind the unflagged ones. False (a
        metric degenerate on collapse orders the board: a constant map has perfect alignment):
        they share the average of the last places, the metric orders none of them.
    method : how ties are ranked (:func:`scipy.stats.rankdata`): ``"average"`` (the leaderboard's
        convention) or ``"min"`` (the per-metric uncertainty table's).

    Returns
    -------
    ndarray (n,) float64
        The k ranked unflagged models take ranks 1..k in their order; the f ranked flagged ones
        take k+1..k+f. Without flagged models the ranks are those of ``rank`` re-ranked by
        ``method``. Cost O(n log n).
    """
    r = model_vector(rank, "rank")
    f = np.asarray(flagged, dtype=bool)
    if f.shape != r.shape:
        raise ValueError(f"flagged must have the shape of rank {r.shape}, got {f.shape}")
    out = np.full_like(r, np.nan)
    ok, bad = np.isfinite(r) & ~f, np.isfinite(r) & f
    if ok.any():
        out[ok] = stats.rankdata(r[ok], method=method)
    n_ok, n_bad = int(ok.sum()), int(bad.sum())
    if n_bad:
        out[bad] = n_ok + (stats.rankdata(r[bad], method=method) if order_flagged
                           else (n_bad + 1) / 2.0)
    return out


def aggregate_ranks(
    rank_table: pd.DataFrame,
    method: Aggregation = "rank_product",
    weights: Mapping[str, float] | None = None,
) -> pd.Series:
    """Aggregate per-dataset ranks (rows = models, columns = datasets) into one statistic per model.

    * ``rank_product``: weighted geometric mean of the ranks, ``exp(Σ w_j log r_j / Σ w_j)``
      (lower is better);
    * ``mean_rank``: weighted arithmetic mean of the ranks (lower is better);
    * ``borda``: weighted Borda count, ``Σ w_j (n_j − r_j)`` where ``n_j`` is the number of ranked
      models in column j (the best model of a column earns ``n_j − 1`` points; higher is better).

    ``weights`` maps column names to non-negative weights (missing columns weigh 1). NaN entries
    (a model absent from a dataset) are skipped and the weights renormalised over the columns a
    model has. See :data:`AGGREGATION_DIRECTIONS` for the direction of each statistic.
    """
    if method not in AGGREGATION_DIRECTIONS:
        raise ValueError(f"unknown aggregation {method!r}; expected one of "
                         f"{sorted(AGGREGATION_DIRECTIONS)}")
    if rank_table.shape[1] == 0:
        raise ValueError("rank_table has no columns (no dataset to aggregate)")
    r = rank_table.to_numpy(dtype=np.float64)
    if np.any(r[~np.isnan(r)] < 1):
        raise ValueError("ranks must be >= 1 (1 = best)")
    weights = dict(weights or {})
    unknown = sorted(set(weights) - {str(c) for c in rank_table.columns})
    if unknown:
        raise ValueError(f"weights name unknown columns {unknown}; columns: "
                         f"{list(rank_table.columns)}")
    w = np.array([float(weights.get(str(c), 1.0)) for c in rank_table.columns])
    if np.any(w < 0) or not np.all(np.isfinite(w)):
        raise ValueError(f"weights must be finite and non-negative, got {w.tolist()}")
    present = ~np.isnan(r)
    wm = np.where(present, w[None, :], 0.0)
    total = wm.sum(axis=1)
    with np.errstate(invalid="ignore", divide="ignore"):
        if method == "rank_product":
            out = np.exp((wm * np.log(np.where(present, r, 1.0))).sum(axis=1) / total)
        elif method == "mean_rank":
            out = (wm * np.where(present, r, 0.0)).sum(axis=1) / total
        else:
            n_j = present.sum(axis=0)[None, :]
            out = (wm * np.where(present, n_j - r, 0.0)).sum(axis=1)
    out = np.where(total > 0, out, np.nan)
    return pd.Series(out, index=rank_table.index, name=method)


def joint_rank(rank_pred: Any, rank_acc: Any) -> np.ndarray:
    """CLID's joint rank ``sqrt(r_pred · r_acc)`` (geometric mean of two rank vectors; lower = better)."""
    a, b = model_vector(rank_pred, "rank_pred"), model_vector(rank_acc, "rank_acc")
    if a.shape != b.shape:
        raise ValueError(f"rank_pred and rank_acc differ in length: {a.shape} vs {b.shape}")
    if np.any(a[~np.isnan(a)] < 1) or np.any(b[~np.isnan(b)] < 1):
        raise ValueError("ranks must be >= 1 (1 = best)")
    return np.sqrt(a * b)


def merged_signal_ranks(oriented: Any, groups: Any) -> np.ndarray:
    """Ranks on one board of models ranked by different signals (a classifier's estimated
    accuracy, an encoder's embedding metric), which no common scale orders.

    Parameters
    ----------
    oriented : (B, n) values, higher is better within each signal; NaN: not ranked.
    groups : (n,) the signal of each model (any labels).

    Returns
    -------
    (B, n) ranks, 1 = best: a model's rank among the ranked models of its own signal (ties
    averaged), stretched to the ranked models of the board, ``1 + (r − 1)(N − 1)/(g − 1)`` with
    ``g`` the models of its signal and ``N`` of the board (1 when ``g = 1``): the best of each
    signal shares place 1, the worst of each place N. NaN where the value is NaN. O(B · n log n).
    """
    v = np.atleast_2d(np.asarray(oriented, dtype=np.float64))
    labels = np.asarray(groups)
    out = np.full(v.shape, np.nan)
    finite = np.isfinite(v)
    total = finite.sum(axis=1, keepdims=True).astype(np.float64)
    for g in np.unique(labels):
        cols = labels == g
        sub = v[:, cols]
        ok = np.isfinite(sub)
        r = stats.rankdata(np.where(ok, -sub, np.inf), method="average", axis=1)
        size = ok.sum(axis=1, keepdims=True).astype(np.float64)
        stretch = np.where(size > 1, (total - 1) / np.maximum(size - 1, 1), 0.0)
        out[:, cols] = np.where(ok, 1 + (r - 1) * stretch, np.nan)
    return out
