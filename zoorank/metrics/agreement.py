"""Agreement of a label-free metric with a label oracle over the models: pure functions.

Conventions (``specs/clid_lidar.md`` A.6, B.5):

* **Ranks** and **directions** are those of :mod:`zoorank.metrics.ranks` (1 = best, ties averaged,
  NaN last).
* **Direction**: +1 when a higher value is better, −1 when lower is better. Every correlation is
  computed between the *oriented* vectors ``direction * metric`` and ``oracle_direction * oracle``,
  so +1 always means "the metric orders the models as the oracle does" (signed Kendall τ-b,
  Spearman ρ, Pearson r from ``scipy.stats``; the specs fix the papers' ``|C − D|`` typo).
* **Top-1 regret** (LiDAR's "top-ranking model" protocol): oracle value of the best model minus the
  oracle value of the metric's pick, in oracle units, oriented so that it is ≥ 0; when several models
  tie for the metric's top value, the pick is a uniformly random one of them (their mean oracle value).

No I/O, no Ray: the RANK stage (``zoorank.rank``) calls these on per-model vectors.
"""

from __future__ import annotations

import warnings
from typing import Any

import numpy as np
from scipy import stats

from zoorank.metrics.ranks import check_direction, model_vector, rank_within

__all__ = [
    "top1_regret",
    "topk_recall",
    "bootstrap_indices",
    "kendall_tau_b_rows",
    "agreement",
]


def _paired(metric_values: Any, oracle_values: Any) -> tuple[np.ndarray, np.ndarray]:
    m, o = model_vector(metric_values, "metric_values"), model_vector(oracle_values, "oracle_values")
    if m.shape != o.shape:
        raise ValueError(f"metric_values and oracle_values differ in length: {m.shape} vs {o.shape}")
    return m, o


def top1_regret(metric_values: Any, oracle_values: Any, direction: int = 1,
                oracle_direction: int = 1) -> tuple[float, float, float]:
    """(regret, oracle value of the metric's pick, best oracle value); regret ≥ 0 in oracle units.

    The pick is the model with the best metric value (NaN never picked unless all are NaN); ties
    at the top are resolved as a uniformly random pick, i.e. the mean oracle value of the tied
    models. Models with a NaN oracle value must be removed by the caller.
    """
    m, o = _paired(metric_values, oracle_values)
    direction = check_direction(direction)
    oracle_direction = check_direction(oracle_direction, "oracle_direction")
    if len(m) == 0 or np.isnan(o).any():
        raise ValueError("oracle_values must be non-empty and free of NaN")
    s = direction * m
    if np.all(np.isnan(s)):
        picked = float(np.mean(o))
    else:
        top = s == np.nanmax(s)
        picked = float(np.mean(o[top]))
    oo = oracle_direction * o
    best = float(oracle_direction * oo.max())
    return float(oracle_direction * (best - picked)), picked, best


def topk_recall(metric_values: Any, oracle_values: Any, k: int, direction: int = 1,
                oracle_direction: int = 1) -> float:
    """Share of the oracle's top-k models that are among the metric's top-k.

    Orders are by :func:`rank_within` (NaN last), ties broken by model position; ``k`` is capped at
    the number of models.
    """
    m, o = _paired(metric_values, oracle_values)
    if k < 1:
        raise ValueError(f"k must be >= 1, got {k}")
    k = min(int(k), len(m))
    if k == 0:
        return float("nan")
    top_m = set(np.argsort(rank_within(m, direction), kind="stable")[:k].tolist())
    top_o = set(np.argsort(rank_within(o, oracle_direction), kind="stable")[:k].tolist())
    return len(top_m & top_o) / k


def bootstrap_indices(n: int, n_resamples: int, seed: int = 0) -> np.ndarray:
    """(n_resamples, n) int64 indices of models drawn with replacement (``numpy`` PCG64, ``seed``)."""
    rng = np.random.default_rng(seed)
    return rng.integers(0, n, size=(n_resamples, n), dtype=np.int64)


def kendall_tau_b_rows(x: np.ndarray, y: np.ndarray, chunk: int = 256) -> np.ndarray:
    """Kendall τ-b of each row pair of ``x`` and ``y`` (B, n): vectorised, NaN where undefined.

    τ-b = Σ sign(Δx) sign(Δy) / sqrt(Σ sign(Δx)² · Σ sign(Δy)²) over all pairs, which is
    ``scipy.stats.kendalltau(x[b], y[b])`` (variant "b") row by row. Memory O(chunk · n²).
    """
    x, y = np.atleast_2d(np.asarray(x, np.float64)), np.atleast_2d(np.asarray(y, np.float64))
    out = np.empty(x.shape[0])
    for start in range(0, x.shape[0], chunk):
        xs, ys = x[start:start + chunk], y[start:start + chunk]
        sx = np.sign(xs[:, :, None] - xs[:, None, :])
        sy = np.sign(ys[:, :, None] - ys[:, None, :])
        num = (sx * sy).sum(axis=(1, 2))
        den = np.sqrt(np.abs(sx).sum(axis=(1, 2)) * np.abs(sy).sum(axis=(1, 2)))
        with np.errstate(invalid="ignore", divide="ignore"):
            out[start:start + chunk] = np.where(den > 0, num / den, np.nan)
    return out


def _pearson_rows(x: np.ndarray, y: np.ndarray) -> np.ndarray:
    xc = x - x.mean(axis=1, keepdims=True)
    yc = y - y.mean(axis=1, keepdims=True)
    den = np.sqrt((xc * xc).sum(axis=1) * (yc * yc).sum(axis=1))
    with np.errstate(invalid="ignore", divide="ignore"):
        r = np.where(den > 0, (xc * yc).sum(axis=1) / den, np.nan)
    return np.clip(r, -1.0, 1.0)


def quiet_statistic(fn, *args) -> float:
    with warnings.catch_warnings():
        warnings.simplefilter("ignore")
        value = fn(*args)
    stat = getattr(value, "statistic", value[0] if isinstance(value, tuple) else value)
    return float(stat)


def agreement(
    metric_values: Any,
    oracle_values: Any,
    direction: int = 1,
    oracle_direction: int = 1,
    bootstrap: int = 1000,
    seed: int = 0,
    top_k: int = 3,
    confidence: float = 0.95,
) -> dict[str, Any]:
    """Agreement of one label-free metric with one oracle metric over a pool of models.

    Parameters
    ----------
    metric_values, oracle_values : array-like (n,)
        One value per model, aligned. Models whose oracle value is NaN are dropped. A NaN metric
        value (the metric failed on that model) ranks the model last: Kendall τ-b and Spearman are
        computed on the rank vectors (identical to scipy on the raw values when nothing is NaN);
        Pearson uses the models whose metric and oracle values are both finite.
    direction, oracle_direction : {+1, -1}
        Which way is better for the metric and for the oracle (see the module docstring).
    bootstrap : int
        Resamples of the models (with replacement) for percentile confidence intervals of τ,
        Spearman and Pearson; 0 disables them (the CI columns are NaN).
    seed : int
        Seeds the bootstrap (:func:`bootstrap_indices`), so the intervals are reproducible.
    top_k : int
        k of the top-k recall.
    confidence : float
        Two-sided level of the percentile intervals.

    Returns
    -------
    dict
        ``n_models``, ``kendall_tau``, ``kendall_ci_low/high``, ``spearman``,
        ``spearman_ci_low/high``, ``pearson``, ``pearson_ci_low/high``, ``top1_regret``,
        ``top1_oracle``, ``oracle_best``, ``topk_recall``, ``top_k``, ``n_metric_nan``.
        Correlations are NaN when undefined (a constant vector); fewer than 2 models is an error.
    """
    m, o = _paired(metric_values, oracle_values)
    direction = check_direction(direction)
    oracle_direction = check_direction(oracle_direction, "oracle_direction")
    if not 0 < confidence < 1:
        raise ValueError(f"confidence must be in (0, 1), got {confidence}")
    keep = ~np.isnan(o)
    m, o = m[keep], o[keep]
    n = len(m)
    if n < 2:
        raise ValueError(f"agreement needs at least 2 models with an oracle value, got {n}")
    # Oriented rank scores (higher = better; NaN metric values tied at the bottom, infinite
    # values such as an εSC that never reached ε handled as ties): τ-b and Spearman depend on
    # the orders only, so this equals scipy on the raw values whenever those are finite.
    sm = -rank_within(m, direction)
    so = -rank_within(o, oracle_direction)
    # Pearson needs finite values on both sides (an εSC that never reached ε is +inf).
    finite = np.isfinite(m) & np.isfinite(o)
    pm, po = direction * m[finite], oracle_direction * o[finite]
    result: dict[str, Any] = {
        "n_models": n,
        "n_metric_nan": int(np.isnan(m).sum()),
        "kendall_tau": quiet_statistic(stats.kendalltau, sm, so),
        "spearman": quiet_statistic(stats.spearmanr, sm, so),
        "pearson": quiet_statistic(stats.pearsonr, pm, po) if finite.sum() >= 2 else float("nan"),
    }
    regret, picked, best = top1_regret(m, o, direction, oracle_direction)
    result.update(top1_regret=regret, top1_oracle=picked, oracle_best=best,
                  topk_recall=topk_recall(m, o, top_k, direction, oracle_direction),
                  top_k=min(int(top_k), n))
    alpha = (1 - confidence) / 2
    for name in ("kendall", "spearman", "pearson"):
        result[f"{name}_ci_low"] = result[f"{name}_ci_high"] = float("nan")
    if bootstrap > 0:
        idx = bootstrap_indices(n, bootstrap, seed)
        xb, yb = sm[idx], so[idx]
        samples = {
            "kendall": kendall_tau_b_rows(xb, yb),
            "spearman": _pearson_rows(stats.rankdata(xb, axis=1), stats.rankdata(yb, axis=1)),
        }
        # Pearson on the raw (oriented) values; a resample drops the models without finite values.
        xp = np.where(finite, direction * m, np.nan)[idx]
        yp = np.where(finite, oracle_direction * o, np.nan)[idx]
        ok = ~np.isnan(xp)
        xp_c = np.where(ok, xp, 0.0)
        yp_c = np.where(ok, yp, 0.0)
        cnt = ok.sum(axis=1)
        with np.errstate(invalid="ignore", divide="ignore"):
            mx = xp_c.sum(axis=1) / cnt
            my = yp_c.sum(axis=1) / cnt
            dx = np.where(ok, xp_c - mx[:, None], 0.0)
            dy = np.where(ok, yp_c - my[:, None], 0.0)
            den = np.sqrt((dx * dx).sum(axis=1) * (dy * dy).sum(axis=1))
            samples["pearson"] = np.clip(np.where(den > 0, (dx * dy).sum(axis=1) / den, np.nan),
                                         -1.0, 1.0)
        for name, values in samples.items():
            values = values[~np.isnan(values)]
            if len(values):
                low, high = np.quantile(values, [alpha, 1 - alpha])
                result[f"{name}_ci_low"], result[f"{name}_ci_high"] = float(low), float(high)
    return result


