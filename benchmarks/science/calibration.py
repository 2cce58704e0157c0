"""Calibration harness: zoos whose truth is known, run through zoorank's own uncertainty code.

What it measures, per zoo:

* **Top-set coverage**: the share of replications whose 95% top set (the product's path: the
  scoring subset :func:`zoorank.metrics.suite.select_samples`, :func:`~zoorank.stats.uncertainty.
  fold_assignment` → :func:`~zoorank.stats.uncertainty.fold_means` → :func:`~zoorank.stats.
  uncertainty.fold_bootstrap` scaled by :func:`~zoorank.stats.uncertainty.fold_scale` →
  :func:`~zoorank.stats.uncertainty.rank_uncertainty`, at the config defaults: 8 folds of half
  the images, 1000 replicates) holds every truly-best model, with its Monte-Carlo error
  ``sqrt(c (1 − c) / R)`` for R replications.
* **p(best) reliability**: a binned reliability table and the expected calibration error (ECE,
  ten equal-width bins, weighted by count) of the label-free p(best) (the same replicates) and of
  p(best | labels) (:func:`zoorank.metrics.active.label_posterior.labelled_p_best` on the correctness of
  a random
  labelled subset). A prediction is scored against its *outcome*: the models within the tie
  tolerance (:data:`TOL`, 0.5 pp) of the truly best share 1 equally, every other model gets 0;
  this is the event p(best) splits ties by. Two ECEs: over every (model, replication) pair, and
  over the leader only (its p(best) against its outcome: the stricter figure, not diluted by the
  many models at p ≈ 0).
* **The stopping rule** (:data:`zoorank.labels.stopping.TARGET`: stop when the leader's
  p(best | labels), its posterior widened by :data:`zoorank.metrics.active.label_posterior.STOP_WIDENING`
  for the rule's repeated looks, is ≥ 0.9, else at the label budget): labels are revealed in
  random order, ``--round`` at a time, up to ``--max-labels``; *fires* = the rule stopped before
  the budget; *right* = the pick's full-data value is within :data:`TOL` (0.5 pp) of the best
  full-data value. The same runs also stop on the calibrated p(best) itself (the rule before the
  widening) for comparison.

Baselines, on the same replications: the top set without the small-sample correction
(``fold_scale(..., small_sample=False)``) and p(best | labels) by the Bayesian bootstrap zoorank
used before its paired posterior (:func:`bootstrap_p_best`, on the first ``--baseline-reps``). Each ECE comes
with its *floor*, the ECE a perfectly calibrated p(best) would show on the same predictions by
chance (:func:`ece_floor`).

The zoos:

* **simulated**: per-image correctness of 8 models with known accuracies (a shared per-image
  difficulty correlates their errors: correct ⇔ ρ·u_i + √(1−ρ²)·e_im < Φ⁻¹(acc_m), so the
  marginal accuracy is exactly acc_m): 1, 2, 4 and 8 tied best, a clear winner, a graded zoo.
  Truth for the top set: the accuracies (the expected value over images); truth for the labels:
  each model's accuracy on the simulated pool the labels are drawn from.
* **real, resampled**: per-image correctness measured once (cached under ``--cache``), the truth
  is each model's accuracy on all of them; each replication draws the evaluation subset as the
  score stage does (``select_samples(ids, --images, seed)``) for the top set, and a uniformly
  random labelled subset for the labels. ``uva``: the four UvA CIFAR-10 classifiers
  (``benchmarks/zoos/uva_models.py``, argmax of their own heads, ``benchmarks/science/uva_accuracy.py``'s
  loading) on the first ``--uva-images`` CIFAR-10 test images. ``--real`` embedding zoos (demo,
  digits, cifar10: the stores ``benchmarks/science/default_lozo.py`` reads, :data:`EMBEDDING_ZOOS`; their
  clean embeddings cached under ``--cache``): the truth is each model's leave-one-out kNN
  accuracy with every label of the pool, and the labels' correctness is the product's few-label
  kNN among the labelled images (:func:`few_label_correct`), so the few-label kNN's bias against
  the all-label accuracy is part of what is measured.

Prints and writes ``--markdown`` (default ``benchmarks/results/calibration.md``), never asserts::

    PYTHONPATH=. .venv/bin/python benchmarks/science/calibration.py            # the default set
    PYTHONPATH=. .venv/bin/python benchmarks/science/calibration.py --quick    # a minute, smaller
"""

from __future__ import annotations

import argparse
import sys
import time
from dataclasses import dataclass
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parents[1]))  # benchmarks/: the harness
import harness
import numpy as np
from scipy import stats

from zoorank.metrics.active.label_posterior import STOP_WIDENING, labelled_p_best_widened
from zoorank.metrics.suite import select_samples
from zoorank.stats.uncertainty import (
    fold_assignment,
    fold_bootstrap,
    fold_means,
    fold_scale,
    rank_uncertainty,
)

#: tie tolerance (accuracy, 0.5 pp): models within it of the best share "best"; a stop is right
#: when its pick is within it.
TOL = 0.005
#: the stopping rule's threshold (zoorank.labels.stopping.TARGET; imported lazily in main).
BINS = np.linspace(0.0, 1.0, 11)
TITLE = "Calibration of p(best), the stopping rule and the top set"


@dataclass(frozen=True)
class Zoo:
    """A zoo: ``name``, ``kind`` (simulated or real) and how to draw its per-image correctness."""

    name: str
    kind: str
    accuracies: np.ndarray | None = None  # simulated: the known accuracies
    rho: float = 0.7  # simulated: loading of the shared difficulty
    correct: np.ndarray | None = None  # real: (N, M) measured correctness (the truth's terms)
    #: real embedding zoos: one (N, d) unit-row embedding per model and the N class codes; the
    #: labels' correctness is then the few-label kNN's (:func:`few_label_correct`)
    embeddings: tuple[np.ndarray, ...] | None = None
    codes: np.ndarray | None = None

    @property
    def size(self) -> int:
        """Number of models."""
        return len(self.accuracies) if self.correct is None else self.correct.shape[1]

    def labelled_correct(self, c: np.ndarray, order: np.ndarray, looks: list[int],
                         cols: np.ndarray) -> dict[int, np.ndarray]:
        """{n: (n, M) correctness} the labels of pool rows ``order[:n]`` give the product at each
        look n: the rows of ``c`` (a classifier's own head or a simulated zoo), or for an
        embedding zoo each model's leave-one-out few-label kNN among those rows (models in the
        order ``cols``; :func:`few_label_correct`)."""
        if self.embeddings is None:
            return {n: c[order[:n]] for n in looks}
        return few_label_correct([self.embeddings[i] for i in cols], self.codes, order, looks)


def simulated_zoos() -> list[Zoo]:
    """The simulated settings (8 models, accuracies around 0.80; gaps ≥ 1 pp, so the tolerance
    of 0.5 pp separates the tied best from the rest)."""
    rest = np.array([0.79, 0.785, 0.78, 0.775, 0.77, 0.765, 0.76])
    return [
        Zoo("unique best (1 pp ahead)", "simulated", np.r_[0.80, rest]),
        Zoo("2 tied best", "simulated", np.r_[0.80, 0.80, rest[1:] - 0.005]),
        Zoo("4 tied best", "simulated", np.r_[[0.80] * 4, rest[3:] - 0.005]),
        Zoo("8 tied", "simulated", np.full(8, 0.80)),
        Zoo("clear winner (5 pp ahead)", "simulated", np.r_[0.85, rest]),
        Zoo("graded (1 pp steps)", "simulated", 0.80 - 0.01 * np.arange(8)),
    ]


def simulate(z: Zoo, n: int, rng: np.random.Generator) -> np.ndarray:
    """(n, M) 0/1 correctness of a simulated zoo (module docstring); the caller shuffles the
    models."""
    u = rng.standard_normal((n, 1))
    e = rng.standard_normal((n, len(z.accuracies)))
    latent = z.rho * u + np.sqrt(1 - z.rho ** 2) * e
    return (latent < stats.norm.ppf(z.accuracies)[None, :]).astype(np.float64)


def outcome_share(truth: np.ndarray, tol: float = TOL) -> np.ndarray:
    """(M,) outcome of "model m is best": 1/k for the k models within ``tol`` of the max, else 0."""
    best = truth >= truth.max() - tol - 1e-12
    return best / best.sum()


def wilson_free(p: float, r: int) -> float:
    """Monte-Carlo standard error of a share ``p`` over ``r`` replications."""
    return float(np.sqrt(max(p * (1 - p), 1e-12) / max(r, 1)))


# --------------------------------------------------------------------------------------------
# label-free: top-set coverage and p(best)


def label_free_once(values: np.ndarray, seed: int, folds: int, fraction: float, resamples: int,
                    confidence: float, images: int | None, small_sample: bool = True
                    ) -> tuple[np.ndarray, np.ndarray]:
    """(in_top_set, p_best) of one replication by the product's path (module docstring);
    ``small_sample=False``: the fold bootstrap without its small-sample correction (the baseline
    the correction replaced)."""
    ids = np.arange(values.shape[0], dtype=np.int64)
    keep = select_samples(ids, images, seed)
    v, ids = values[keep], ids[keep]
    point = v.mean(axis=0)
    assign = fold_assignment(ids, folds, fraction, seed)
    matrix = np.stack([fold_means(v[:, m], assign, folds) for m in range(v.shape[1])])
    reps = fold_bootstrap(point, matrix, resamples, seed, fold_scale(folds, fraction, small_sample))
    u = rank_uncertainty(point, reps, confidence)
    return u.in_top_set, u.p_best


def label_free(z: Zoo, reps: int, images: int, folds: int, fraction: float, resamples: int,
               confidence: float, seed: int) -> dict:
    """Coverage of the truly best and (p_best, outcome) pairs over ``reps`` replications, and the
    coverage of the uncorrected baseline on the same replications."""
    rng = np.random.default_rng(seed)
    covered, base, pairs = 0, 0, []
    for r in range(reps):
        cols = rng.permutation(z.size)  # model order carries no information
        if z.kind == "simulated":
            values, truth, subset = simulate(z, images, rng)[:, cols], z.accuracies[cols], None
        else:
            values, truth, subset = z.correct[:, cols], z.correct.mean(axis=0)[cols], images
        best = truth == truth.max()
        top, p = label_free_once(values, seed * 100003 + r, folds, fraction, resamples,
                                 confidence, subset)
        covered += int(top[best].all())
        pairs.append((p, outcome_share(truth)))
        top0, _ = label_free_once(values, seed * 100003 + r, folds, fraction, resamples,
                                  confidence, subset, small_sample=False)
        base += int(top0[best].all())
    return {"coverage": covered / reps, "baseline": base / reps, "reps": reps, "pairs": pairs}


# --------------------------------------------------------------------------------------------
# labels: p(best | labels) and the stopping rule


def bootstrap_p_best(correct: np.ndarray, resamples: int, seed: int, prior_samples: int = 2
                     ) -> np.ndarray:
    """The baseline: p(best | labels) as zoorank computed it before the paired posterior (a Bayesian bootstrap
    of the labelled rows plus two fair-coin pseudo-samples per model, exact ties split), copied
    here so the harness measures both on the same draws."""
    n, m = correct.shape
    rng = np.random.default_rng(seed)
    w = rng.dirichlet(np.ones(n + prior_samples), size=resamples)
    acc = w[:, :n] @ correct
    coins = rng.integers(0, 2, size=(resamples, prior_samples, m))
    acc += np.einsum("bp,bpm->bm", w[:, n:], coins)
    best = np.isclose(acc, acc.max(axis=1, keepdims=True), rtol=0, atol=1e-12)
    return (best / best.sum(axis=1, keepdims=True)).mean(axis=0)


def few_label_correct(units: list[np.ndarray], codes: np.ndarray, order: np.ndarray,
                      looks: list[int]) -> dict[int, np.ndarray]:
    """{n: (n, M) 0/1} for each look n: is each model's leave-one-out few-label kNN prediction of
    labelled row ``order[i]`` (from the other rows of ``order[:n]``) its class? ``units``: one
    (N, d) embedding per model with unit rows. The product's
    :func:`zoorank.metrics.active.knn_committee.knn_predictions` restricted to the labelled rows
    (``label_evidence`` scores only those), computed incrementally over the nested prefixes: each
    look merges the newly labelled rows into every row's k nearest (pinned against the product in
    ``tests/benchmarks/test_calibration_harness.py``)."""
    from zoorank.metrics.active.knn_committee import FEW_LABEL_K

    looks = sorted(looks)
    rows = np.asarray(order[:looks[-1]], dtype=np.int64)
    labels = codes[rows]
    n_classes = int(codes.max()) + 1
    out = {n: np.empty((n, len(units))) for n in looks}
    K = FEW_LABEL_K
    for m, U in enumerate(units):
        G = U[rows] @ U[rows].T
        np.fill_diagonal(G, -np.inf)  # leave one out
        best_s = np.full((len(rows), K), -np.inf)  # each row's K nearest so far, nearest first
        best_i = np.zeros((len(rows), K), dtype=np.int64)
        seen = 0
        for n in looks:
            # rows labelled before: merge the new rows in; rows new at this look: every row
            blocks = [(slice(0, seen), np.hstack([best_s[:seen], G[:seen, seen:n]]),
                       np.hstack([best_i[:seen], np.broadcast_to(np.arange(seen, n), (seen, n - seen))])),
                      (slice(seen, n), G[seen:n, :n], np.broadcast_to(np.arange(n), (n - seen, n)))]
            for part, cand_s, cand_i in blocks:
                if not cand_s.size:
                    continue
                width = min(K, cand_s.shape[1])
                top = np.argsort(-cand_s, axis=1, kind="stable")[:, :width]
                best_s[part] = -np.inf
                best_s[part, :width] = np.take_along_axis(cand_s, top, axis=1)
                best_i[part, :width] = np.take_along_axis(cand_i, top, axis=1)
            kk = max(1, min(K, n - 1))
            w = np.clip(best_s[:n, :kk], 0.0, None) + 1e-6
            cell = (np.arange(n)[:, None] * n_classes + labels[best_i[:n, :kk]]).ravel()
            votes = np.bincount(cell, w.ravel(), minlength=n * n_classes).reshape(n, n_classes)
            out[n][:, m] = votes.argmax(axis=1) == labels[:n]
            seen = n
    return out


def pool_and_truth(z: Zoo, pool: int, rng: np.random.Generator
                   ) -> tuple[np.ndarray, np.ndarray, np.ndarray]:
    """(pool correctness (N, M), truth = each model's accuracy on the pool, the model order
    ``cols``: a permutation, since model order carries no information)."""
    c = simulate(z, pool, rng) if z.kind == "simulated" else z.correct
    cols = rng.permutation(z.size)
    c = c[:, cols]
    return c, c.mean(axis=0), cols


def labelled(z: Zoo, reps: int, pool: int, budgets: list[int], round_size: int,
             max_labels: int, target: float, seed: int, resamples: int, baseline_reps: int
             ) -> dict:
    """(p_best, outcome) pairs at each budget and the stopping rule's runs, for the product's
    :func:`labelled_p_best` and, on the first ``baseline_reps`` replications, the baseline."""
    rng = np.random.default_rng(seed + 7)
    memo: dict[tuple[int, int], list[np.ndarray]] = {}

    def both(c, r, n):
        # the calibrated and the widened p(best) from one posterior mixture: each equals its own
        # labelled_p_best(..., widen=w) call exactly (tests/metrics), at half the cost
        if (r, len(c)) not in memo:
            if memo and next(iter(memo))[0] != r:
                memo.clear()
            memo[r, len(c)] = labelled_p_best_widened(c, (1.0, STOP_WIDENING), resamples,
                                                      seed=r, population=n)
        return memo[r, len(c)]

    def product(c, r, n):
        return both(c, r, n)[0]

    def widened(c, r, n):
        return both(c, r, n)[1]

    def baseline(c, r, n):
        return bootstrap_p_best(c, resamples, r)

    # name → (p(best) of the pairs, p(best) the stop compares; None: the same)
    methods = {"product": (product, widened), "product, unwidened stop": (product, None),
               "baseline": (baseline, None)}
    out = {k: {"pairs": {b: [] for b in budgets}, "fires": 0, "right": 0, "regrets": [],
               "stops": [], "reps": 0} for k in methods}
    looks = sorted(set(budgets) | set(range(round_size, min(max_labels, pool) + 1, round_size)))
    for r in range(reps):
        c, truth, cols = pool_and_truth(z, pool, rng)
        n_pool = c.shape[0]
        order = rng.permutation(n_pool)
        share = outcome_share(truth)
        seen = z.labelled_correct(c, order, looks, cols)
        cached: dict[tuple[str, int], np.ndarray] = {}
        for name, (fn, stop_fn) in methods.items():
            if name == "baseline" and r >= baseline_reps:
                continue
            o = out[name]
            o["reps"] += 1
            for n in budgets:
                if (fn.__name__, n) not in cached:
                    cached[fn.__name__, n] = fn(seen[n], r, n_pool)
                o["pairs"][n].append((cached[fn.__name__, n], share))
            for n in range(round_size, min(max_labels, n_pool) + 1, round_size):
                if (fn.__name__, n) not in cached:
                    cached[fn.__name__, n] = fn(seen[n], r, n_pool)
                p = cached[fn.__name__, n]
                lead = int(np.argmax(p))
                if (p if stop_fn is None else stop_fn(seen[n], r, n_pool))[lead] >= target:
                    o["fires"] += 1
                    o["right"] += int(truth[lead] >= truth.max() - TOL - 1e-12)
                    o["regrets"].append(100 * (truth.max() - truth[lead]))
                    o["stops"].append(n)
                    break
    for o in out.values():
        o["regret"] = float(np.mean(o["regrets"])) if o["regrets"] else float("nan")
    return out


# --------------------------------------------------------------------------------------------
# reliability


def _leader_or_all(pairs: list[tuple[np.ndarray, np.ndarray]], leader_only: bool
                   ) -> tuple[np.ndarray, np.ndarray]:
    ps, os_ = [], []
    for p, o in pairs:
        if leader_only:
            i = int(np.argmax(p))
            ps.append(p[i])
            os_.append(o[i])
        else:
            ps.extend(p)
            os_.extend(o)
    return np.asarray(ps, dtype=np.float64), np.asarray(os_, dtype=np.float64)


def _ece(ps: np.ndarray, os_: np.ndarray) -> tuple[float, list[tuple[str, int, float, float]]]:
    which = np.clip(np.digitize(ps, BINS[1:-1]), 0, len(BINS) - 2)
    rows, ece = [], 0.0
    for k in range(len(BINS) - 1):
        sel = which == k
        if sel.any():
            ece += sel.mean() * abs(ps[sel].mean() - os_[sel].mean())
            rows.append((f"{BINS[k]:.1f}–{BINS[k + 1]:.1f}", int(sel.sum()), float(ps[sel].mean()),
                         float(os_[sel].mean())))
    return float(ece), rows


def reliability(pairs: list[tuple[np.ndarray, np.ndarray]], leader_only: bool = False
                ) -> tuple[float, list[tuple[str, int, float, float]]]:
    """(ECE, rows (bin, count, mean p, mean outcome)) of (p, outcome) pairs, ten bins."""
    return _ece(*_leader_or_all(pairs, leader_only))


def ece_floor(pairs: list[tuple[np.ndarray, np.ndarray]], leader_only: bool = False,
              draws: int = 200, seed: int = 0) -> float:
    """The ECE a perfectly calibrated p(best) would show on these predictions by chance: the mean
    ECE of ``draws`` outcome sets drawn as Bernoulli(p) (the binned estimator's Monte-Carlo bias
    at this many pairs; a measured ECE near it is noise, not miscalibration)."""
    ps, _ = _leader_or_all(pairs, leader_only)
    if not len(ps):
        return float("nan")
    rng = np.random.default_rng(seed)
    return float(np.mean([_ece(ps, (rng.random(len(ps)) < ps).astype(np.float64))[0]
                          for _ in range(draws)]))


# --------------------------------------------------------------------------------------------
# the lead figures: the leader's calibration, the Brier score and the sharpness, per zoo, with
# the runs as n (the ECE over every (model, run) pair above cannot fail: a uniform p = 1/M
# scores 0 on it, since each run's outcomes sum to 1 like its p)


def wilson(k: int, n: int, confidence: float = 0.95) -> tuple[float, float]:
    """Wilson score interval of ``k`` successes in ``n`` independent trials (scipy's
    ``binomtest(...).proportion_ci(method="wilson")``); (nan, nan) when ``n`` is 0."""
    if n == 0:
        return float("nan"), float("nan")
    ci = stats.binomtest(int(k), int(n)).proportion_ci(confidence, method="wilson")
    return float(ci.low), float(ci.high)


def brier(pairs: list[tuple[np.ndarray, np.ndarray]]) -> float:
    """Mean over predictions of the multi-class Brier score Σ_m (p_m − o_m)² (o: the outcome
    shares, :func:`outcome_share`). Proper: it rewards a p(best) that is both calibrated and
    sharp; a uniform p = 1/M scores 1/k − 1/M with k models tied for best."""
    return float(np.mean([np.sum((np.asarray(p) - o) ** 2) for p, o in pairs]))


def uniform(pairs: list[tuple[np.ndarray, np.ndarray]]) -> list[tuple[np.ndarray, np.ndarray]]:
    """The same predictions with p(best) = 1/M for every model (the baseline that knows
    nothing; its leader is the first model of each run's random model order)."""
    return [(np.full(len(p), 1.0 / len(p)), o) for p, o in pairs]


def _interval(values: np.ndarray, confidence: float = 0.95) -> tuple[float, float]:
    lo, hi = np.percentile(values, [50 * (1 - confidence), 50 * (1 + confidence)])
    return float(lo), float(hi)


#: the leader's p(best) from which a prediction counts as confident (the top two bins)
CONFIDENT = 0.8


def leader_summary(runs: list[list[tuple[np.ndarray, np.ndarray]]], boot: int = 1000,
                   seed: int = 0) -> dict:
    """The lead figures of one zoo from ``runs`` (one list of (p, outcome) predictions per
    independent run: one for the label-free p(best), one per budget for p(best | labels)).

    * ``ece`` (± ``ece_ci``): the leader's ECE, its p(best) against the share of "best" it truly
      holds, over every prediction; ``floor``: the ECE of a perfectly calibrated leader on the
      same p by chance (:func:`ece_floor`);
    * ``brier`` (± ``brier_ci``): :func:`brier`; ``brier_uniform``: the uniform p's;
      ``skill``: 1 − brier / brier_uniform (0: no better than knowing nothing);
    * ``sharpness``: the mean leader p(best) (1/M for the uniform p);
    * ``confident``: predictions whose leader printed p ≥ :data:`CONFIDENT`: their count, mean p,
      mean outcome (± ``confident_ci``) and how many of them had the leader within the tie
      tolerance of the best;
    * ``right``: predictions whose leader is within the tolerance of the best (outcome > 0).

    Intervals (95%) are percentiles of a bootstrap over the runs (a run's predictions stay
    together: those of one run are not independent); the proportions' Wilson intervals are
    computed by the caller where the trials are independent runs."""
    flat = [pr for run in runs for pr in run]
    p, o = _leader_or_all(flat, leader_only=True)
    size = np.array([len(x) for x, _ in flat])
    sizes = np.array([len(run) for run in runs])
    start = np.r_[0, np.cumsum(sizes)[:-1]]
    sq = np.array([np.sum((np.asarray(x) - y) ** 2) for x, y in flat])
    sq_uniform = np.array([np.sum((1.0 / len(x) - y) ** 2) for x, y in flat])
    confident = p >= CONFIDENT
    rng = np.random.default_rng(seed)
    eces, briers, skills, conf_out = [], [], [], []
    for _ in range(boot):
        pick = rng.integers(0, len(runs), len(runs))
        idx = np.concatenate([np.arange(start[i], start[i] + sizes[i]) for i in pick])
        eces.append(_ece(p[idx], o[idx])[0])
        briers.append(sq[idx].mean())
        if sq_uniform[idx].mean() > 1e-9:
            skills.append(1.0 - sq[idx].mean() / sq_uniform[idx].mean())
        sel = idx[confident[idx]]
        if len(sel):
            conf_out.append(o[sel].mean())
    return {"runs": len(runs), "predictions": len(flat), "ece": _ece(p, o)[0],
            "ece_ci": _interval(np.array(eces)), "floor": ece_floor(flat, leader_only=True),
            "ece_uniform": reliability(uniform(flat), leader_only=True)[0],
            "brier": float(sq.mean()), "brier_ci": _interval(np.array(briers)),
            "brier_uniform": brier(uniform(flat)),
            # every model tied (uniform Brier 0): the uniform p is exact, no skill to measure
            "skill": (1.0 - float(sq.mean()) / brier(uniform(flat))
                      if brier(uniform(flat)) > 1e-9 else float("nan")),
            "skill_ci": _interval(np.array(skills)) if skills else (np.nan, np.nan),
            "sharpness": float(p.mean()), "sharpness_uniform": float(np.mean(1.0 / size)),
            "confident": int(confident.sum()),
            "confident_p": float(p[confident].mean()) if confident.any() else float("nan"),
            "confident_outcome": float(o[confident].mean()) if confident.any() else float("nan"),
            "confident_ci": _interval(np.array(conf_out)) if conf_out else (np.nan, np.nan),
            "confident_calibrated": calibrated_range(p[confident], seed=seed),
            "confident_right": int((o[confident] > 0).sum()),
            "right": int((o > 0).sum())}


def calibrated_range(p: np.ndarray, draws: int = 2000, seed: int = 0, confidence: float = 0.95
                     ) -> tuple[float, float]:
    """The central ``confidence`` range of the mean outcome that a perfectly calibrated p would
    give on these predictions (outcomes drawn as Bernoulli(p), as :func:`ece_floor`): a small
    sample's own chance spread."""
    rng = np.random.default_rng(seed)
    means = (rng.random((draws, len(p))) < p[None, :]).mean(axis=1)
    return _interval(means, confidence)


def confidence_verdict(s: dict) -> str:
    """'over-confident' / 'under-confident' where the leader's confident predictions' mean p lies
    outside the bootstrap interval of their mean outcome *and* that mean outcome lies outside the
    range a calibrated p would give them by chance (:func:`calibrated_range`), else
    'consistent'; 'no p ≥ 0.8' when the leader never printed that much."""
    if not s["confident"]:
        return f"no p ≥ {CONFIDENT:g}"
    lo, hi = s["confident_ci"]
    clo, chi = s["confident_calibrated"]
    if s["confident_p"] > hi and s["confident_outcome"] < clo:
        return "over-confident"
    if s["confident_p"] < lo and s["confident_outcome"] > chi:
        return "under-confident"
    return "consistent"


# --------------------------------------------------------------------------------------------
# real zoos


def uva_correctness(n: int, cache: Path) -> np.ndarray | None:
    """(n, 4) correctness of the UvA classifiers on the first ``n`` CIFAR-10 test images, cached;
    None when the checkpoints or the data are missing."""
    path = cache / f"uva_correct_{n}.npz"
    if path.exists():
        return np.load(path)["correct"]
    try:
        import torch
        from uva_accuracy import README_TOP1, images_and_labels
        from validate_uva import config

        from zoorank.config.loading import load_config
        from zoorank.zoo import load_model, resolve_models
    except (ImportError, FileNotFoundError) as exc:
        print(f"uva: not run ({exc})")
        return None
    import yaml

    cache.mkdir(parents=True, exist_ok=True)
    x, labels = images_and_labels(n)
    cfg = cache / "uva.yaml"
    cfg.write_text(yaml.safe_dump(config(cache, n, 1), sort_keys=False))
    models = {m.model_id: m for m in resolve_models(load_config(cfg))}
    cols = []
    for model_id in README_TOP1:
        extractor = load_model(models[model_id])
        head = extractor.model.output_net[-1]
        with torch.inference_mode():
            logits = torch.cat([head(extractor(b)) for b in x.split(500)])
        cols.append(logits.argmax(1).numpy() == labels)
        print(f"uva: {model_id} accuracy {cols[-1].mean():.4f} on {n} images", flush=True)
    correct = np.stack(cols, axis=1).astype(np.float64)
    np.savez(path, correct=correct, models=np.array(list(README_TOP1)))
    return correct


#: the embedding zoos of ``benchmarks/science/default_lozo.py`` (its docstring and
#: ``results/default_lozo.md`` say how each store is built: ``zoorank demo --out /tmp/lozo/demo``,
#: ``validate_ranking.py --dataset digits|cifar10 --out /tmp/lozo/...``): name → run config.
EMBEDDING_ZOOS = {"demo": "/tmp/lozo/demo/run.yaml", "digits": "/tmp/lozo/digits/validate_run.json",
                  "cifar10": "/tmp/lozo/cifar10/validate_run.json"}


def _unit(Z: np.ndarray) -> np.ndarray:
    Z = np.asarray(Z, dtype=np.float64)
    norms = np.linalg.norm(Z, axis=1, keepdims=True)
    return Z / np.where(norms > 0, norms, 1.0)


def store_pool(spec: str) -> tuple[list[str], list[np.ndarray], np.ndarray] | None:
    """(model ids, one (N, d) clean embedding per model, N class codes) of the labelled samples
    every model embedded in the store of run config ``spec`` (a ``run.yaml`` or
    ``validate_run.json``), its first dataset; None when the store is missing. Reads the stored
    embeddings as they are (the manifest's done rows of the clean view)."""
    import json

    from zoorank.catalog import build_catalog
    from zoorank.config.loading import load_config, parse_config
    from zoorank.store import Store

    path = Path(spec)
    if not path.exists():
        return None
    config = (parse_config(json.loads(path.read_text())["run_config"], spec)
              if path.suffix == ".json" else load_config(path))
    store = Store(config.store)
    name = config.datasets[0].name
    index = build_catalog(config).indexes[name]
    manifest = store.read_manifest()
    done = manifest[(manifest.dataset == name) & (manifest.view == "clean")
                    & (manifest.status == "done")]
    labels = dict(zip(np.asarray(index.sample_id, dtype=np.int64).tolist(), index.label.tolist()))
    common, frames = None, {}
    for model_id in sorted(set(done.model_id)):
        emb = store.read_embeddings(name, "clean", model_id)
        keep = np.asarray(emb.view_index) == 0
        ids = np.asarray(emb.sample_id, dtype=np.int64)[keep]
        frames[model_id] = dict(zip(ids.tolist(), np.asarray(emb.embedding)[keep]))
        common = set(ids.tolist()) if common is None else common & set(ids.tolist())
    rows = sorted(i for i in common if labels.get(i) is not None and labels[i] == labels[i])
    classes = {c: k for k, c in enumerate(sorted({labels[i] for i in rows}, key=str))}
    codes = np.array([classes[labels[i]] for i in rows], dtype=np.int64)
    return (list(frames), [np.stack([f[i] for i in rows]) for f in frames.values()], codes)


def embedding_zoo(name: str, spec: str, cache: Path) -> Zoo | None:
    """A real embedding zoo (module docstring), its pool cached under ``cache``: the truth is each
    model's leave-one-out few-label kNN accuracy with every label of the pool
    (:func:`zoorank.metrics.active.knn_committee.knn_predictions`, the accuracy p(best | labels) is about);
    None when neither the cache nor the store exists."""
    from zoorank.metrics.active.knn_committee import knn_predictions

    path = cache / f"{name}_pool.npz"
    if path.exists():
        data = np.load(path)
        Zs, codes = [data[f"Z{i}"] for i in range(int(data["models"]))], data["codes"]
    else:
        got = store_pool(spec)
        if got is None:
            print(f"{name}: not run (no store at {spec}; build it with "
                  f"`zoorank demo --out /tmp/lozo/demo` or "
                  f"`benchmarks/science/validate_ranking.py --dataset {name} --out /tmp/lozo/{name}`)")
            return None
        ids, Zs, codes = got
        cache.mkdir(parents=True, exist_ok=True)
        np.savez(path, models=len(Zs), codes=codes, ids=np.array(ids),
                 **{f"Z{i}": Z for i, Z in enumerate(Zs)})
    every = np.arange(len(codes))
    n_classes = int(codes.max()) + 1
    correct = np.stack([knn_predictions(Z, every, codes, n_classes) == codes for Z in Zs], axis=1)
    return Zoo(f"{name} ({len(Zs)} encoders, resampled)", "real", correct=correct.astype(np.float64),
               embeddings=tuple(_unit(Z) for Z in Zs), codes=codes)


# --------------------------------------------------------------------------------------------
# the report


def _reliability_table(rows: list[tuple[str, int, float, float]]) -> str:
    return harness.table(["bin", "count", "mean p(best)", "mean outcome"],
                         [(b, n, f"{p:.3f}", f"{o:.3f}") for b, n, p, o in rows], "llll")


#: which zoos the posterior's settings were tuned on: the prior spread grid and
#: :data:`~zoorank.metrics.active.label_posterior.STOP_WIDENING` were chosen on draws of the simulated
#: settings and the UvA classifiers with seed 1001 (``benchmarks/science/stop_tuning.py``); a
#: run here with another seed draws fresh replications of the same settings. The embedding zoos
#: were never used to choose anything in the posterior or the rule.
HELD_OUT = ("demo", "digits", "cifar10")


def tuned_or_held_out(name: str) -> str:
    """'held out' for a zoo no setting of the posterior was chosen on, else 'tuned on'."""
    return "held out" if name.split(" ")[0] in HELD_OUT else "tuned on"


def _ci(lo_hi: tuple[float, float], spec: str = ".3f") -> str:
    lo, hi = lo_hi
    return "—" if not np.isfinite(lo) else f"[{lo:{spec}}, {hi:{spec}}]"


def _share(k: int, n: int) -> str:
    """'k/n (share, Wilson 95% [lo, hi])'."""
    if n == 0:
        return "0/0"
    lo, hi = wilson(k, n)
    return f"{k}/{n} ({k / n:.2f} [{lo:.2f}, {hi:.2f}])"


def lead_rows(zoos: list[dict], key: str) -> list[list[str]]:
    """The lead table's rows for the predictions ``key`` ('free' or 'labels') of each zoo."""
    rows = []
    for z in zoos:
        s = z[key]
        conf = (f"{s['confident']}: p {s['confident_p']:.2f} vs {s['confident_outcome']:.2f} "
                f"{_ci(s['confident_ci'], '.2f')}" if s["confident"] else "none")
        rows.append([z["name"], z["status"], f"{s['runs']}" + (
                         f" × {s['predictions'] // s['runs']}" if s["predictions"] > s["runs"] else ""),
                     f"{s['ece']:.3f} {_ci(s['ece_ci'])}", f"{s['floor']:.3f}",
                     f"{s['ece_uniform']:.3f}",
                     f"{s['brier']:.3f} {_ci(s['brier_ci'])}", f"{s['brier_uniform']:.3f}",
                     (f"{s['skill']:+.2f} {_ci(s['skill_ci'], '+.2f')}" if np.isfinite(s["skill"])
                      else "— (all tied)"),
                     f"{s['sharpness']:.2f} (1/M {s['sharpness_uniform']:.2f})",
                     conf, confidence_verdict(s)])
    return rows


LEAD_HEADER = ["zoo", "tuned on / held out", "runs", "leader ECE [95% CI]", "floor",
               "uniform p: leader ECE", "Brier [95% CI]", "uniform p: Brier", "Brier skill [95% CI]",
               "sharpness: mean leader p", f"leader p ≥ {CONFIDENT:g}: n, mean p vs mean outcome "
               "[95% CI]", "reading"]


def stop_row(zoo: str, status: str, method: str, lab: dict, max_labels: int) -> list[str]:
    """One row of the per-zoo stopping table."""
    f, r, ok = lab["fires"], lab["reps"], lab["right"]
    stops = np.asarray(lab["stops"], dtype=float)
    at = (f"{np.median(stops):.0f} ({stops.min():.0f}–{stops.max():.0f})" if f else
          f"— (none by {max_labels})")
    return [zoo, status, method, _share(f, r), at, _share(ok, f),
            f"{lab['regret']:.2f}" if f else "—"]


def reading_lines(zoos: list[dict], stops: list[tuple[str, str, str, dict]], budgets: list[int]
                  ) -> list[str]:
    """The reading, generated from the figures: where the printed p(best) is over-confident,
    what the stopping rule's record rests on."""
    def names(key: str, verdict: str) -> str:
        hit = [z for z in zoos if confidence_verdict(z[key]) == verdict]
        return ", ".join(f"{z['name']} (mean p {z[key]['confident_p']:.2f}, share of best held "
                         f"{z[key]['confident_outcome']:.2f}, {z[key]['confident']} of "
                         f"{z[key]['predictions']} predictions; the leader within the tolerance "
                         f"of the best in {z[key]['confident_right']} of them)"
                         for z in hit) or "none"

    lines = [f"- **p(best | labels) is over-confident where the leader prints ≥ {CONFIDENT:g}** "
             f"on: {names('labels', 'over-confident')}. Under-confident there on: "
             f"{names('labels', 'under-confident')}.",
             f"- **The label-free p(best)** is over-confident at ≥ {CONFIDENT:g} on: "
             f"{names('free', 'over-confident')}; under-confident on: "
             f"{names('free', 'under-confident')}."]
    # no better than the uniform p: the skill's bootstrap interval reaches 0 (NaN: all tied)
    worse = [z["name"] for z in zoos if not z["labels"]["skill_ci"][0] > 0]
    lines.append("- **Brier skill of p(best | labels) against a uniform p** (budgets "
                 f"{', '.join(map(str, budgets))} pooled; 95% interval by a bootstrap over runs): "
                 + "; ".join(f"{z['name']} {z['labels']['skill']:+.2f} "
                             f"{_ci(z['labels']['skill_ci'], '+.2f')}" for z in zoos)
                 + (f". Not distinguishable from the uniform p (interval reaching 0) on: "
                    f"{', '.join(worse)}." if worse else
                    ". Better than the uniform p on every zoo (every interval above 0)."))
    prod = [(z, st, lab) for z, st, m, lab in stops if m == "product"]
    fires = sum(lab["fires"] for _, _, lab in prod)
    right = sum(lab["right"] for _, _, lab in prod)
    runs = sum(lab["reps"] for _, _, lab in prod)
    if fires:
        big = max(prod, key=lambda t: t[2]["fires"])
        rest_f = fires - big[2]["fires"]
        rest_r = right - big[2]["right"]
        rest_n = runs - big[2]["reps"]
        lines.append(f"- **The stopping rule** fired in {fires} of {runs} runs and was right in "
                     f"{_share(right, fires)} of its stops; {big[2]['fires']} of the {fires} "
                     f"stops are on one zoo ({big[0]}, {_share(big[2]['fires'], big[2]['reps'])} "
                     f"runs fired). The other zoos: fired in {_share(rest_f, rest_n)} runs, "
                     f"right in {_share(rest_r, rest_f)} stops. Per zoo below.")
    return lines


def measure(z: Zoo, args: argparse.Namespace, budgets: list[int], target: float) -> dict:
    """Every replication of one zoo (label-free and labelled), as plain data: what
    :func:`run` renders, and what ``--save`` keeps for ``--merge``."""
    t0 = time.perf_counter()
    images = args.images if z.kind == "simulated" else min(args.images, len(z.correct) // 2)
    lf = label_free(z, args.reps, images, args.folds, args.fraction, args.resamples,
                    args.confidence, args.seed)
    pool = args.pool if z.kind == "simulated" else len(z.correct)
    labs = labelled(z, args.label_reps, pool, budgets, args.round, args.max_labels, target,
                    args.seed, args.label_resamples, args.baseline_reps)
    prod = labs["product"]
    print(f"{z.name:<30} coverage {lf['coverage']:.3f} (baseline {lf['baseline']:.3f})  stop "
          f"fired {prod['fires']}/{prod['reps']} right {prod['right']}  "
          f"{time.perf_counter() - t0:.0f} s", flush=True)
    return {"name": z.name, "kind": z.kind, "models": z.size, "images": images, "pool": pool,
            "lf": lf, "labs": labs}


def run(args: argparse.Namespace) -> list[str]:
    import pickle

    from zoorank.labels.stopping import TARGET

    budgets = [b for b in args.budgets if b <= args.pool]
    if args.merge:
        measured = [m for path in args.merge for m in pickle.loads(path.read_bytes())]
    else:
        zoos = [] if args.no_simulated else simulated_zoos()
        for spec in args.real:
            name, _, where = spec.partition("=")
            zoo = embedding_zoo(name, where or EMBEDDING_ZOOS.get(name, ""), args.cache)
            if zoo is not None:
                zoos.append(zoo)
        if not args.no_uva:
            c = uva_correctness(args.uva_images, args.cache)
            if c is not None:
                zoos.append(Zoo("uva classifiers (4, resampled)", "real", correct=c))
        measured = [measure(z, args, budgets, TARGET) for z in zoos]
    if args.save:
        args.save.write_bytes(pickle.dumps(measured))
    lines: list[str] = []
    cov_rows, lf_rows, lab_rows, stop_rows = [], [], [], []
    reliab: list[str] = []
    summaries: list[dict] = []
    stops: list[tuple[str, str, str, dict]] = []
    budget_rows: list[list[str]] = []
    pooled: dict[str, list] = {"simulated": [], "real": []}
    for z in measured:
        status = tuned_or_held_out(z["name"])
        lf, labs, images, pool = z["lf"], z["labs"], z["images"], z["pool"]
        se, se0 = wilson_free(lf["coverage"], lf["reps"]), wilson_free(lf["baseline"], lf["reps"])
        cov_rows.append((z["name"], images, lf["coverage"], se, lf["baseline"], se0, lf["reps"]))
        ece_all, _ = reliability(lf["pairs"])
        ece_lead, rows_lead = reliability(lf["pairs"], leader_only=True)
        lf_rows.append((z["name"], ece_all, ece_lead))
        prod = labs["product"]
        summaries.append({
            "name": z["name"], "status": status, "models": z["models"],
            "free": leader_summary([[pr] for pr in lf["pairs"]], seed=args.seed),
            "labels": leader_summary([[prod["pairs"][b][r] for b in budgets]
                                      for r in range(prod["reps"])], seed=args.seed)})
        for b in budgets:
            pb = prod["pairs"][b]
            p_l, o_l = _leader_or_all(pb, leader_only=True)
            budget_rows.append([z["name"], b, _share(int((o_l > 0).sum()), len(pb)),
                                f"{p_l.mean():.2f}", f"{o_l.mean():.2f}",
                                f"{_ece(p_l, o_l)[0]:.3f}", f"{brier(pb):.3f}",
                                f"{brier(uniform(pb)):.3f}"])
        eces = {}
        for name, lab in labs.items():
            stop_rows.append((z["name"], name, lab["fires"], lab["reps"], lab["right"],
                              lab["regret"]))
            stops.append((z["name"], status, name, lab))
            if name not in ("product", "baseline"):  # the product's pairs again
                continue
            all_pairs = [pr for b in budgets for pr in lab["pairs"][b]]
            e_all, _ = reliability(all_pairs)
            e_lead, rows_l = reliability(all_pairs, leader_only=True)
            per_budget = {b: reliability(lab["pairs"][b], leader_only=True)[0] for b in budgets}
            floors = (ece_floor(all_pairs), ece_floor(all_pairs, leader_only=True))
            eces[name] = (e_all, e_lead, per_budget, lab["reps"], floors)
            if name == "product":
                pooled[z["kind"]] += all_pairs
                rows_product = rows_l
        lab_rows.append((z["name"], pool, eces))
        reliab += [f"#### {z['name']}", "", "label-free p(best), leader:", "",
                   _reliability_table(rows_lead), "", "p(best | labels), leader, all budgets:", "",
                   _reliability_table(rows_product), ""]
        sl = summaries[-1]["labels"]
        print(f"{z['name']:<30} leader ECE labels {sl['ece']:.3f} Brier {sl['brier']:.3f} "
              f"(uniform {sl['brier_uniform']:.3f}) sharpness {sl['sharpness']:.2f}", flush=True)
    if args.json:
        import json

        args.json.write_text(json.dumps(
            {"zoos": summaries, "budgets": budgets,
             "stops": [{"zoo": n, "status": st, "method": m,
                        **{k: lab[k] for k in ("fires", "reps", "right", "stops", "regret")}}
                       for n, st, m, lab in stops]}, indent=1, default=float))
    real = [z["name"] for z in measured if z["kind"] == "real"]
    missing = [f"{n} (no store)" for n in EMBEDDING_ZOOS
               if not any(r.startswith(n + " ") for r in real)]
    if not any(r.startswith("uva") for r in real):
        missing.append("uva classifiers (no checkpoints)")
    lines += ["Real zoos: " + (", ".join(real) or "none") + ". Embedding zoos "
              "(demo, digits, cifar10): the stores of `benchmarks/science/default_lozo.py` (`zoorank demo "
              "--out DIR/demo`; `validate_ranking.py --dataset digits|cifar10 --out DIR/...`), "
              "their clean embeddings cached under `--cache`; their truth is each "
              "model's leave-one-out kNN accuracy (k = 5) with every label of the pool, and the "
              "labels' correctness is the product's few-label kNN among the labelled images. "
              "Label-free rows of real zoos run the fold path on the per-image correctness. "
              "Not run: " + ", ".join([*missing, "the UvA autoencoders (no per-image accuracy "
                                       "without a probe)"]) + ".", "",
              "**Tuned on or held out.** The posterior's prior spread grid and the stopping "
              "rule's widening (`STOP_WIDENING`) were chosen on other draws (seed 1001, "
              "`benchmarks/science/stop_tuning.py`) of the six simulated settings and of the UvA "
              f"classifiers: this run (seed {args.seed}) draws fresh replications of those "
              "settings, *tuned on* below. The embedding zoos (demo, digits, cifar10) were not "
              "used to choose anything in the posterior or the rule: *held out*.", ""]
    lines += ["## What the printed p(best) is worth, per zoo", "",
              "The figures this page leads with. Per zoo and per run the *leader* is the model "
              "with the highest p(best); its *outcome* is the share of \"best\" it truly holds "
              f"(1/k when it is one of the k models within {100 * TOL:g} pp of the best, else 0: "
              "the event p(best) is defined on, ties shared). *Leader ECE*: ten equal-width bins "
              "of the leader's p(best) against its outcome; *floor*: what a perfectly calibrated "
              "leader would show on the same p by chance. *Brier*: Σ over the models of "
              "(p(best) − outcome)², mean over predictions; proper, it rewards a p(best) that is "
              "calibrated *and* sharp. *Sharpness*: the mean leader p(best). *Uniform p*: every "
              "model at 1/M, the baseline that knows nothing: its leader ECE is near 0 (its "
              "p = 1/M is calibrated on average), its sharpness is 1/M, and only the Brier score "
              "separates it from a useful p(best) — *Brier skill* = 1 − Brier / uniform Brier "
              "(0: no better than the uniform p; negative: worse). *n* is the runs (independent "
              "replications); a labelled run gives one prediction per budget "
              f"({', '.join(map(str, budgets))} labels), so its rows read \"runs × "
              f"{len(budgets)}\" and their intervals are a bootstrap over runs (a run's "
              "predictions resampled together). *Reading*: over-/under-confident where the "
              f"leader's predictions at p ≥ {CONFIDENT:g} have a mean p outside the 95% interval "
              "of their mean outcome (bootstrap over runs) and that mean outcome is outside what a "
              "calibrated p would show by chance on as many predictions (Bernoulli(p) draws).",
              "",
              *reading_lines(summaries, stops, budgets), "",
              "### p(best | labels) (the few-label pick's printed probability)", "",
              harness.table(LEAD_HEADER, lead_rows(summaries, "labels"), "l" * len(LEAD_HEADER)),
              "", "### Label-free p(best) (the board's)", "",
              f"One prediction per run ({args.reps} runs, the product's fold replicates at the "
              "defaults).", "",
              harness.table(LEAD_HEADER, lead_rows(summaries, "free"), "l" * len(LEAD_HEADER)),
              "", "### p(best | labels) at each budget", "",
              "Runs are independent at one budget, so the share of runs whose leader was within "
              f"{100 * TOL:g} pp of the best has its Wilson 95% interval.", "",
              harness.table(["zoo", "labels", "leader within tolerance (Wilson 95%)",
                             "mean leader p", "mean outcome", "leader ECE", "Brier",
                             "uniform p: Brier"], budget_rows, "l" * 8)]
    stop_table = [stop_row(n, st, m, lab, args.max_labels) for n, st, m, lab in stops]
    for m in ("product", "product, unwidened stop", "baseline"):
        for label, keep in (("**all zoos**", lambda n: True),
                            ("**all but the clear winner**", lambda n: not n.startswith("clear")),
                            ("**held-out zoos**", lambda n: tuned_or_held_out(n) == "held out")):
            sel = [lab for n, _, mm, lab in stops if mm == m and keep(n)]
            if not sel:
                continue
            merged = {"fires": sum(x["fires"] for x in sel), "reps": sum(x["reps"] for x in sel),
                      "right": sum(x["right"] for x in sel),
                      "stops": [v for x in sel for v in x["stops"]]}
            regrets = [v for x in sel for v in x["regrets"]]
            merged["regret"] = float(np.mean(regrets)) if regrets else float("nan")
            stop_table.append(stop_row(label, "", m, merged, args.max_labels))
    lines += ["", "## The stopping rule, per zoo", "",
              f"Labels revealed in random order, {args.round} per round, at most "
              f"{args.max_labels}; stop when the leader's p(best | labels) ≥ {TARGET} "
              "(`zoorank.labels.stopping.TARGET`). *product*: the rule as shipped, the leader's "
              "p(best) with the posterior's covariance widened by "
              f"`STOP_WIDENING` = {STOP_WIDENING:g} for the repeated looks; *product, unwidened "
              "stop*: the same leader at its calibrated p(best) (the rule before the widening); "
              "*baseline*: the Bayesian bootstrap. *Fired*: runs in which the rule stopped "
              "at one of its looks (every round, the last at the budget), of the runs (Wilson "
              "95% interval); *labels at stop*: median "
              "(min–max) over the stops; *right*: the pick's full-data accuracy is within "
              f"{100 * TOL:g} pp of the best, of the stops (Wilson 95% interval).", "",
              harness.table(["zoo", "tuned on / held out", "posterior", "fired (of runs)",
                             "labels at stop", "right (of stops)", "mean regret when fired (pp)"],
                            stop_table, "l" * 7)]
    lines += ["", "## Top-set coverage at the defaults", "",
              f"{args.folds} folds of {args.fraction:g} of the images, {args.resamples} "
              f"replicates, confidence {args.confidence:g}; coverage = share of replications whose "
              "top set holds every truly-best model (real zoos: the model with the best accuracy "
              "on all images); ± its Monte-Carlo error sqrt(c(1−c)/R). *Baseline*: the same "
              "replications without the small-sample correction (`fold_scale(..., "
              "small_sample=False)`, zoorank before the correction).", "",
              harness.table(["zoo", "images", "coverage", "± MC error", "≥ 0.95 − 2·MC?",
                             "baseline", "± MC error", "replications"],
                            [(n, i, f"{c:.3f}", f"{s:.3f}", "yes" if c >= 0.95 - 2 * s else "NO",
                              f"{c0:.3f}", f"{s0:.3f}", r) for n, i, c, s, c0, s0, r in cov_rows],
                            "l" * 8)]
    lines += ["", "## ECE over every (model, run) pair (insensitive: kept for comparison)", "",
              "The figure this page used to lead with. It cannot fail: each run's p(best) and "
              "outcomes both sum to 1 over the models, so a uniform p = 1/M scores 0 on it, and "
              "the many models at p ≈ 0 dilute the leader. Read the leader's figures above. "
              "*All models*: every (model, replication) pair; *leader*: the most probable "
              f"model's p(best) only. Label-free: {args.reps} replications. Labels: budgets "
              f"{budgets} labels drawn at random from the pool; *product*: `labelled_p_best`; "
              "*baseline*: the Bayesian bootstrap it replaced. *Floor*: the ECE a perfectly "
              "calibrated p(best) shows on the same predictions by chance (outcomes drawn as "
              "Bernoulli(p), 200 draws)."]
    ece_rows = []
    for (n, ea, el), (_, pool, eces) in zip(lf_rows, lab_rows, strict=True):
        pa, pl, pb, pr, (fa, fl) = eces["product"]
        ba, bl, _, br, _ = eces["baseline"]
        ece_rows.append([n, f"{ea:.3f}", f"{el:.3f}", pool, f"{pa:.3f} ({fa:.3f})",
                         f"{pl:.3f} ({fl:.3f})", pr, f"{ba:.3f}", f"{bl:.3f}", br,
                         *(f"{pb[b]:.3f}" for b in budgets)])
    for kind, prs in pooled.items():
        if prs:
            ece_rows.append([f"**all {kind} zoos pooled**", "", "", "",
                             f"{reliability(prs)[0]:.3f} ({ece_floor(prs):.3f})",
                             f"{reliability(prs, True)[0]:.3f} ({ece_floor(prs, True):.3f})",
                             f"{len(prs)} pairs", "", "", "", *([""] * len(budgets))])
    ece_header = ["zoo", "label-free, all", "label-free, leader", "pool",
                  "labels product, all (floor)", "labels product, leader (floor)", "reps",
                  "labels baseline, all", "labels baseline, leader", "reps",
                  *(f"product leader at {b}" for b in budgets)]
    lines += ["", harness.table(ece_header, ece_rows, "l" * len(ece_header))]
    lines += ["", "## Reliability tables", "", *reliab]
    return lines


def main() -> None:
    p = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    p.add_argument("--quick", action="store_true", help="small sizes: about a minute")
    p.add_argument("--reps", type=int, default=300, help="label-free replications per zoo")
    p.add_argument("--images", type=int, default=2000, help="evaluation images per replication")
    p.add_argument("--folds", type=int, default=8)
    p.add_argument("--fraction", type=float, default=0.5)
    p.add_argument("--resamples", type=int, default=1000)
    p.add_argument("--confidence", type=float, default=0.95)
    p.add_argument("--label-reps", type=int, default=200, help="labelled replications per zoo")
    p.add_argument("--label-resamples", type=int, default=1000)
    p.add_argument("--baseline-reps", type=int, default=100,
                   help="labelled replications that also run the baseline p(best | labels)")
    p.add_argument("--pool", type=int, default=2000, help="simulated pool the labels come from")
    p.add_argument("--budgets", type=int, nargs="+", default=[20, 50, 100, 200, 500])
    p.add_argument("--round", type=int, default=20)
    p.add_argument("--max-labels", type=int, default=500)
    p.add_argument("--uva-images", type=int, default=2000)
    p.add_argument("--no-uva", action="store_true")
    p.add_argument("--real", nargs="*", default=list(EMBEDDING_ZOOS),
                   help="real embedding zoos: NAME (a store of EMBEDDING_ZOOS) or NAME=RUN_CONFIG")
    p.add_argument("--no-simulated", action="store_true")
    p.add_argument("--append", action="store_true",
                   help="append this run's tables (with its own command line) to --markdown")
    p.add_argument("--cache", type=Path, default=Path("/tmp/zoorank-calibration"))
    p.add_argument("--save", type=Path, default=None,
                   help="keep this run's replications (pickle) for a later --merge")
    p.add_argument("--merge", type=Path, nargs="+", default=None,
                   help="render the replications of earlier --save runs (zoos run apart) instead "
                        "of measuring")
    p.add_argument("--json", type=Path, default=None,
                   help="also write the lead figures and the stops as JSON here")
    p.add_argument("--seed", type=int, default=0)
    harness.results_option(p, "calibration")
    args = p.parse_args()
    if args.quick:
        args.reps, args.label_reps, args.resamples, args.label_resamples = 60, 40, 500, 500
        args.baseline_reps = 20
    from threadpoolctl import threadpool_limits

    t0 = time.perf_counter()
    with threadpool_limits(1):  # small matrices: BLAS threads on shared cores only slow them
        lines = run(args)
    body = "\n".join([f"{time.perf_counter() - t0:.0f} s.", "", *lines])
    if args.append and args.markdown.exists():  # this run's tables one heading level down
        appended = "#" + harness.header("Appended run") + "\n\n" + body.replace("\n## ", "\n### ")
        args.markdown.write_text(f"{args.markdown.read_text()}\n{appended}\n")
        print(f"appended to {args.markdown}")
    else:
        harness.write_results(args.markdown, TITLE, body)


if __name__ == "__main__":
    main()
