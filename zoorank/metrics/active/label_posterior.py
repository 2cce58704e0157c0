"""p(best | labels): the posterior probability that a model is the most accurate on a pool, given
its per-sample correctness on the labelled samples of that pool.

Pure functions on arrays (no I/O, no Ray). The correctness comes from the models themselves: on an
embedding zoo, the few-label kNN of each model's embedding (:mod:`zoorank.metrics.active.knn_committee`); on a
classifier zoo, each head's top-1 on the labelled images
(:mod:`zoorank.labels.head_predictions`, where CODA chooses the images and this posterior makes
the pick). :mod:`zoorank.labels.stopping` stops when the leader's p(best | labels) clears its
target.

Conventions: ``correct`` is (L × M) 0/1, one row per labelled sample, one column per model; a
model's accuracy is its mean correctness on the whole pool (``population`` samples); models
within :data:`TIE_TOLERANCE` (0.5 pp) of the best share "best". Calibrated against simulations and
resampled real zoos by ``benchmarks/science/calibration.py`` (issue 30).
"""

from __future__ import annotations

from collections.abc import Sequence

import numpy as np

from zoorank.metrics._checks import check_array

__all__ = [
    "PRIOR_SAMPLES",
    "SPREAD_GRID",
    "STOP_WIDENING",
    "TIE_TOLERANCE",
    "labelled_p_best",
    "labelled_p_best_widened",
    "pick_change_probability",
    "probability_mass_set",
    "tie_shares",
]


#: pseudo-samples of independent correctness in the covariance of :func:`labelled_p_best`: 2
#: let a model right on 20 of 20 labels look certain and stop on it (``benchmarks/science/calibration.py``:
#: 4 tied best models, 5 of 11 stops wrong); with 8, 1 of 2.
PRIOR_SAMPLES = 8
#: accuracies within this of the best (0.5 pp) count as tied for best: they share p(best), and a
#: pick within it of the best is a right pick (:mod:`zoorank.labels.stopping`).
TIE_TOLERANCE = 0.005
#: the stopping rule's widening of the posterior covariance (:func:`labelled_p_best`
#: ``widen``). The rule looks after every round (~25 looks up to 500 labels), and at near-tied
#: models a chance lead of 2–3 standard errors at one of them cleared 0.9 with the calibrated
#: posterior. Chosen on tuning draws (seed 1001, 200 runs of six simulated settings and the UvA
#: classifiers; ``benchmarks/science/stop_tuning.py``, ``benchmarks/results/stop_tuning.md``) as
#: the smallest of 1, 1.5, 2, 2.5, 3 with every stop right and no stop on the near-tied settings:
#: unwidened, 6 of 11 stops right with 2 tied best and 9 of 11 with 4; at 2.5 a clear winner 5 pp
#: ahead still stops in 115 of 200 runs. Its record (``benchmarks/results/calibration.md``, seed
#: 0): right in all 127 of its stops in 2,000 runs of ten zoos, but 117 of them are the clear
#: winner's; the other nine zoos fired 10 times in 1,800 runs (the three held-out embedding zoos
#: 4 in 600). On zoos nothing was tuned on (``benchmarks/results/stop_heldout.md``, one
#: pre-registered look): right in 82 of 85 stops (0.96, Wilson [0.90, 0.99]) in 750 runs of 15
#: held-out shift domains of 31 classifiers; 6 stops in 500 runs of five new simulated settings
#: (too few to judge). Where models are within a point or two, the label budget, not the rule,
#: ends the labelling. The printed p(best) stays the calibrated one.
STOP_WIDENING = 2.5


#: the grid of prior spreads σ_b (accuracy) the posterior mixes over (:func:`labelled_p_best`):
#: 0 (every model equal) and 24 log-spaced values from 0.25 pp to 30 pp, equally likely a priori
#: (a log-uniform prior on σ_b: a zoo of near-ties is as plausible as one of 10 pp gaps). Spreads
#: under half the tie tolerance are "every model tied" for p(best), the σ_b = 0 point; the grid
#: from 0.05 pp gave them a third of the prior and made p(best) under-confident where one model
#: leads (tuning draws, reconstructed by ``benchmarks/science/stop_tuning.py``: the ECE over every
#: (model, run) pair 0.046 → 0.021 on the UvA classifiers, 0.021 → 0.016 with 4 tied best,
#: 0.007 → 0.015 with 8 tied; first written down as 0.055 → 0.039, 0.016 → 0.010 and
#: 0.005 → 0.009).
SPREAD_GRID = np.r_[0.0, np.geomspace(2.5e-3, 0.3, 24)]


def _posteriors(c: np.ndarray, prior_samples: int, population: int | None
                ) -> list[tuple[float, np.ndarray, np.ndarray]]:
    """(weight, mean, covariance) of the posterior of the M models' accuracies on the pool from
    the (L, M) correctness ``c``, one per prior spread of :data:`SPREAD_GRID` (see
    :func:`labelled_p_best`); the weights sum to 1."""
    n, m = c.shape
    mean = c.mean(axis=0)
    pbar = (c.sum() + 1.0) / (n * m + 2.0)
    cov = np.cov(c, rowvar=False, ddof=1).reshape(m, m) if n > 1 else np.zeros((m, m))
    # the prior's pseudo-samples: independent correctness at the zoo's smoothed accuracy, so a
    # pair never seen to disagree is not known to be equal
    cov = ((n - 1) * cov + prior_samples * pbar * (1 - pbar) * np.eye(m)) / max(
        n - 1 + prior_samples, 1)
    fpc = 1.0 if population is None else max(0.0, 1.0 - n / population)
    S = cov * fpc / n
    if not np.any(S):
        return [(1.0, mean, np.zeros((m, m)))]
    centred = mean - mean.mean()
    # contrasts: an orthonormal basis H of the (M − 1)-dim space orthogonal to the common mean;
    # y = H·mean ~ N(0, σ_b² I + H S Hᵀ) is the marginal likelihood of σ_b
    H = np.linalg.svd(np.eye(m) - 1.0 / m)[0][:, : m - 1].T
    y, HSH = H @ centred, H @ S @ H.T
    logs = []
    for sb in SPREAD_GRID:
        w, V = np.linalg.eigh(sb * sb * np.eye(m - 1) + HSH)
        w = np.clip(w, 1e-18, None)
        logs.append(-0.5 * (np.sum(np.log(w)) + np.sum((V.T @ y) ** 2 / w)))
    logs = np.asarray(logs)
    weights = np.exp(logs - logs.max())
    weights /= weights.sum()
    out = []
    for weight, sb in zip(weights, SPREAD_GRID, strict=True):
        if weight < 1e-4:
            continue
        if sb == 0:
            out.append((float(weight), np.full(m, mean.mean()), np.zeros((m, m))))
            continue
        gain = sb * sb * np.linalg.solve(sb * sb * np.eye(m) + S, np.eye(m))  # σ_b²(σ_b² I + S)⁻¹
        post = gain @ S
        out.append((float(weight), mean.mean() + gain @ centred, 0.5 * (post + post.T)))
    return out


def tie_shares(values: np.ndarray, tolerance: float = TIE_TOLERANCE) -> np.ndarray:
    """(B, M) share of "best" of each row of (B, M) values: the models within ``tolerance`` of
    the row's max share 1 equally (the rest 0)."""
    v = np.asarray(values, dtype=np.float64)
    best = v >= v.max(axis=1, keepdims=True) - tolerance - 1e-12
    return best / best.sum(axis=1, keepdims=True)


def labelled_p_best(correct, resamples: int = 2000, seed: int = 0,
                    prior_samples: int = PRIOR_SAMPLES, population: int | None = None,
                    tolerance: float = TIE_TOLERANCE, widen: float = 1.0) -> np.ndarray:
    """P(model m is the most accurate on the pool, ties within ``tolerance`` shared) given its
    per-sample correctness ``correct`` (L × M, 0/1) on L labelled samples of a pool of
    ``population`` (None: an unbounded pool).

    A Gaussian posterior of the *paired* accuracies under a hierarchical prior, chosen by the
    calibration harness (``benchmarks/science/calibration.py``, issue 30):

    * the sampling covariance S of the M accuracies is the covariance of the per-sample
      correctness rows over the L labelled samples (so two models right and wrong on the same
      images differ little, however uncertain each accuracy is), pooled with ``prior_samples``
      pseudo-samples of independent correctness at the zoo's smoothed accuracy (a model right on
      20 of 20 labels is not known to be perfect), divided by L and by the finite-pool
      correction 1 − L/N;
    * the prior spreads the models' accuracies about their common mean with a standard deviation
      σ_b, log-uniform over :data:`SPREAD_GRID` (0 and 0.25–30 pp); each σ_b is weighted by the
      marginal likelihood of the M − 1 centred contrasts, N(0, σ_b² I + H S Hᵀ), and gives the
      conjugate normal posterior (mean shrunk by σ_b² (σ_b² I + S)⁻¹). A zoo whose observed
      spread is noise reads as near-ties instead of naming a winner. Measured by its leader,
      per zoo (``benchmarks/results/calibration.md``, ``stop_heldout.md``): a lower Brier score
      than a uniform p = 1/M on 7 of 10 zoos (not on 8 exactly tied models, nor on the held-out
      digits and cifar10 zoos) and on all 20 held-out zoos of ``stop_heldout.md``; the
      leader's calibration error 0.04–0.18. Its known weaknesses: where several models are
      within 0.5 pp of the best it is over-confident (leaders printed at ≥ 0.8 held a third of
      "best" on the held-out demo and digits zoos; over-confident at ≥ 0.8 on 10 of the 20
      held-out zoos), and a single far-ahead model is under-trusted at 50–200 labels (the
      normal prior expects the spread of the pack);
    * draws of the mixture (``resamples`` in all); in each, the models within ``tolerance`` of
      the draw's best share it (:func:`tie_shares`).

    ``widen`` > 1 multiplies each posterior covariance (means and weights unchanged): the
    stopping rule's correction for looking after every round (:data:`STOP_WIDENING`); the
    printed p(best) is the calibrated ``widen=1``.

    No sample: every model gets 1/M. All labels of the pool (L = N): the observed accuracies,
    ties within ``tolerance`` shared. Sums to 1. Cost O(M³ + resamples · M²).
    """
    return labelled_p_best_widened(correct, (widen,), resamples, seed, prior_samples, population,
                                   tolerance)[0]


def labelled_p_best_widened(correct, widens: Sequence[float], resamples: int = 2000, seed: int = 0,
                            prior_samples: int = PRIOR_SAMPLES, population: int | None = None,
                            tolerance: float = TIE_TOLERANCE) -> list[np.ndarray]:
    """:func:`labelled_p_best` at each of ``widens``, from one posterior mixture: entry j equals
    ``labelled_p_best(correct, ..., widen=widens[j])`` exactly (each widening draws from its own
    generator seeded ``seed``), at the cost of one mixture (O(M³) per prior spread) instead of
    one per widening."""
    widens = [float(w) for w in widens]
    if not all(w >= 1.0 for w in widens):
        raise ValueError(f"widen must be ≥ 1, got {widens}")
    c = check_array(correct, "correct", min_rows=0, min_cols=1)
    n, m = c.shape
    if population is not None and population < n:
        raise ValueError(f"population ({population}) is smaller than the labelled samples ({n})")
    if n == 0 or m == 1:
        return [np.full(m, 1.0 / m) for _ in widens]
    mixture = _posteriors(c, prior_samples, population)
    out = []
    for widen in widens:
        rng = np.random.default_rng(seed)
        total = np.zeros(m)
        for weight, mean, cov in mixture:
            if not np.any(cov):
                total += weight * tie_shares(mean[None, :], tolerance)[0]
                continue
            w, V = np.linalg.eigh(cov * widen)
            root = V * np.sqrt(np.clip(w, 0.0, None))
            draws = mean + rng.standard_normal((max(16, int(round(resamples * weight))), m)) @ root.T
            total += weight * tie_shares(draws, tolerance).mean(axis=0)
        out.append(total / total.sum())
    return out


def probability_mass_set(p_best, mass: float = 0.95) -> np.ndarray:
    """Positions of the fewest models whose p(best) sums to at least ``mass`` (most probable
    first; ties by position): the top set given the labels."""
    p = np.asarray(p_best, dtype=np.float64)
    order = np.argsort(-p, kind="stable")
    cum = np.cumsum(p[order])
    stop = int(np.searchsorted(cum, mass - 1e-12)) + 1
    return order[:min(stop, len(p))]


def pick_change_probability(correct, batch_correct, leader: int, population: int | None = None,
                            resamples: int = 500, seed: int = 0) -> float:
    """P(labelling a batch changes the pick): the share of S simulated label draws after which
    the argmax of :func:`labelled_p_best` is not ``leader``. ``correct`` (L × M, 0/1): today's
    correctness on the labelled samples; ``batch_correct`` (S × B × M, 0/1): the batch's
    correctness under each draw of its labels (draw s seeded ``seed + 1 + s``). NaN for an empty
    batch or no draw. Cost S × :func:`labelled_p_best`."""
    c = check_array(correct, "correct", min_rows=0, min_cols=1)
    drawn = np.asarray(batch_correct, dtype=np.float64)
    if drawn.ndim != 3 or drawn.shape[2] != c.shape[1]:
        raise ValueError(f"batch_correct must be (draws, batch, {c.shape[1]}), got {drawn.shape}")
    if not drawn.shape[0] or not drawn.shape[1]:
        return float("nan")
    changed = 0
    for s, rows in enumerate(drawn):
        p = labelled_p_best(np.vstack([c, rows]), resamples, seed + 1 + s, population=population)
        changed += int(np.argmax(p) != leader)
    return changed / len(drawn)
