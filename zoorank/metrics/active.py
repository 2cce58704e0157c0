"""Active model selection: which images to label next, and which model is best given the labels.

Pure functions on arrays (no I/O, no Ray); :mod:`zoorank.labels` orchestrates them.

Conventions:

* embeddings ``Z`` are (n, d) rows of one model over one dataset's pool, compared by cosine
  similarity (rows L2-normalised here);
* a model's *few-label prediction* of a sample is the similarity-weighted vote of its
  ``k = min(5, L - 1)`` nearest labelled samples (leave-one-out for a labelled sample itself), the
  few-label kNN probe of the label oracle shrunk to the labels at hand;
* p(best | labels) is the posterior probability that a model's leave-one-out accuracy on the
  whole pool is the best, models within :data:`TIE_TOLERANCE` (0.5 pp) of the best sharing it: a
  Gaussian posterior of the *paired* accuracies (their covariance over the same labelled images)
  under a hierarchical prior on the models' spread (:func:`labelled_p_best`), calibrated against
  simulations and resampled real zoos by ``benchmarks/calibration.py``.

Query-by-committee over the models that may be best (Seung et al. 1992; for model selection:
Karimi et al. AISTATS 2021, Okanovic et al. 2024 "ModelSelector"): an image is worth a label when
the committee's predictions of it disagree, each model's vote weighted by its p(best).
"""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import dataclass

import numpy as np

from zoorank.metrics._checks import check_array

__all__ = [
    "LabelEvidence",
    "change_probability",
    "cold_start",
    "label_evidence",
    "next_batch",
    "committee_disagreement",
    "knn_predictions",
    "labelled_p_best",
    "probability_mass_set",
    "select_diverse",
]

#: neighbours of the few-label kNN vote (fewer when fewer labels exist).
FEW_LABEL_K = 5


def _unit_rows(Z: np.ndarray) -> np.ndarray:
    norms = np.linalg.norm(Z, axis=1, keepdims=True)
    return Z / np.where(norms > 0, norms, 1.0)


def knn_predictions(Z, labelled: np.ndarray, labels: np.ndarray, n_classes: int,
                    k: int = FEW_LABEL_K) -> np.ndarray:
    """Few-label kNN prediction (class index) of every row of ``Z``.

    ``labelled``: row positions with a label; ``labels``: their class indices in ``0..n_classes-1``.
    A labelled row is predicted from the *other* labelled rows (leave-one-out), so its correctness
    is an honest estimate. Votes are cosine similarities (clipped at 0, plus a tiny constant so
    a row orthogonal to its neighbours still votes); ties go to the lowest class index.
    Needs ≥ 2 labelled rows (ValueError). Cost O(n · L · d) for L labels.
    """
    Z = _unit_rows(check_array(Z, "Z", min_rows=1))
    labelled = np.asarray(labelled, dtype=np.int64)
    labels = np.asarray(labels, dtype=np.int64)
    if len(labelled) != len(labels):
        raise ValueError(f"labelled ({len(labelled)}) and labels ({len(labels)}) differ in length")
    if len(labelled) < 2:
        raise ValueError(f"knn_predictions needs at least 2 labelled rows, got {len(labelled)}")
    if labels.min() < 0 or labels.max() >= n_classes:
        raise ValueError(f"labels must lie in 0..{n_classes - 1}")
    kk = max(1, min(k, len(labelled) - 1))
    sims = Z @ Z[labelled].T  # (n, L)
    sims[labelled, np.arange(len(labelled))] = -np.inf  # leave one out
    nearest = np.argpartition(-sims, kk - 1, axis=1)[:, :kk]
    weights = np.take_along_axis(sims, nearest, axis=1)
    weights = np.clip(weights, 0.0, None) + 1e-6
    votes = np.zeros((len(Z), n_classes))
    np.add.at(votes, (np.repeat(np.arange(len(Z)), kk), labels[nearest].ravel()), weights.ravel())
    return votes.argmax(axis=1)


#: pseudo-samples of independent correctness in the covariance of :func:`labelled_p_best`: 2
#: let a model right on 20 of 20 labels look certain and stop on it (``benchmarks/calibration.py``:
#: 4 tied best models, 5 of 11 stops wrong); with 8, 1 of 2.
PRIOR_SAMPLES = 8
#: accuracies within this of the best (0.5 pp) count as tied for best: they share p(best), and a
#: pick within it of the best is a right pick (:mod:`zoorank.labels.stopping`).
TIE_TOLERANCE = 0.005


#: the grid of prior spreads σ_b (accuracy) the posterior mixes over (:func:`labelled_p_best`):
#: 0 (every model equal) and 24 log-spaced values from 0.05 pp to 30 pp, equally likely a priori
#: (a log-uniform prior on σ_b: a zoo of near-ties is as plausible as one of 10 pp gaps).
SPREAD_GRID = np.r_[0.0, np.geomspace(5e-4, 0.3, 24)]


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
                    tolerance: float = TIE_TOLERANCE) -> np.ndarray:
    """P(model m is the most accurate on the pool, ties within ``tolerance`` shared) given its
    per-sample correctness ``correct`` (L × M, 0/1) on L labelled samples of a pool of
    ``population`` (None: an unbounded pool).

    A Gaussian posterior of the *paired* accuracies under a hierarchical prior, chosen by the
    calibration harness (``benchmarks/calibration.py``, issue 30):

    * the sampling covariance S of the M accuracies is the covariance of the per-sample
      correctness rows over the L labelled samples (so two models right and wrong on the same
      images differ little, however uncertain each accuracy is), pooled with ``prior_samples``
      pseudo-samples of independent correctness at the zoo's smoothed accuracy (a model right on
      20 of 20 labels is not known to be perfect), divided by L and by the finite-pool
      correction 1 − L/N;
    * the prior spreads the models' accuracies about their common mean with a standard deviation
      σ_b, log-uniform over :data:`SPREAD_GRID` (0 and 0.05–30 pp); each σ_b is weighted by the
      marginal likelihood of the M − 1 centred contrasts, N(0, σ_b² I + H S Hᵀ), and gives the
      conjugate normal posterior (mean shrunk by σ_b² (σ_b² I + S)⁻¹). A zoo whose observed
      spread is noise reads as near-ties instead of naming a winner: the Bayesian bootstrap
      this replaces stopped on a model outside the tolerance in 18 of 206 stops at 20 labels a
      round and 4 of 52 at 40, this posterior in 9 of 261 and 1 of 89
      (``benchmarks/results/calibration.md``). Its known weakness: a single
      far-ahead model is under-trusted at 50–200 labels (the normal prior expects the spread of
      the pack), which delays the stop but does not make it wrong;
    * draws of the mixture (``resamples`` in all); in each, the models within ``tolerance`` of
      the draw's best share it (:func:`tie_shares`).

    No sample: every model gets 1/M. All labels of the pool (L = N): the observed accuracies,
    ties within ``tolerance`` shared. Sums to 1. Cost O(M³ + resamples · M²).
    """
    c = check_array(correct, "correct", min_rows=0, min_cols=1)
    n, m = c.shape
    if population is not None and population < n:
        raise ValueError(f"population ({population}) is smaller than the labelled samples ({n})")
    if n == 0 or m == 1:
        return np.full(m, 1.0 / m)
    rng = np.random.default_rng(seed)
    total = np.zeros(m)
    for weight, mean, cov in _posteriors(c, prior_samples, population):
        if not np.any(cov):
            total += weight * tie_shares(mean[None, :], tolerance)[0]
            continue
        w, V = np.linalg.eigh(cov)
        root = V * np.sqrt(np.clip(w, 0.0, None))
        draws = mean + rng.standard_normal((max(16, int(round(resamples * weight))), m)) @ root.T
        total += weight * tie_shares(draws, tolerance).mean(axis=0)
    return total / total.sum()


def probability_mass_set(p_best, mass: float = 0.95) -> np.ndarray:
    """Positions of the fewest models whose p(best) sums to at least ``mass`` (most probable
    first; ties by position): the top set given the labels."""
    p = np.asarray(p_best, dtype=np.float64)
    order = np.argsort(-p, kind="stable")
    cum = np.cumsum(p[order])
    stop = int(np.searchsorted(cum, mass - 1e-12)) + 1
    return order[:min(stop, len(p))]


def committee_disagreement(predictions, weights) -> np.ndarray:
    """Weighted vote disagreement of a committee over each sample: ``1 − max_c Σ_m w_m [ŷ_m = c]``.

    ``predictions``: (M, n) class indices, one row per committee model; ``weights``: (M,) ≥ 0
    (normalised here; all-zero weights count every model equally). 0 when every weighted vote
    agrees; at most ``1 − 1/M``. Cost O(M · n).
    """
    preds = np.asarray(predictions, dtype=np.int64)
    if preds.ndim != 2:
        raise ValueError(f"predictions must be 2-D (models × samples), got shape {preds.shape}")
    w = np.asarray(weights, dtype=np.float64)
    if w.shape != (preds.shape[0],) or (w < 0).any() or not np.isfinite(w).all():
        raise ValueError("weights must be one finite non-negative weight per committee model")
    w = w / w.sum() if w.sum() > 0 else np.full(len(w), 1.0 / len(w))
    n_classes = int(preds.max()) + 1 if preds.size else 1
    share = np.zeros((preds.shape[1], n_classes))
    for m in range(preds.shape[0]):
        share[np.arange(preds.shape[1]), preds[m]] += w[m]
    return 1.0 - share.max(axis=1)


def _kmeans(Z: np.ndarray, k: int, seed: int) -> tuple[np.ndarray, np.ndarray]:
    from sklearn.cluster import KMeans

    km = KMeans(n_clusters=k, n_init=3, random_state=seed).fit(Z)
    return km.labels_, km.cluster_centers_


def cold_start(Z, k: int, seed: int = 0) -> np.ndarray:
    """``k`` row positions spread over ``Z``: k-means (k clusters, seeded) on the L2-normalised
    rows, then the row nearest each centroid (a class-balanced spread when clusters follow
    classes). Sorted; fewer when ``Z`` has fewer distinct rows. Cost O(iter · n · k · d)."""
    Z = _unit_rows(check_array(Z, "Z", min_rows=1))
    k = int(min(k, len(np.unique(Z.round(12), axis=0))))
    if k <= 0:
        return np.zeros(0, dtype=np.int64)
    assign, centers = _kmeans(Z, k, seed)
    out = []
    for c in range(k):
        members = np.flatnonzero(assign == c)
        if len(members):
            d = np.linalg.norm(Z[members] - centers[c], axis=1)
            out.append(int(members[np.argmin(d)]))
    return np.array(sorted(set(out)), dtype=np.int64)


def select_diverse(scores, Z, k: int, seed: int = 0, pool_factor: int = 5) -> np.ndarray:
    """``k`` row positions with high ``scores`` that are not near-duplicates of one another.

    The ``pool_factor · k`` best-scored rows (ties broken by a seeded shuffle; only rows scoring
    above 0 when there are k of them) are clustered into k groups by k-means on the
    L2-normalised ``Z``; each group gives its best-scored row. With fewer rows than ``k`` every
    row is returned. Sorted. Cost O(n log n + iter · 5k · k · d).
    """
    s = np.asarray(scores, dtype=np.float64)
    Z = check_array(Z, "Z", min_rows=0)
    if len(s) != len(Z):
        raise ValueError(f"scores ({len(s)}) and Z ({len(Z)}) differ in length")
    if k >= len(s):
        return np.arange(len(s), dtype=np.int64)
    if k <= 0:
        return np.zeros(0, dtype=np.int64)
    rng = np.random.default_rng(seed)
    jitter = rng.permutation(len(s))
    order = np.lexsort((jitter, -s))  # best score first, seeded tie break
    pool = order[:min(len(s), pool_factor * k)]
    if (s > 0).sum() >= k:  # rows scoring 0 (a committee in full agreement) tell nothing
        pool = pool[s[pool] > 0]
    if len(pool) <= k:
        return np.sort(pool)
    U = _unit_rows(Z[pool])
    n_distinct = len(np.unique(U.round(12), axis=0))
    if n_distinct < k:  # duplicates: k-means cannot make k groups; take the best k
        return np.sort(pool[:k])
    assign, _ = _kmeans(U, k, seed)
    picks = []
    rank = np.empty(len(pool), dtype=np.int64)
    rank[np.arange(len(pool))] = np.arange(len(pool))  # pool is ordered best first
    for c in range(k):
        members = np.flatnonzero(assign == c)
        if len(members):
            picks.append(int(pool[members[np.argmin(rank[members])]]))
    if len(picks) < k:  # an empty cluster: fill with the best rows not yet taken
        taken = set(picks)
        picks += [int(i) for i in pool if int(i) not in taken][:k - len(picks)]
    return np.sort(np.array(picks, dtype=np.int64))


@dataclass(frozen=True)
class LabelEvidence:
    """What the labels say about a zoo: per model, leave-one-out few-label kNN ``accuracy`` on the
    labelled samples and ``p_best`` (:func:`labelled_p_best`; the ``prior`` when fewer than two
    classes are labelled); ``predictions`` (M × n) of every pool sample, or None without them."""

    p_best: np.ndarray
    accuracy: np.ndarray
    n_labels: int
    predictions: np.ndarray | None


def _usable(codes: np.ndarray) -> bool:
    return len(codes) >= 2 and len(np.unique(codes)) >= 2


def label_evidence(Zs: Sequence[np.ndarray], labelled, codes, n_classes: int,
                   prior=None, resamples: int = 2000, seed: int = 0) -> LabelEvidence:
    """:class:`LabelEvidence` of M models (``Zs``: one (n, d_m) pool embedding each, rows aligned)
    given labels ``codes`` at row positions ``labelled``. ``prior``: p(best) before any label
    (default uniform). Cost O(M · n · L · d) for the predictions + O(resamples · L · M)."""
    m = len(Zs)
    labelled = np.asarray(labelled, dtype=np.int64)
    codes = np.asarray(codes, dtype=np.int64)
    prior = np.full(m, 1.0 / m) if prior is None else np.asarray(prior, dtype=np.float64)
    if not _usable(codes):
        return LabelEvidence(prior, np.full(m, np.nan), len(codes), None)
    preds = np.vstack([knn_predictions(Z, labelled, codes, n_classes) for Z in Zs])
    correct = (preds[:, labelled] == codes[None, :]).T.astype(np.float64)  # (L, M)
    pool = len(np.asarray(Zs[0]))
    return LabelEvidence(labelled_p_best(correct, resamples, seed, population=pool),
                         correct.mean(axis=0), len(codes), preds)


def _committee(p_best: np.ndarray, size: int = 10) -> np.ndarray:
    """The models that may be best: the 99% p(best) mass, at least 2 and at most ``size``."""
    members = probability_mass_set(p_best, 0.99)[:size]
    if len(members) < 2 and len(p_best) >= 2:
        members = np.argsort(-p_best, kind="stable")[:2]
    return members


def _votes(p: np.ndarray) -> np.ndarray:
    """Committee vote weights: half p(best) (normalised), half even, so that a member p(best)
    has almost ruled out still votes (else a confident leader silences every challenger)."""
    p = np.asarray(p, dtype=np.float64)
    share = p / p.sum() if p.sum() > 0 else np.full(len(p), 1.0 / len(p))
    return 0.5 * share + 0.5 / len(p)


def next_batch(Zs: Sequence[np.ndarray], evidence: LabelEvidence, excluded, k: int,
               seed: int = 0) -> np.ndarray:
    """The ``k`` pool rows to label next (sorted positions), none of them ``excluded`` (a mask).

    With labels of ≥ 2 classes: query-by-committee: the committee (the models holding 99% of
    p(best), 2 to 10 of them) votes with its few-label kNN predictions, each vote weighted by
    p(best) mixed half and half with an even weight; the rows where the weighted votes disagree
    most are spread by :func:`select_diverse` in the leader's embedding. Before that (cold
    start): :func:`cold_start` on the leader's embedding (the prior's most probable model).
    Cost O(M · n + k-means).
    """
    excluded = np.asarray(excluded, dtype=bool)
    free = np.flatnonzero(~excluded)
    if k <= 0 or not len(free):
        return np.zeros(0, dtype=np.int64)
    leader = int(np.argmax(evidence.p_best))
    Z = np.asarray(Zs[leader])[free]
    if evidence.predictions is None:
        return np.sort(free[cold_start(Z, k, seed)])
    members = _committee(evidence.p_best)
    scores = committee_disagreement(evidence.predictions[members][:, free],
                                    _votes(evidence.p_best[members]))
    return np.sort(free[select_diverse(scores, Z, k, seed)])


def change_probability(Zs: Sequence[np.ndarray], labelled, codes, n_classes: int,
                       evidence: LabelEvidence, batch, simulations: int = 16,
                       resamples: int = 500, seed: int = 0) -> float:
    """P(another round changes the leader): the labels of ``batch`` (pool rows) are drawn from the
    committee's p(best)-weighted few-label votes, p(best) is recomputed, and the share of
    ``simulations`` whose most probable model is not today's is returned. NaN without
    predictions (cold start) or an empty batch. Cost ``simulations`` × :func:`label_evidence`."""
    batch = np.asarray(batch, dtype=np.int64)
    if evidence.predictions is None or not len(batch):
        return float("nan")
    leader = int(np.argmax(evidence.p_best))
    members = _committee(evidence.p_best)
    w = evidence.p_best[members] / evidence.p_best[members].sum()
    rng = np.random.default_rng(seed)
    changed = 0
    for s in range(simulations):
        voter = members[rng.choice(len(members), size=len(batch), p=w)]
        drawn = evidence.predictions[voter, batch]
        ev = label_evidence(Zs, np.concatenate([labelled, batch]),
                            np.concatenate([codes, drawn]), n_classes, evidence.p_best,
                            resamples, seed + 1 + s)
        changed += int(np.argmax(ev.p_best) != leader)
    return changed / simulations
