"""Ranks, transfer-rank aggregation and metric-vs-oracle agreement: pure functions over models.

Conventions (``specs/clid_lidar.md`` A.6, B.5):

* **Ranks**: 1 = best; ties get the average of the ranks they span (``scipy.stats.rankdata``
  ``method="average"``); a NaN (a metric that failed on degenerate input) ranks after every finite
  value, NaNs tied among themselves.
* **Direction**: +1 when a higher value is better, −1 when lower is better. Every correlation is
  computed between the *oriented* vectors ``direction * metric`` and ``oracle_direction * oracle``,
  so +1 always means "the metric orders the models as the oracle does" (signed Kendall τ-b,
  Spearman ρ, Pearson r from ``scipy.stats``; the specs fix the papers' ``|C − D|`` typo).
* **Joint rank** (CLID §3.5): ``sqrt(r_pred · r_acc)``, the geometric mean of a predictor's rank and
  an in-domain accuracy's rank.
* **Top-1 regret** (LiDAR's "top-ranking model" protocol): oracle value of the best model minus the
  oracle value of the metric's pick, in oracle units, oriented so that it is ≥ 0; when several models
  tie for the metric's top value, the pick is a uniformly random one of them (their mean oracle value).

No I/O, no Ray: the RANK stage (``zoorank.rank``) calls these on per-model vectors.
"""

from __future__ import annotations

import warnings
from collections.abc import Mapping, Sequence
from typing import Any, Literal

import numpy as np
import pandas as pd
from scipy import stats

__all__ = [
    "AGGREGATION_DIRECTIONS",
    "rank_within",
    "aggregate_ranks",
    "joint_rank",
    "top1_regret",
    "topk_recall",
    "bootstrap_indices",
    "kendall_tau_b_rows",
    "agreement",
    "rank_agreement_matrix",
    "kendall_w",
    "rank_disagreement",
]

Aggregation = Literal["rank_product", "mean_rank", "borda"]

#: direction of each aggregate statistic: rank product and mean rank are lower-is-better, a Borda
#: count is higher-is-better.
AGGREGATION_DIRECTIONS: dict[str, int] = {"rank_product": -1, "mean_rank": -1, "borda": +1}


def _vector(x: Any, name: str) -> np.ndarray:
    arr = np.asarray(x, dtype=np.float64)
    if arr.ndim != 1:
        raise ValueError(f"{name} must be 1-D (one value per model), got shape {arr.shape}")
    return arr


def _check_direction(direction: int, name: str = "direction") -> int:
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
    v = _vector(values, "values")
    direction = _check_direction(direction)
    ranks = np.empty_like(v)
    finite = ~np.isnan(v)
    n_finite = int(finite.sum())
    if n_finite:
        ranks[finite] = stats.rankdata(-direction * v[finite], method="average")
    ranks[~finite] = (n_finite + 1 + len(v)) / 2.0
    return ranks


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
    a, b = _vector(rank_pred, "rank_pred"), _vector(rank_acc, "rank_acc")
    if a.shape != b.shape:
        raise ValueError(f"rank_pred and rank_acc differ in length: {a.shape} vs {b.shape}")
    if np.any(a[~np.isnan(a)] < 1) or np.any(b[~np.isnan(b)] < 1):
        raise ValueError("ranks must be >= 1 (1 = best)")
    return np.sqrt(a * b)


def _paired(metric_values: Any, oracle_values: Any) -> tuple[np.ndarray, np.ndarray]:
    m, o = _vector(metric_values, "metric_values"), _vector(oracle_values, "oracle_values")
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
    direction = _check_direction(direction)
    oracle_direction = _check_direction(oracle_direction, "oracle_direction")
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


def _quiet(fn, *args) -> float:
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
    direction = _check_direction(direction)
    oracle_direction = _check_direction(oracle_direction, "oracle_direction")
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
        "kendall_tau": _quiet(stats.kendalltau, sm, so),
        "spearman": _quiet(stats.spearmanr, sm, so),
        "pearson": _quiet(stats.pearsonr, pm, po) if finite.sum() >= 2 else float("nan"),
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
            tau = _quiet(stats.kendalltau, scores[a], scores[b]) if len(values) >= 2 else np.nan
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
