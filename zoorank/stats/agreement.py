"""Agreement of a label-free metric with a label oracle over the models: pure functions.

Conventions (``specs/clid_lidar.md`` A.6, B.5):

* **Ranks** and **directions** are those of :mod:`zoorank.stats.ranks` (1 = best, ties averaged,
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

from zoorank.stats.ranks import check_direction, model_vector, rank_within

__all__ = [
    "top1_regret",
    "topk_recall",
    "bootstrap_indices",
    "bootstrap_batch",
    "kendall_tau_b_rows",
    "ResampledKendall",
    "draw_counts",
    "model_bootstrap",
    "percentile_interval",
    "agreement",
]


def _paired(metric_values: Any, oracle_values: Any) -> tuple[np.ndarray, np.ndarray]:
    m, o = model_vector(metric_values, "metric_values"), model_vector(oracle_values, "oracle_values")
    if m.shape != o.shape:
        raise ValueError(f"metric_values and oracle_values differ in length: {m.shape} vs {o.shape}")
    return m, o


def kendall_tau(x: Any, y: Any) -> float:
    """Kendall's τ-b of two aligned vectors (``scipy.stats.kendalltau``); NaN when either has a
    NaN or ±Inf, has fewer than two values or is constant (τ is undefined there)."""
    a, b = model_vector(x, "x"), model_vector(y, "y")
    if a.shape != b.shape:
        raise ValueError(f"x and y differ in length: {a.shape} vs {b.shape}")
    if len(a) < 2 or not (np.isfinite(a).all() and np.isfinite(b).all()) or np.ptp(a) == 0 \
            or np.ptp(b) == 0:
        return float("nan")
    return float(stats.kendalltau(a, b).statistic)


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
#: float64 arrays of length n one replicate holds while the statistics run (indices, counts, the
#: merge levels' cumulative sums, resampled vectors and ranks, Pearson's centred copies, slack).
_ARRAYS_PER_REPLICATE = 16


def bootstrap_indices(n: int, n_resamples: int, seed: int = 0) -> np.ndarray:
    """(n_resamples, n) int64 indices of models drawn with replacement (``numpy`` PCG64, ``seed``).

    The same draws as ``scipy.stats.bootstrap(..., rng=numpy.random.default_rng(seed))`` makes
    for a sample of n, in any batch size (a reference for tests and the budget curve).
    """
    rng = np.random.default_rng(seed)
    return rng.integers(0, n, size=(n_resamples, n), dtype=np.int64)


def bootstrap_batch(cells: int, memory: int | None = None) -> int:
    """Replicates per batch so that a batch fits in ``memory`` bytes (default
    :data:`BOOTSTRAP_MEMORY`), for replicates of ``cells`` values each (n models, times the rows
    of a stacked sample)."""
    memory = BOOTSTRAP_MEMORY if memory is None else memory
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


class ResampledKendall:
    """Kendall τ-b of bootstrap resamples of fixed pairs (x_i, y_i), from their multiplicities.

    A resample of the n models is given by how often it draws each one (``counts``, (B, n));
    its τ-b is scipy's (Knight's) formula on the resampled pairs::

        τ_b = (P − X − Y + J − 2 D) / sqrt((P − X)(P − Y))

    with P = N(N − 1)/2 pairs of the N drawn models, X, Y, J the pairs tied in x, in y and in
    both (Σ T(T − 1)/2 over the groups of equal values, T the group's drawn count), and D the
    discordant pairs. The models are sorted by (x, y) once; D is counted by the levels of a merge
    sort whose blocks do not depend on the resample, so every level is a few vectorised passes
    over (B, n): O(n log n) to build, O(B · n log n) time and O(B · n) memory per call, whatever
    the resample (no model pair is ever formed). Equals ``scipy.stats.kendalltau`` of each
    resample (``x[idx], y[idx]``). NaN where undefined (a side tied throughout, or a NaN value).

    Why not ``scipy.stats.kendalltau`` per resample (:func:`kendall_tau_b_rows`, the reference
    in the tests): its per-call cost dominates small zoos. Measured with 1,000 resamples on the
    2-core machine (busy): 12 models 0.38 s per agreement row against 0.02 s here, 100 models
    0.45 s against 0.07 s; 1,000 and 2,000 models about the same (0.7–1.4 s). A demo's agreement
    table has about 50 rows.
    """

    def __init__(self, x: Any, y: Any):
        x, y = np.asarray(x, np.float64), np.asarray(y, np.float64)
        if x.ndim != 1 or x.shape != y.shape:
            raise ValueError(f"x and y must be 1-D of one length, got {x.shape} and {y.shape}")
        self.n = n = x.shape[0]
        self.defined = not (np.isnan(x).any() or np.isnan(y).any())
        self.order = order = np.lexsort((y, x))  # by x, ties by y
        xs, ys = x[order], y[order]
        self.x_starts = _run_starts(xs)
        self.xy_starts = _run_starts(xs, ys)
        self.y_order = np.argsort(ys, kind="stable")
        self.y_starts = _run_starts(ys[self.y_order])
        y_rank = np.unique(ys, return_inverse=True)[1].astype(np.int64)
        # per level w (blocks of 2w in (x, y) order): the left halves' positions sorted by y,
        # and for each right position the range of its block's left entries with a larger y
        self.levels = []
        pos, span, w = np.arange(n), n + 1, 1
        while w < n:
            block = pos // (2 * w)
            left = (pos % (2 * w)) < w
            key = block[left] * span + y_rank[left]
            sort = np.argsort(key, kind="stable")
            lpos, key = pos[left][sort], key[sort]
            rpos = pos[~left]
            rb = block[rpos]
            above = np.searchsorted(key, rb * span + y_rank[rpos], side="right")
            end = np.searchsorted(key, (rb + 1) * span, side="left")
            self.levels.append((lpos, rpos, above, end))
            w *= 2

    def __call__(self, counts: np.ndarray) -> np.ndarray:
        """τ-b of each resample: ``counts`` (B, n) draws of each model (in the models' order)."""
        c = np.asarray(counts, np.float64)[:, self.order]
        if not self.defined or self.n < 2:
            return np.full(c.shape[0], np.nan)
        total = c.sum(axis=1)
        pairs = total * (total - 1) / 2
        x_ties, xy_ties = _tied_pairs(c, self.x_starts), _tied_pairs(c, self.xy_starts)
        y_ties = _tied_pairs(c[:, self.y_order], self.y_starts)
        discordant = np.zeros(c.shape[0])
        for lpos, rpos, above, end in self.levels:
            cum = np.zeros((c.shape[0], len(lpos) + 1))
            np.cumsum(c[:, lpos], axis=1, out=cum[:, 1:])
            discordant += (c[:, rpos] * (cum[:, end] - cum[:, above])).sum(axis=1)
        with np.errstate(invalid="ignore", divide="ignore"):
            den = np.sqrt(pairs - x_ties) * np.sqrt(pairs - y_ties)
            tau = (pairs - x_ties - y_ties + xy_ties - 2 * discordant) / den
        return np.clip(np.where(den > 0, tau, np.nan), -1.0, 1.0)


def _run_starts(*sorted_keys: np.ndarray) -> np.ndarray:
    """Start positions of the runs of equal values (of every key at once) in sorted keys."""
    n = sorted_keys[0].shape[0]
    change = np.zeros(n, dtype=bool)
    change[:1] = True
    for k in sorted_keys:
        change[1:] |= k[1:] != k[:-1]
    return np.flatnonzero(change)


def _tied_pairs(c: np.ndarray, starts: np.ndarray) -> np.ndarray:
    """Σ over runs of T(T − 1)/2, T the run's drawn count, per row of ``c``."""
    t = np.add.reduceat(c, starts, axis=1)
    return (t * (t - 1) / 2).sum(axis=1)


def draw_counts(indices: np.ndarray, n: int) -> np.ndarray:
    """(B, n) how often each of n models is drawn in each row of bootstrap ``indices`` (B, n)."""
    i = np.asarray(indices, dtype=np.int64)
    flat = (i + n * np.arange(i.shape[0])[:, None]).ravel()
    return np.bincount(flat, minlength=i.shape[0] * n).reshape(i.shape[0], n)


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


def model_bootstrap(n: int, statistic: Any, n_resamples: int, seed: int, rows: int = 1,
                    memory: int | None = None) -> np.ndarray:
    """The bootstrap distribution (..., B) of a vectorised statistic of resampled models.

    ``scipy.stats.bootstrap`` resamples the model indices 0..n−1 with replacement (as it does for
    ``paired=True``; seeded with ``numpy.random.default_rng(seed)``, so the draws are
    :func:`bootstrap_indices`, in any batch size) and calls ``statistic(indices, axis=-1)`` on
    (batch, n) index arrays, so one draw serves every vector of a model and the statistic may
    work from draw counts (:class:`ResampledKendall`). Batches of :func:`bootstrap_batch`
    replicates (``rows`` vectors of n each) keep memory O(batch · n) under ``memory``; time is
    B × the statistic's cost. scipy's own percentile interval is not used: it is NaN as soon as
    one replicate is (a resample of tied models has no τ; with 3 models one in 9 resamples), where
    :func:`percentile_interval` drops those replicates, as the intervals always have.
    """
    with warnings.catch_warnings():
        warnings.simplefilter("ignore")  # the NaN-interval warning; see the docstring
        res = stats.bootstrap((np.arange(n),), statistic, n_resamples=n_resamples,
                              vectorized=True, axis=-1, method="percentile",
                              batch=bootstrap_batch(n * rows, memory),  # None: the default
                              rng=np.random.default_rng(seed))
    return np.asarray(res.bootstrap_distribution, dtype=np.float64)


def _correlations(sm: np.ndarray, so: np.ndarray, pm: np.ndarray, po: np.ndarray) -> Any:
    """The statistic of :func:`agreement`'s bootstrap: model indices (batch, n) → (3, batch)
    Kendall τ-b and Spearman ρ of the rank scores, Pearson r of the raw values."""
    kendall = ResampledKendall(sm, so)

    def statistic(idx: np.ndarray, axis: int = -1) -> np.ndarray:
        spearman = _pearson_rows(stats.rankdata(sm[idx], axis=-1),
                                 stats.rankdata(so[idx], axis=-1))
        return np.stack([kendall(draw_counts(idx, len(sm))), spearman,
                         _pearson_rows(pm[idx], po[idx])])

    return statistic


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
        dist = model_bootstrap(n, _correlations(sm, so, pm_all, po_all), bootstrap, seed)
        for name, (low, high) in zip(("kendall", "spearman", "pearson"),
                                     percentile_interval(dist, confidence)):
            result[f"{name}_ci_low"], result[f"{name}_ci_high"] = float(low), float(high)
    return result


