"""Summaries and intervals over units. Pure functions (numpy/scipy).

Every interval here is over units (independent checkpoint sets), never over the zoos or runs of
one unit, which are clustered.
"""

from __future__ import annotations

from typing import Any

import numpy as np
from scipy.stats import binomtest

from zoorank.stats.agreement import bootstrap_indices, percentile_interval

#: bootstrap resamples of the paired differences (seeded).
N_RESAMPLES = 10_000


def finite(values: Any) -> np.ndarray:
    """The finite values of ``values`` as float64 (NaN and ±Inf dropped)."""
    v = np.asarray(values, dtype=np.float64).ravel()
    return v[np.isfinite(v)]


def summary(values: Any) -> dict[str, float | int | None]:
    """``{median, p90, mean, n}`` of the finite values (linear interpolation; None for none)."""
    v = finite(values)
    if v.size == 0:
        return {"median": None, "p90": None, "mean": None, "n": 0}
    return {"median": float(np.median(v)), "p90": float(np.percentile(v, 90)),
            "mean": float(v.mean()), "n": int(v.size)}


def clopper_pearson_lower(hits: int, n: int, confidence: float = 0.9) -> float | None:
    """One-sided exact (Clopper–Pearson) lower confidence bound on a hit rate: the p with
    P(X ≥ hits | n, p) = 1 − confidence (0 when hits = 0); None for n = 0."""
    if n == 0:
        return None
    ci = binomtest(int(hits), int(n), alternative="greater").proportion_ci(
        confidence_level=confidence, method="exact")
    return float(ci.low)


def wilson(hits: int, n: int, confidence: float = 0.9) -> list[float] | None:
    """Two-sided Wilson score interval ``[lo, hi]`` on a hit rate over n units; None for n = 0."""
    if n == 0:
        return None
    ci = binomtest(int(hits), int(n)).proportion_ci(confidence_level=confidence, method="wilson")
    return [float(ci.low), float(ci.high)]


def paired_difference(a: Any, b: Any, confidence: float = 0.9, seed: int = 0,
                      n_resamples: int = N_RESAMPLES) -> dict[str, Any]:
    """The mean of ``a − b`` over the units where both are finite, with a percentile bootstrap
    interval over units (``seed``): ``{mean_diff_pp, interval_90: [lo, hi], n}``. A negative
    difference of regrets means ``a`` is better. None figures for no unit; a single unit's
    interval is the point."""
    a, b = np.asarray(a, np.float64), np.asarray(b, np.float64)
    if a.shape != b.shape:
        raise ValueError(f"paired_difference: a and b differ in shape: {a.shape} vs {b.shape}")
    ok = np.isfinite(a) & np.isfinite(b)
    d = a[ok] - b[ok]
    if d.size == 0:
        return {"mean_diff_pp": None, "interval_90": None, "n": 0}
    idx = bootstrap_indices(d.size, n_resamples, seed)
    lo, hi = percentile_interval(d[idx].mean(axis=1), confidence)[0]
    return {"mean_diff_pp": float(d.mean()), "interval_90": [float(lo), float(hi)],
            "n": int(d.size)}
