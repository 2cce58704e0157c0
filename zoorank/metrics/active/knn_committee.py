"""Active model selection: which images to label next, and which model is best given the labels.

Pure functions on arrays (no I/O, no Ray); :mod:`zoorank.labels` orchestrates them.

Conventions:

* embeddings ``Z`` are (n, d) rows of one model over one dataset's pool, compared by cosine
  similarity (rows L2-normalised here);
* a model's *few-label prediction* of a sample is the similarity-weighted vote of its
  ``k = min(5, L - 1)`` nearest labelled samples (leave-one-out for a labelled sample itself), the
  few-label kNN probe of the label oracle shrunk to the labels at hand;
* p(best | labels) is the posterior probability that a model's leave-one-out accuracy on the
  whole pool is the best (:func:`zoorank.metrics.active.label_posterior.labelled_p_best` of the
  few-label correctness on the labelled samples).

Query-by-committee over the models that may be best (Seung et al. 1992; for model selection:
Karimi et al. AISTATS 2021, Okanovic et al. 2024 "ModelSelector"): an image is worth a label when
the committee's predictions of it disagree, each model's vote weighted by its p(best).
"""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import dataclass

import numpy as np

from zoorank.metrics._checks import check_array
from zoorank.metrics.active.label_posterior import (
    STOP_WIDENING,
    labelled_p_best_widened,
    probability_mass_set,
)

__all__ = [
    "LabelEvidence",
    "change_probability",
    "cold_start",
    "label_evidence",
    "next_batch",
    "committee_disagreement",
    "knn_predictions",
    "knn_votes",
    "random_batch",
    "uncertainty_batch",
    "select_diverse",
]

#: neighbours of the few-label kNN vote (fewer when fewer labels exist).
FEW_LABEL_K = 5


def _unit_rows(Z: np.ndarray) -> np.ndarray:
    norms = np.linalg.norm(Z, axis=1, keepdims=True)
    return Z / np.where(norms > 0, norms, 1.0)


def knn_predictions(Z, labelled: np.ndarray, labels: np.ndarray, n_classes: int,
                    k: int = FEW_LABEL_K) -> np.ndarray:
    """Few-label kNN prediction (class index) of every row of ``Z``: the argmax of
    :func:`knn_votes`.

    ``labelled``: row positions with a label; ``labels``: their class indices in ``0..n_classes-1``.
    A labelled row is predicted from the *other* labelled rows (leave-one-out), so its correctness
    is an honest estimate. Votes are cosine similarities (clipped at 0, plus a tiny constant so
    a row orthogonal to its neighbours still votes); ties go to the lowest class index.
    Needs ≥ 2 labelled rows (ValueError). Cost O(n · L · d) for L labels.
    """
    return _knn_vote_sums(Z, labelled, labels, n_classes, k).argmax(axis=1)


def _knn_vote_sums(Z, labelled, labels, n_classes: int, k: int) -> np.ndarray:
    """(n, n_classes) summed kNN vote weights of every row (see :func:`knn_predictions`)."""
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
    return votes


def knn_votes(Z, labelled: np.ndarray, labels: np.ndarray, n_classes: int,
              k: int = FEW_LABEL_K) -> np.ndarray:
    """(n, n_classes) share of the similarity-weighted kNN vote of every row of ``Z`` for each
    class (rows sum to 1), the vote :func:`knn_predictions` takes the argmax of."""
    votes = _knn_vote_sums(Z, labelled, labels, n_classes, k)
    return votes / votes.sum(axis=1, keepdims=True)


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
    classes are labelled); ``predictions`` (M × n) of every pool sample, or None without them;
    ``p_best_stop``: p(best) with the posterior widened for the stopping rule's repeated looks
    (:data:`~zoorank.metrics.active.label_posterior.STOP_WIDENING`), None where no such posterior
    exists (the rule then reads ``p_best``)."""

    p_best: np.ndarray
    accuracy: np.ndarray
    n_labels: int
    predictions: np.ndarray | None
    p_best_stop: np.ndarray | None = None

    def stop_p_best(self) -> float:
        """The p(best) the stopping rule compares with its target: the leader's (by ``p_best``)
        under the widened posterior."""
        leader = int(np.argmax(self.p_best))
        p = self.p_best if self.p_best_stop is None else self.p_best_stop
        return float(p[leader])


def _usable(codes: np.ndarray) -> bool:
    return len(codes) >= 2 and len(np.unique(codes)) >= 2


def label_evidence(Zs: Sequence[np.ndarray], labelled, codes, n_classes: int,
                   prior=None, resamples: int = 2000, seed: int = 0,
                   stop: bool = True) -> LabelEvidence:
    """:class:`LabelEvidence` of M models (``Zs``: one (n, d_m) pool embedding each, rows aligned)
    given labels ``codes`` at row positions ``labelled``. ``prior``: p(best) before any label
    (default uniform); ``stop``: also the stopping rule's widened p(best). Cost O(M · n · L · d)
    for the predictions + O(resamples · L · M)."""
    m = len(Zs)
    labelled = np.asarray(labelled, dtype=np.int64)
    codes = np.asarray(codes, dtype=np.int64)
    prior = np.full(m, 1.0 / m) if prior is None else np.asarray(prior, dtype=np.float64)
    if not _usable(codes):
        return LabelEvidence(prior, np.full(m, np.nan), len(codes), None)
    preds = np.vstack([knn_predictions(Z, labelled, codes, n_classes) for Z in Zs])
    correct = (preds[:, labelled] == codes[None, :]).T.astype(np.float64)  # (L, M)
    pool = len(np.asarray(Zs[0]))
    p_best, *widened = labelled_p_best_widened(correct, (1.0, STOP_WIDENING)[: 2 if stop else 1], resamples,
                                               seed, population=pool)
    return LabelEvidence(p_best, correct.mean(axis=0), len(codes), preds,
                         widened[0] if widened else None)


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


def random_batch(excluded, k: int, seed: int = 0) -> np.ndarray:
    """``k`` pool rows drawn uniformly (seeded) from those not ``excluded`` (a mask); sorted."""
    free = np.flatnonzero(~np.asarray(excluded, dtype=bool))
    rng = np.random.default_rng(seed)
    return np.sort(rng.choice(free, size=min(max(k, 0), len(free)), replace=False))


def uncertainty_batch(Zs: Sequence[np.ndarray], labelled, codes, n_classes: int, excluded,
                      k: int, seed: int = 0) -> np.ndarray:
    """Uncertainty sampling (Lewis & Gale 1994) over a zoo: the ``k`` free rows whose consensus
    few-label kNN vote (the mean over the M models of :func:`knn_votes`) has the largest entropy
    (ties: a seeded shuffle); sorted. Before labels of two classes exist: :func:`cold_start` on
    the first model's embedding. Cost O(M · n · L · d)."""
    excluded = np.asarray(excluded, dtype=bool)
    free = np.flatnonzero(~excluded)
    codes = np.asarray(codes, dtype=np.int64)
    if k <= 0 or not len(free):
        return np.zeros(0, dtype=np.int64)
    if not _usable(codes):
        return np.sort(free[cold_start(np.asarray(Zs[0])[free], k, seed)])
    mean = sum(knn_votes(Z, labelled, codes, n_classes) for Z in Zs) / len(Zs)
    p = np.clip(mean[free], 1e-12, 1.0)
    scores = -(p * np.log(p)).sum(axis=1)
    jitter = np.random.default_rng(seed).permutation(len(free))
    return np.sort(free[np.lexsort((jitter, -scores))[:k]])


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
                            resamples, seed + 1 + s, stop=False)
        changed += int(np.argmax(ev.p_best) != leader)
    return changed / simulations
