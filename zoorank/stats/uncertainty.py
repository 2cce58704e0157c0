"""Rank uncertainty: disjoint folds of the evaluation images → resampled values → rank intervals.

Pure functions (no I/O, no Ray). The SCORE stage computes every ranked metric once more on each of
``F`` disjoint folds of the images (:func:`fold_assignment`); the RANK stage turns the fold values
into bootstrap replicates (:func:`fold_bootstrap`), ranks each replicate and summarises the ranks
(:func:`rank_uncertainty`).

Conventions
-----------
* **Folds.** The images a model was scored on are ordered by a seeded hash of their ``sample_id``
  (independent of row order, so every model gets the same folds); the first ``fraction · n`` of
  them are dealt round-robin into ``F`` folds of ``m ≈ fraction · n / F`` images. Folds are
  *paired* across models: fold ``k`` holds the same images for every model.
* **Fold bootstrap** (a block bootstrap whose blocks are the folds). Replicate ``b`` draws ``F``
  folds with replacement (the same draw for every model of a dataset, keeping the pairing) and
  moves each model's full-sample value by the resampled fold mean's deviation from the all-fold
  mean::

      v_b = v_full + s · (mean_{k ∈ draw_b} v_k − mean_k v_k),
      s = sqrt(fraction · F / (F − 1)) · t_{F−1}(0.99) / z(0.99)

  For a √n-consistent estimator a fold of m images has variance σ²/m and the bootstrap mean of F
  of them σ²/(mF) · (F − 1)/F, so the first factor scales the spread to the full sample's σ²/n
  (the (F − 1)/F is the plug-in bootstrap's bias). The second is a **small-sample correction**
  (:func:`small_sample_factor`, 1.29 at the default 8 folds): the spread is estimated from F
  fold values, i.e. with F − 1 degrees of freedom, so the studentised statistics of the top set
  follow a Student t, not the normal the bootstrap's own spread implies. Without it the 95% top
  set covered 8 tied models in 0.857 of 300 simulations, 4 tied in 0.893; the quantile 0.99 is
  the one the calibration harness (``benchmarks/science/calibration.py``, issue 30) found to reach 0.95
  with 8 tied models at the defaults (0.975 reached 0.92). It widens the rank intervals and
  flattens p_best alike. Measured coverage at the defaults: :data:`MEASURED_COVERAGE`.
  Replicates stay centred on the value that orders the leaderboard, so a metric's small-sample
  bias (ID and RankMe grow with n) moves no rank.
* **Ranks** of a replicate: 1 = best; values are compared at :data:`SIGNIFICANT_DIGITS`
  significant digits (:func:`snap`), so a checkpoint and its rotated copy tie; models without a
  value are left out (NaN).
* **Interval**: from the ``(1 − c)/2`` quantile of a model's replicate ranks with ties at the best
  place they span to the ``(1 + c)/2`` quantile with ties at the worst (``c`` = confidence; lower
  and higher order statistics), so tied models share the places they span: two identical leaders
  both get 1–2.
* **p_best**: share of replicates in which the model ranks 1; a tie for first splits that
  replicate's unit equally among the tied models, so p_best sums to 1 over the ranked models and
  tied models (a seed ensemble with one ensemble-level value) share it.
* **Top set**: the rank-consistent Model Confidence Set, :mod:`zoorank.stats.confidence_set`
  (:func:`top_set`, re-exported here).
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import Any

import numpy as np

from zoorank.stats.confidence_set import (
    TOP_SET_GUARANTEE,
    _point_and_replicates,
    model_confidence_set,
    top_set,
)

__all__ = [
    "fold_assignment",
    "fold_scale",
    "small_sample_factor",
    "SMALL_SAMPLE_QUANTILE",
    "MEASURED_COVERAGE",
    "MEASURED_P_BEST_ECE",
    "MEASURED_SETTINGS",
    "p_best_claim",
    "measured_coverage",
    "fold_means",
    "fold_bootstrap",
    "replicate_ranks",
    "snap",
    "RankUncertainty",
    "rank_uncertainty",
    "split_p_best",
    "model_confidence_set",
    "top_set",
    "TOP_SET_GUARANTEE",
]

_GOLDEN = 0x9E3779B97F4A7C15
_SALT = 0x5851F42D4C957F2D  # keeps the fold order apart from score's max_samples subset


def _hash_ids(sample_ids: np.ndarray, seed: int) -> np.ndarray:
    """splitmix64 of (sample_id, seed, salt): a seeded key per id, independent of row order."""
    z = np.asarray(sample_ids, dtype=np.int64).astype(np.uint64)
    z = z + np.uint64((_GOLDEN * (int(seed) + 1) + _SALT) % (1 << 64))
    z = (z ^ (z >> np.uint64(30))) * np.uint64(0xBF58476D1CE4E5B9)
    z = (z ^ (z >> np.uint64(27))) * np.uint64(0x94D049BB133111EB)
    return z ^ (z >> np.uint64(31))


def fold_assignment(sample_ids: Any, n_folds: int, fraction: float = 1.0, seed: int = 0) -> np.ndarray:
    """Fold index (0..F−1) of each sample, −1 for samples left out (see the module conventions).

    Parameters
    ----------
    sample_ids : (n,) int ids.
    n_folds : F ≥ 2.
    fraction : share of the samples dealt into folds, in (0, 1].
    seed : run seed.

    Returns
    -------
    ndarray (n,) int64, aligned with ``sample_ids``.
    """
    ids = np.asarray(sample_ids, dtype=np.int64)
    if ids.ndim != 1:
        raise ValueError(f"sample_ids must be 1-D, got shape {ids.shape}")
    if n_folds < 2:
        raise ValueError(f"n_folds must be >= 2, got {n_folds}")
    if not 0 < fraction <= 1:
        raise ValueError(f"fraction must be in (0, 1], got {fraction}")
    order = np.argsort(_hash_ids(ids, seed), kind="stable")
    used = order[: int(round(fraction * ids.shape[0]))]
    out = np.full(ids.shape[0], -1, dtype=np.int64)
    out[used] = np.arange(used.shape[0]) % n_folds
    return out


def fold_means(values: Any, folds: Any, n_folds: int) -> np.ndarray:
    """(F,) mean of per-sample ``values`` on each fold (:func:`fold_assignment`'s output; −1 is
    left out); NaN for an empty fold. The fold values of a per-sample score such as an oracle's
    correctness. Cost O(n)."""
    v = np.asarray(values, dtype=np.float64)
    f = np.asarray(folds, dtype=np.int64)
    if v.shape != f.shape or v.ndim != 1:
        raise ValueError(f"values and folds must be 1-D of one length, got {v.shape}, {f.shape}")
    used = f >= 0
    sums = np.bincount(f[used], weights=v[used], minlength=n_folds)[:n_folds]
    counts = np.bincount(f[used], minlength=n_folds)[:n_folds]
    with np.errstate(invalid="ignore", divide="ignore"):
        return np.where(counts > 0, sums / np.maximum(counts, 1), np.nan)


#: the one-sided quantile of the small-sample correction of :func:`fold_scale`: the Student-t
#: widening t_{F−1}(q) / z(q). Chosen by ``benchmarks/science/calibration.py`` (issue 30): at the default
#: 8 folds, q = 0.975 (factor 1.21) covered 8 tied models in 0.92 of 200 simulations, q = 0.99
#: (1.29) in 0.95.
SMALL_SAMPLE_QUANTILE = 0.99


def small_sample_factor(n_folds: int, quantile: float = SMALL_SAMPLE_QUANTILE) -> float:
    """``t_{F−1}(q) / z(q)``: how much wider a Student-t quantile with the F − 1 degrees of
    freedom of a spread estimated from F folds is than the normal one (1.29 at F = 8, q = 0.99;
    → 1 as F grows)."""
    from scipy import stats

    if n_folds < 2:
        raise ValueError(f"n_folds must be >= 2, got {n_folds}")
    return float(stats.t.ppf(quantile, n_folds - 1) / stats.norm.ppf(quantile))


def fold_scale(n_folds: int, fraction: float, small_sample: bool = True) -> float:
    """``s = sqrt(fraction · F / (F − 1))``, the factor that scales the fold bootstrap's spread to
    the full sample, times :func:`small_sample_factor` (``small_sample=True``, the product's
    setting; module conventions)."""
    base = float(np.sqrt(fraction * n_folds / (n_folds - 1)))
    return base * small_sample_factor(n_folds) if small_sample else base


def fold_bootstrap(
    point: Any, folds: Any, n_resamples: int = 1000, seed: int = 0, scale: float = 1.0
) -> np.ndarray:
    """Bootstrap replicates of every model's value from its paired fold values.

    Parameters
    ----------
    point : (m,) full-sample values (NaN: the model has no value; its replicates are NaN).
    folds : (m, F) fold values, fold k the same images for every model; NaN entries are skipped
        (a model whose every fold is NaN keeps its point value in every replicate: no spread).
    n_resamples : B.
    seed : the draws are seeded; the same draw applies to every model.
    scale : :func:`fold_scale`.

    Returns
    -------
    ndarray (B, m): ``point + scale · (resampled fold mean − all-fold mean)``.

    Cost O(m · B · F) time and O(m · B) memory for m models (one row per model: no model pair).
    """
    point = np.asarray(point, dtype=np.float64)
    folds = np.asarray(folds, dtype=np.float64)
    if point.ndim != 1 or folds.ndim != 2 or folds.shape[0] != point.shape[0]:
        raise ValueError(f"point must be (m,) and folds (m, F); got {point.shape}, {folds.shape}")
    m, n_folds = folds.shape
    if n_resamples < 1:
        raise ValueError(f"n_resamples must be >= 1, got {n_resamples}")
    rng = np.random.default_rng(seed)
    draws = rng.integers(0, n_folds, size=(n_resamples, n_folds))
    out = np.repeat(point[None, :], n_resamples, axis=0)
    if n_folds == 0 or m == 0:
        return out
    finite = np.isfinite(folds)
    filled = np.where(finite, folds, 0.0)
    # how often each fold is drawn in each replicate: the sums are then (m, F) @ (F, B), O(m · B)
    # memory (indexing filled[:, draws] would hold m · B · F values)
    times = np.zeros((n_resamples, n_folds))
    np.add.at(times, (np.arange(n_resamples)[:, None], draws), 1.0)
    sums = filled @ times.T  # (m, B)
    counts = finite.astype(np.float64) @ times.T
    with np.errstate(invalid="ignore", divide="ignore"):
        resampled = sums / counts
        centre = filled.sum(axis=1) / finite.sum(axis=1)
    dev = (resampled - centre[:, None]).T  # (B, m)
    dev = np.where(np.isfinite(dev), dev, 0.0)
    return out + scale * dev


#: significant digits kept before values are compared: metrics of float32 embeddings that agree
#: to this precision (a checkpoint and its rotated copy) are ties, not an order.
SIGNIFICANT_DIGITS = 6


def snap(values: Any, digits: int = SIGNIFICANT_DIGITS) -> np.ndarray:
    """Each row of (B, m) values rounded to ``digits`` significant digits of its largest magnitude."""
    v = np.asarray(values, dtype=np.float64)
    with np.errstate(all="ignore"):
        top = np.nanmax(np.where(np.isfinite(v), np.abs(v), np.nan), axis=-1, keepdims=True)
        exponent = np.floor(np.log10(np.where(top > 0, top, 1.0)))
        scale = 10.0 ** (exponent - digits + 1)
        return np.where(np.isfinite(v), np.round(v / scale) * scale, v)


def replicate_ranks(values: Any, method: str = "min") -> np.ndarray:
    """Ranks (1 = best) of each row of (B, m) oriented values (higher is better); ties share the
    best (``method="min"``) or the worst (``"max"``) place they span; NaN values get NaN ranks
    and take no place. O(B · m log m)."""
    # imported here: the score workers import this module for fold_assignment alone, and
    # scipy.stats costs them ~1 s of CPU to import
    from scipy import stats

    v = np.asarray(values, dtype=np.float64)
    if v.ndim != 2:
        raise ValueError(f"values must be (B, m), got shape {v.shape}")
    ranks = np.full(v.shape, np.nan)
    finite = np.isfinite(v)
    if not finite.any():
        return ranks
    # rankdata over rows; NaNs are masked to +inf (last) and their ranks discarded after
    masked = np.where(finite, -v, np.inf)
    r = stats.rankdata(masked, method=method, axis=1)
    ranks[finite] = r[finite]
    return ranks


#: top-set coverage measured at the defaults (8 folds of half the images, 1000 replicates,
#: confidence 0.95, the small-sample correction) by ``benchmarks/science/calibration.py`` (issue 30):
#: setting → (share of simulations whose top set held every truly-best model, its Monte-Carlo
#: error, simulations); every setting is ≥ 0.95 − 2 · its error, the lowest (8 tied models) is
#: 0.94. Without the correction: 0.857 (8 tied) and 0.893 (4 tied) on the same simulations.
#: The report states the level measured from this table (:func:`measured_coverage`).
MEASURED_COVERAGE: dict[str, tuple[float, float, int]] = {
    "unique best (1 pp ahead)": (1.0, 0.0, 300),
    "2 tied best": (1.0, 0.0, 300),
    "4 tied best": (0.987, 0.0066, 300),
    "8 tied": (0.94, 0.0137, 300),
    "clear winner (5 pp ahead)": (1.0, 0.0, 300),
    "graded (1 pp steps)": (1.0, 0.0, 300),
}


#: the settings :data:`MEASURED_COVERAGE` was measured at (the config's defaults): the run's
#: confidence, ``score.resample_folds`` and ``score.resample_fraction``.
MEASURED_SETTINGS: dict[str, float] = {"confidence": 0.95, "folds": 8, "fold_fraction": 0.5}


#: calibration of the label-free p_best at the same defaults, measured by the same harness run:
#: setting → expected calibration error of the leader's p_best (its p_best against the share of
#: "best" it truly holds: 1/k among k models within 0.5 pp of the best), 300 simulations each.
#: Between tied models the replicates, centred on the observed values, still name a leader with
#: p_best 0.3–0.6 where each holds 1/k: the report states this beside p_best
#: (:func:`p_best_claim`).
MEASURED_P_BEST_ECE: dict[str, float] = {
    "unique best (1 pp ahead)": 0.150,
    "2 tied best": 0.194,
    "4 tied best": 0.296,
    "8 tied": 0.294,
    "clear winner (5 pp ahead)": 0.001,
    "graded (1 pp steps)": 0.092,
}


def p_best_claim() -> str:
    """The sentence the report prints beside the label-free p_best: what it means and the worst
    calibration error :data:`MEASURED_P_BEST_ECE` holds."""
    worst = max(MEASURED_P_BEST_ECE, key=MEASURED_P_BEST_ECE.get)
    return ("p(best) is the share of resamples of the images in which a model ranks first on "
            "the board's metric. It is not a calibrated probability where models tie: on "
            "simulated zoos with known truth (benchmarks/science/calibration.py) the leader's p(best) "
            f"was off from its true share by {MEASURED_P_BEST_ECE[worst]:.2f} on average "
            f"({worst}), {MEASURED_P_BEST_ECE['clear winner (5 pp ahead)']:.2f} with a clear "
            "winner. Read it as a ranking of plausibility.")


def measured_coverage() -> float:
    """The lowest top-set coverage :data:`MEASURED_COVERAGE` holds (the level to state)."""
    return min(c for c, _, _ in MEASURED_COVERAGE.values())


def split_p_best(best_ranks: Any) -> np.ndarray:
    """p_best from (B, m) replicate ranks with ties at the best place (``method="min"``): each
    replicate gives 1 to its rank-1 models, split equally among them; NaN ranks get 0 and a model
    never ranked is NaN. Sums to 1 over the models when every replicate ranks one. Cost O(B · m)."""
    r = np.asarray(best_ranks, dtype=np.float64)
    first = r == 1
    n_first = first.sum(axis=1, keepdims=True)
    with np.errstate(invalid="ignore", divide="ignore"):
        share = np.where(first, 1.0 / np.maximum(n_first, 1), 0.0)
    out = share.mean(axis=0)
    return np.where(np.isfinite(r).any(axis=0), out, np.nan)


@dataclass(frozen=True)
class RankUncertainty:
    """Per model: ``rank_low``, ``rank_high`` (interval), ``p_best``, ``share_vs_best`` (share of
    replicates at least as good as the point-best model: a diagnostic, no longer the top-set rule)
    and ``in_top_set``; NaN / False for models without a value."""

    rank_low: np.ndarray
    rank_high: np.ndarray
    p_best: np.ndarray
    share_vs_best: np.ndarray
    in_top_set: np.ndarray


def rank_uncertainty(
    point: Any, replicates: Any, confidence: float = 0.95, blocked: Any = None
) -> RankUncertainty:
    """Rank intervals, p_best and the top set from oriented values (higher is better).

    Parameters
    ----------
    point : (m,) oriented full-sample values (NaN: no value, no rank).
    replicates : (B, m) oriented replicate values (:func:`fold_bootstrap` then orientation).
    confidence : c in (0, 1); the interval covers c of the replicate ranks and the top set is the
        MCS at level 1 − c (:func:`top_set`).
    blocked : (m,) bool, models that may not enter the top set (blocking health flags); they
        still get an interval and p_best.

    Cost: O(B · m log m) for the ranks plus :func:`top_set`; memory O(B · m).
    """
    point, reps = _point_and_replicates(point, replicates, "confidence", confidence)
    m = point.shape[0]
    blocked = np.zeros(m, dtype=bool) if blocked is None else np.asarray(blocked, dtype=bool)
    has = np.isfinite(point)
    reps = snap(np.where(has[None, :], reps, np.nan))
    point = snap(np.where(has, point, np.nan)[None, :])[0]
    nan = np.full(m, np.nan)
    if not has.any():
        return RankUncertainty(nan, nan.copy(), nan.copy(), nan.copy(), np.zeros(m, dtype=bool))
    best_ranks, worst_ranks = replicate_ranks(reps, "min"), replicate_ranks(reps, "max")
    alpha = 1.0 - confidence
    low, high, p_best = nan.copy(), nan.copy(), nan.copy()
    cols = np.flatnonzero(has)
    low[cols] = np.nanquantile(best_ranks[:, cols], alpha / 2, axis=0, method="lower")
    high[cols] = np.nanquantile(worst_ranks[:, cols], 1 - alpha / 2, axis=0, method="higher")
    p_best[cols] = split_p_best(best_ranks[:, cols])
    share = nan.copy()
    eligible = has & ~blocked
    if eligible.any():
        top_value = np.max(point[eligible])
        best = np.flatnonzero(eligible & (point == top_value))[0]
        share[cols] = np.mean(reps[:, cols] >= reps[:, [best]], axis=0)
    return RankUncertainty(low, high, p_best, share, top_set(point, reps, confidence, blocked))
