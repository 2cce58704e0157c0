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
    "bootstrap_batch",
    "kendall_tau_b_rows",
    "paired_bootstrap",
    "percentile_interval",
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


#: bytes the bootstrap's per-batch arrays may take (resampled indices and values, ranks):
#: ``scipy.stats.bootstrap`` draws and evaluates ``batch`` replicates at a time, so the memory of
#: a bootstrap is O(batch · n) whatever the number of resamples (:func:`bootstrap_batch`).
BOOTSTRAP_MEMORY = 64 << 20
#: float64 arrays of length n one replicate holds while the statistics run (indices, 4 resampled
#: vectors, 2 rank vectors, Pearson's centred copies and masks, with slack).
_ARRAYS_PER_REPLICATE = 16


def bootstrap_indices(n: int, n_resamples: int, seed: int = 0) -> np.ndarray:
    """(n_resamples, n) int64 indices of models drawn with replacement (``numpy`` PCG64, ``seed``).

    The same draws as ``scipy.stats.bootstrap(..., rng=numpy.random.default_rng(seed))`` makes
    for a sample of n, in any batch size (a reference for tests and the budget curve).
    """
    rng = np.random.default_rng(seed)
    return rng.integers(0, n, size=(n_resamples, n), dtype=np.int64)


def bootstrap_batch(cells: int, memory: int = BOOTSTRAP_MEMORY) -> int:
    """Replicates per batch so that a batch fits in ``memory`` bytes, for replicates of ``cells``
    values each (n models, times the rows of a stacked sample)."""
    return max(1, int(memory) // (8 * max(int(cells), 1) * _ARRAYS_PER_REPLICATE))


def kendall_tau_b_rows(x: np.ndarray, y: np.ndarray) -> np.ndarray:
    """Kendall τ-b of each row pair of ``x`` and ``y`` (B, n), NaN where undefined.

    ``scipy.stats.kendalltau`` (variant "b") row by row: O(n log n) time and O(n) extra memory
    per row (Knight's merge-sort algorithm), so O(B · n log n) for B rows; about 0.2 ms per row
    of 1,000 models. A row with a NaN, or constant on one side, gives NaN.
    """
    x, y = np.atleast_2d(np.asarray(x, np.float64)), np.atleast_2d(np.asarray(y, np.float64))
    if x.shape != y.shape:
        raise ValueError(f"x and y differ in shape: {x.shape} vs {y.shape}")
    if x.shape[-1] < 2:
        return np.full(x.shape[:-1], np.nan)
    with warnings.catch_warnings():
        warnings.simplefilter("ignore")
        return np.asarray(stats.kendalltau(x, y, axis=-1).statistic, dtype=np.float64)


def _pearson_rows(x: np.ndarray, y: np.ndarray) -> np.ndarray:
    """Pearson r of each row pair over the entries finite in ``x`` (NaN marks a dropped model)."""
    ok = ~np.isnan(x)
    cnt = ok.sum(axis=-1, keepdims=True)
    xc, yc = np.where(ok, x, 0.0), np.where(ok, y, 0.0)
    with np.errstate(invalid="ignore", divide="ignore"):
        dx = np.where(ok, xc - xc.sum(axis=-1, keepdims=True) / cnt, 0.0)
        dy = np.where(ok, yc - yc.sum(axis=-1, keepdims=True) / cnt, 0.0)
        den = np.sqrt((dx * dx).sum(axis=-1) * (dy * dy).sum(axis=-1))
        r = np.where(den > 0, (dx * dy).sum(axis=-1) / den, np.nan)
    return np.clip(r, -1.0, 1.0)


def _correlations(sm: np.ndarray, so: np.ndarray, pm: np.ndarray, po: np.ndarray,
                  axis: int = -1) -> np.ndarray:
    """(3, ...) Kendall τ-b and Spearman ρ of the rank scores, Pearson r of the raw values: the
    vectorised paired statistic of :func:`agreement`'s bootstrap (rows = replicates)."""
    spearman = _pearson_rows(stats.rankdata(sm, axis=axis), stats.rankdata(so, axis=axis))
    return np.stack([kendall_tau_b_rows(sm, so), spearman, _pearson_rows(pm, po)])


def percentile_interval(distribution: np.ndarray, confidence: float) -> np.ndarray:
    """(..., 2) two-sided percentile interval of each row of replicates, over the replicates where
    the statistic is defined (a resample of tied models has no τ); NaN when none is."""
    alpha = (1 - confidence) / 2
    d = np.atleast_2d(np.asarray(distribution, np.float64))
    out = np.full((d.shape[0], 2), np.nan)
    for i, row in enumerate(d):
        row = row[~np.isnan(row)]
        if len(row):
            out[i] = np.quantile(row, [alpha, 1 - alpha])
    return out


def paired_bootstrap(data: tuple[np.ndarray, ...], statistic: Any, n_resamples: int,
                     seed: int, memory: int = BOOTSTRAP_MEMORY) -> np.ndarray:
    """The bootstrap distribution (..., B) of a vectorised paired statistic of the models.

    ``scipy.stats.bootstrap`` (``paired=True``: the models are resampled with replacement, the
    same draw for every array of ``data``; seeded with ``numpy.random.default_rng(seed)``, so the
    draws are :func:`bootstrap_indices`, in any batch size), in batches of
    :func:`bootstrap_batch` replicates: memory O(batch · n) under ``memory``, time B × the
    statistic's cost (O(B · n log n) for Kendall's τ). Arrays of ``data`` may stack rows before
    their model axis (the last); the statistic receives (..., batch, n) arrays. scipy's own
    percentile interval is not used: it is NaN as soon as one replicate is (a resample of tied
    models has no τ; with 3 models one in 9 resamples), where :func:`percentile_interval` drops
    those replicates, as the intervals always have.
    """
    cells = max(np.asarray(d).size for d in data)
    with warnings.catch_warnings():
        warnings.simplefilter("ignore")  # the NaN-interval warning; see the docstring
        res = stats.bootstrap(data, statistic, n_resamples=n_resamples, paired=True,
                              vectorized=True, axis=-1, method="percentile",
                              batch=bootstrap_batch(cells, memory), rng=np.random.default_rng(seed))
    return np.asarray(res.bootstrap_distribution, dtype=np.float64)


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
    for name in ("kendall", "spearman", "pearson"):
        result[f"{name}_ci_low"] = result[f"{name}_ci_high"] = float("nan")
    if bootstrap > 0:
        # Pearson on the raw (oriented) values; a resample drops the models without finite values
        pm_all = np.where(finite, direction * m, np.nan)
        po_all = np.where(finite, oracle_direction * o, np.nan)
        dist = paired_bootstrap((sm, so, pm_all, po_all), _correlations, bootstrap, seed)
        for name, (low, high) in zip(("kendall", "spearman", "pearson"),
                                     percentile_interval(dist, confidence)):
            result[f"{name}_ci_low"], result[f"{name}_ci_high"] = float(low), float(high)
    return result


