"""Active model selection on the models' own predictions: the conventions and checks shared by
every sampler, and the baselines CODA (:mod:`zoorank.metrics.active.coda`) is measured against.

Pure functions on arrays (no I/O, no Ray). Conventions:

* ``P``: (M, N, K) class probabilities of M models on N images (rows sum to 1); a model's
  prediction of an image is its top-1 class (ties: the lowest index), and its accuracy on the pool
  is the share of the N images whose top-1 is the true class;
* ``labelled``: image positions whose label is known; ``labels``: their classes in ``0..K-1``;
* P(best) sums to 1 over the M models.

Baselines: uniform random order; uncertainty sampling (the entropy of the consensus);
ModelPicker (Karimi et al., "Online Active Model Selection for Pre-trained Classifiers", AISTATS
2021): a posterior over which model is best, ``w_m ∝ γ^{#correct_m}``, and the image whose label
most reduces its expected entropy, the label's law being the posterior-weighted vote of the models.
A Dawid–Skene (1979) fit on the models' votes (:func:`dawid_skene`) is the classical
agreement-only estimate of every model's confusions.
"""

from __future__ import annotations

from dataclasses import dataclass

import numpy as np
from scipy import special

from zoorank.metrics._checks import check_array

__all__ = [
    "MAX_CANDIDATES",
    "DawidSkene",
    "check_labels",
    "check_predictions",
    "consensus",
    "dawid_skene",
    "empirical_best",
    "entropy",
    "model_picker_eig",
    "model_picker_next",
    "model_picker_posterior",
    "subsample_candidates",
    "top1_votes",
    "uncertainty_scores",
]

#: candidate images scored per EIG evaluation (seeded subsample beyond it).
MAX_CANDIDATES = 4096


def check_predictions(P, name: str = "P") -> np.ndarray:
    """``P`` as float64 (M, N, K) with rows on the simplex (renormalised; ValueError naming
    ``name`` when negative, not finite or a row sums to 0)."""
    arr = check_array(P, name, ndim=3, min_rows=1, min_cols=2)
    if (arr < 0).any():
        raise ValueError(f"{name} holds negative probabilities")
    sums = arr.sum(axis=2, keepdims=True)
    if (sums <= 0).any():
        raise ValueError(f"{name} has a row of zeros (no class probability)")
    return arr / sums


def check_labels(labelled, labels, n: int, k: int) -> tuple[np.ndarray, np.ndarray]:
    """``labelled`` and ``labels`` as int64 arrays (ValueError when their lengths differ, a position
    is outside ``0..n-1`` or repeated, or a label outside ``0..k-1``)."""
    at = np.asarray(labelled, dtype=np.int64).reshape(-1)
    y = np.asarray(labels, dtype=np.int64).reshape(-1)
    if len(at) != len(y):
        raise ValueError(f"labelled ({len(at)}) and labels ({len(y)}) differ in length")
    if len(at) and (at.min() < 0 or at.max() >= n):
        raise ValueError(f"labelled positions must lie in 0..{n - 1}")
    if len(y) and (y.min() < 0 or y.max() >= k):
        raise ValueError(f"labels must lie in 0..{k - 1}")
    if len(np.unique(at)) != len(at):
        raise ValueError("labelled holds an image twice")
    return at, y


def entropy(p, axis: int = -1) -> np.ndarray:
    """Shannon entropy (nats) along ``axis``; ``0 log 0 = 0``."""
    return special.entr(np.asarray(p, dtype=np.float64)).sum(axis=axis)


def consensus(P) -> np.ndarray:
    """The zoo's consensus of every image: the mean of the models' probabilities (N, K)."""
    return check_predictions(P).mean(axis=0)


def top1_votes(P: np.ndarray) -> np.ndarray:
    """Every model's top-1 class of every image (M, N) (ties: the lowest class)."""
    return P.argmax(axis=2)


@dataclass(frozen=True)
class DawidSkene:
    """A Dawid–Skene fit: ``class_posterior`` (N, K) of every image, ``class_prior`` π (K,),
    ``confusion`` (M, K, K) rows ``θ_m[c, ·]`` = P(prediction | true class c), rows sum to 1."""

    class_posterior: np.ndarray
    class_prior: np.ndarray
    confusion: np.ndarray


def _confusion_counts(q: np.ndarray, votes: np.ndarray) -> np.ndarray:
    """Soft counts ``C[m, c, c'] = Σ_i q[i, c] [votes[m, i] = c']``: O(M · N · K)."""
    m, k = votes.shape[0], q.shape[1]
    counts = np.zeros((m, k, k))
    for j in range(m):
        cols = np.zeros((k, k))
        np.add.at(cols, votes[j], q)  # cols[c', c] += q[i, c]
        counts[j] = cols.T
    return counts


def _class_posterior(log_prior: np.ndarray, log_theta: np.ndarray, votes: np.ndarray) -> np.ndarray:
    """``q[i, c] ∝ π_c Π_m θ_m[c, votes[m, i]]`` (N, K): O(M · N · K)."""
    logq = np.tile(log_prior, (votes.shape[1], 1))
    for j in range(votes.shape[0]):
        logq += log_theta[j][:, votes[j]].T
    logq -= logq.max(axis=1, keepdims=True)
    q = np.exp(logq)
    return q / q.sum(axis=1, keepdims=True)


def dawid_skene(P, labelled=(), labels=(), iterations: int = 0,
                smoothing: float = 0.01) -> DawidSkene:
    """Dawid–Skene (1979) on the models' top-1 votes, started from the zoo's consensus.

    Start: ``q`` = :func:`consensus`, labelled rows set to their label. Each iteration is one EM
    round: M-step ``θ_m[c, c'] ∝ Σ_i q[i, c] [ŷ_m(i) = c'] + smoothing``, ``π_c ∝ Σ_i q[i, c] +
    smoothing``; E-step ``q[i, c] ∝ π_c Π_m θ_m[c, ŷ_m(i)]``, labelled rows kept at their label.
    A last M-step makes ``confusion`` and ``class_prior`` those of the returned ``q``. With
    ``iterations=0`` the confusions are the models' agreement with the consensus.
    Cost O(M · N · K) per iteration.
    """
    P = check_predictions(P)
    m, n, k = P.shape
    at, y = check_labels(labelled, labels, n, k)
    if iterations < 0 or smoothing < 0:
        raise ValueError("iterations and smoothing must be ≥ 0")
    votes = top1_votes(P)
    q = P.mean(axis=0)
    q[at] = np.eye(k)[y]

    def m_step(q):
        counts = _confusion_counts(q, votes) + smoothing
        theta = counts / counts.sum(axis=2, keepdims=True)
        prior = q.sum(axis=0) + smoothing
        return theta, prior / prior.sum()

    for _ in range(iterations):
        theta, prior = m_step(q)
        q = _class_posterior(np.log(prior), np.log(theta), votes)
        q[at] = np.eye(k)[y]
    theta, prior = m_step(q)
    return DawidSkene(q, prior, theta)


def subsample_candidates(free: np.ndarray, limit: int, seed: int) -> np.ndarray:
    """``free`` (positions), or a seeded sorted subsample of ``limit`` of them."""
    if len(free) <= limit:
        return free
    return np.sort(np.random.default_rng(seed).choice(free, size=limit, replace=False))


def uncertainty_scores(P) -> np.ndarray:
    """Uncertainty sampling's score of every image: the entropy (nats) of the consensus (N,)."""
    return entropy(consensus(P))


def empirical_best(P, labelled, labels, seed: int = 0) -> int:
    """The model with the most correct top-1 predictions on the labelled images (ties: a seeded
    uniform choice; no label: a seeded uniform choice among all): the pick of the baselines that
    keep no posterior (random, uncertainty)."""
    P = check_predictions(P)
    at, y = check_labels(labelled, labels, P.shape[1], P.shape[2])
    correct = (top1_votes(P)[:, at] == y[None, :]).sum(axis=1)
    best = np.flatnonzero(correct == correct.max())
    return int(np.random.default_rng(seed).choice(best))


def model_picker_posterior(votes, labelled, labels, gamma: float = 2.0,
                           prior=None) -> np.ndarray:
    """ModelPicker's posterior over which model is best: ``w_m ∝ prior_m γ^{#correct_m}``
    (Karimi et al. 2021; a model's weight grows by γ > 1 with each label it gets right). ``votes``:
    (M, N) top-1 classes. Cost O(M · L)."""
    votes = np.asarray(votes, dtype=np.int64)
    if gamma <= 1:
        raise ValueError(f"gamma must be > 1, got {gamma}")
    m = votes.shape[0]
    at, y = check_labels(labelled, labels, votes.shape[1], np.iinfo(np.int64).max)
    prior = np.full(m, 1.0 / m) if prior is None else np.asarray(prior, dtype=np.float64)
    logw = np.log(prior) + np.log(gamma) * (votes[:, at] == y[None, :]).sum(axis=1)
    w = np.exp(logw - logw.max())
    return w / w.sum()


def model_picker_eig(votes, posterior, candidates, n_classes: int, gamma: float = 2.0
                     ) -> np.ndarray:
    """ModelPicker's expected reduction in the entropy of its posterior from labelling each
    candidate image: the label's law is ``P(y = c) = Σ_m w_m [ŷ_m(i) = c]``; a label c multiplies
    the weight of the models predicting c by γ. 0 when every model agrees. Cost O(M · C · K)."""
    votes = np.asarray(votes, dtype=np.int64)[:, np.asarray(candidates, dtype=np.int64)]
    w = np.asarray(posterior, dtype=np.float64)
    onehot = votes[:, :, None] == np.arange(n_classes)[None, None, :]  # (M, C, K)
    p_label = np.einsum("m,mck->ck", w, onehot)  # (C, K)
    new = w[:, None, None] * np.where(onehot, gamma, 1.0)
    new /= new.sum(axis=0, keepdims=True)
    h_after = entropy(new, axis=0)  # (C, K)
    return np.clip(entropy(w) - (p_label * h_after).sum(axis=1), 0.0, None)


def model_picker_next(P, labelled=(), labels=(), gamma: float = 2.0, seed: int = 0,
                      excluded=None, max_candidates: int = MAX_CANDIDATES) -> int:
    """The image ModelPicker asks next (largest :func:`model_picker_eig`; ties: seeded shuffle);
    -1 when none is free. Cost O(M · N · K)."""
    P = check_predictions(P)
    _, n, k = P.shape
    at, y = check_labels(labelled, labels, n, k)
    votes = top1_votes(P)
    mask = np.zeros(n, dtype=bool) if excluded is None else np.asarray(excluded, dtype=bool).copy()
    mask[at] = True
    free = np.flatnonzero(~mask)
    if not len(free):
        return -1
    cand = subsample_candidates(free, max_candidates, seed)
    gain = model_picker_eig(votes, model_picker_posterior(votes, at, y, gamma), cand, k, gamma)
    order = np.lexsort((np.random.default_rng(seed).permutation(len(cand)), -gain))
    return int(cand[order[0]])
