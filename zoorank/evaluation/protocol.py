"""The protocol by unit: the metric and the shortlist fraction chosen by leave-one-unit-out
(LOUO), and their held-out figures. Pure functions over the tables of :mod:`.units`.

Conventions: a metric's unit regret is in pp (lower is better); a candidate order sorts by the
mean regret over the units considered (then the median, then the candidates' given order), over
candidates that ran on at least half of them. A unit's shortlist score is the smallest rank
fraction whose head holds a model within 0.5 pp of the best on every zoo of the unit (max over its
zoos of ``first_near_best / n_models``); the fraction is the split-conformal quantile of the
scores at α, capped at half the board.
"""

from __future__ import annotations

import math
from collections.abc import Sequence
from typing import Any

import numpy as np
import pandas as pd

from zoorank.stats.shortlist_rule import MAX_FRACTION

ALPHA = 0.1


def candidate_order(units: pd.DataFrame, candidates: Sequence[str]) -> list[str]:
    """``candidates`` that ran on at least half of ``units``, best first (mean regret, then the
    median, then the given order)."""
    keyed = []
    for i, m in enumerate(candidates):
        if m not in units:
            continue
        v = units[m].to_numpy(np.float64)
        v = v[np.isfinite(v)]
        if len(units) and v.size * 2 >= len(units) and v.size:
            keyed.append((float(v.mean()), float(np.median(v)), i, m))
    return [m for *_, m in sorted(keyed)]


def choose_metric(units: pd.DataFrame, candidates: Sequence[str]) -> str | None:
    """The first of :func:`candidate_order` on ``units`` (None when no candidate qualifies)."""
    return next(iter(candidate_order(units, candidates)), None)


def louo_picks(units: pd.DataFrame, candidates: Sequence[str]) -> pd.DataFrame:
    """Leave one unit out: for each unit, the first candidate of the order on the OTHER units
    that ran on it, and its regret there. Columns ``metric, regret`` (NaN/None where none)."""
    rows = []
    for u in units.index:
        order = candidate_order(units.drop(index=u), candidates)
        pick = next((m for m in order if np.isfinite(units.at[u, m])), None)
        rows.append({"unit": u, "metric": pick,
                     "regret": float(units.at[u, pick]) if pick else float("nan")})
    return pd.DataFrame(rows).set_index("unit") if rows else pd.DataFrame(
        columns=["metric", "regret"])


def shortlist_scores(zoos: pd.DataFrame, metric: str) -> pd.Series:
    """Per unit: the max over its zoos of ``first:<metric> / n_models`` (Inf: never held)."""
    s = zoos[f"first:{metric}"].to_numpy(np.float64) / zoos["n_models"].to_numpy(np.float64)
    s = np.where(np.isnan(s), np.inf, s)
    return pd.Series(s, index=zoos["unit"].to_numpy()).groupby(level=0, sort=False).max()


def conformal_fraction(scores: Sequence[float], alpha: float = ALPHA,
                       cap: float = MAX_FRACTION) -> dict[str, Any]:
    """Split-conformal fraction of ``scores`` at ``alpha``: the ⌈(1−α)(n+1)⌉-th smallest score,
    capped at ``cap``. ``guaranteed`` only when that order statistic exists (index ≤ n) and the
    fraction is not capped. ``{fraction, order_statistic, n, capped, guaranteed}``."""
    s = np.sort(np.asarray(scores, dtype=np.float64))
    n = int(s.size)
    k = math.ceil((1 - alpha) * (n + 1) - 1e-12)
    q = float(s[k - 1]) if 1 <= k <= n else math.inf
    capped = not q <= cap
    return {"fraction": float(min(q, cap)), "order_statistic": k, "n": n, "capped": capped,
            "guaranteed": bool(k <= n and not capped)}


def shortlist_size(fraction: float, n: int, cap: float = MAX_FRACTION) -> int:
    """Models a rank-fraction rule keeps of n: ⌈fraction·n⌉, at most max(1, ⌊cap·n⌋)."""
    return min(math.ceil(fraction * n - 1e-9), max(1, math.floor(cap * n + 1e-9)))


def unit_hits(zoos: pd.DataFrame, metric: str, fractions: pd.Series,
              cap: float = MAX_FRACTION) -> pd.Series:
    """Per unit of ``fractions`` (index unit → fraction): whether the shortlist of that fraction
    held a near-best model on every zoo of the unit."""
    out = {}
    for u, f in fractions.items():
        z = zoos[zoos["unit"] == u]
        first = z[f"first:{metric}"].to_numpy(np.float64)
        sizes = [shortlist_size(f, int(n), cap) for n in z["n_models"]]
        out[u] = bool(len(z)) and bool(np.all(np.nan_to_num(first, nan=np.inf) <= sizes))
    return pd.Series(out, dtype=bool)


def louo_fractions(scores: pd.Series, alpha: float = ALPHA,
                   cap: float = MAX_FRACTION) -> pd.Series:
    """Per unit: the conformal fraction of the OTHER units' scores."""
    return pd.Series({u: conformal_fraction(scores.drop(index=u), alpha, cap)["fraction"]
                      for u in scores.index}, dtype=np.float64)
