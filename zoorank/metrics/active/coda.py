"""CODA: which image to label next, and which classifier is best given the labels so far, from the
models' own predictions on every image.

Pure functions on arrays (no I/O, no Ray), with the conventions of
:mod:`zoorank.metrics.active.model_selection`:

* ``P``: (M, N, K) class probabilities of M models on N images (rows sum to 1); a model's
  prediction of an image is its top-1 class (ties: the lowest index), and its accuracy on the pool
  is the share of the N images whose top-1 is the true class;
* ``labelled``: image positions whose label is known; ``labels``: their classes in ``0..K-1``;
* P(best) sums to 1 over the M models.

CODA (Kay, Van Horn, Maji, Sheldon, Beery: "Consensus-Driven Active Model Selection", ICCV 2025,
arXiv 2507.23771), as the paper states it and as the authors' released code (github.com/justinkay/
coda, ``coda/coda.py``, default settings) computes it:

1. **Consensus.** The zoo's consensus of an image is the mean of the models' probabilities; its
   top-1 is the image's pseudo-label.
2. **Prior.** Each model m has a confusion matrix ``θ_m[c, ·]`` = P(prediction | true class c), each
   row Dirichlet: ``alpha[m] = s · (β + α · M̂_m)``. ``β`` is 1 on the diagonal and ``1/(K−1)``
   off it; ``M̂_m[c, ·]`` is the mean of m's class probabilities over the images pseudo-labelled
   c (:func:`consensus_confusion`); α weighs the consensus (:data:`STRENGTH`, the authors' 0.1,
   their ``1 − alpha`` with ``alpha = 0.9``) and s scales the whole prior (:data:`SCALE`, the
   authors' ``multiplier`` 2) (:func:`coda_prior`).
3. **Labels.** A label ``y`` of image i adds η (:data:`LABEL_WEIGHT`, the authors'
   ``learning_rate`` 0.01) to ``alpha[m, y, ŷ_m(i)]`` for every model m (:func:`coda_posterior`):
   ``alpha = s · (β + α · M̂) + η · counts``.
4. **Classes.** ``π̂(c | i) ∝ Σ_m Σ_s alpha[m, c, s] P_m(s | i)`` and the class marginal π̂ is
   its mean over the pool, re-estimated after every label (:func:`coda_class_posterior`).
5. **P(best).** Per class c, each model's accuracy on c is ``θ_m[c, c] ~ Beta(alpha[m, c, c],
   Σ_s alpha[m, c, s] − alpha[m, c, c])`` and ``P(m best on c) = ∫ f_{m,c} Π_{l≠m} F_{l,c}``;
   CODA's score is ``Σ_c π̂_c P(m best on c)`` (:func:`coda_p_best`). It is a class mixture: a
   model that is best on a few classes scores high whatever its accuracy, so it is **not** the
   probability of being the most accurate model (with every label of a 1,000-image pool the most
   accurate of 31 CIFAR-10 nets scores 0.149). zoorank uses it to choose images only; the pick
   and p(best | labels) come from :mod:`zoorank.metrics.active.label_posterior`.
6. **Acquisition.** ``EIG(i) = H(score) − Σ_c π̂(c | i) H(score^c)``, score^c after a hypothetical
   label c on i that adds the look-ahead ``w`` (:data:`LOOKAHEAD`, the authors' fixed 1.0: at
   η = 0.01 a hundred labels' worth) with π̂ held (:func:`coda_eig`), over the images some model
   disagrees on (the authors' candidate filter); the image of largest EIG is asked next.

The defaults are the authors' (github.com/justinkay/coda, ``main.py`` and ``coda/coda.py``:
``multiplier`` 2, ``alpha`` 0.9, ``learning_rate`` 0.01, a hypothetical update of 1.0). zoorank's
earlier parameterisation, a temperature T with a label adding 1 (``alpha = (β + α M̂) / T +
counts``, look-ahead 1), is ``scale = 1 / T``, ``label_weight = 1``, ``lookahead = 1`` here: its
T = 0.005 held 100 times the authors' concentrations, and its default T = 0.05 was ``scale =
20``, ``label_weight = 1``.

The P(best) integrals and the information gain (with the pieces a round keeps across its picks)
are in :mod:`zoorank.metrics.active.coda_eig`; the bias-corrected acquisition (Active Testing's draws
and weights, an option) is in :mod:`zoorank.metrics.active.coda_weighted`.

Differences, stated: a batch of k (``zoorank ask`` asks rounds) is chosen greedily, each pick's
label assumed to be its most probable class ("kriging believer", adding η as a label would); the
paper asks one image at a time. The P(best) integrals run on CDF increments over a grid spanning
each class's densities, not on a fixed [0, 1] grid.

The checks, conventions and baselines shared with the other samplers:
:mod:`zoorank.metrics.active.model_selection`.
"""

from __future__ import annotations

from dataclasses import dataclass

import numpy as np

from zoorank.metrics.active.coda_eig import GRID, _EigState, _rows, coda_eig, p_best_from_beta
from zoorank.metrics.active.model_selection import (
    MAX_CANDIDATES,
    check_labels,
    check_predictions,
    entropy,
    subsample_candidates,
    top1_votes,
)

__all__ = [
    "EXPLORE",
    "GRID",
    "LABEL_WEIGHT",
    "LOOKAHEAD",
    "SCALE",
    "STRENGTH",
    "CodaPrior",
    "coda_belief",
    "coda_class_posterior",
    "coda_draw_labels",
    "coda_eig",
    "coda_next",
    "coda_p_best",
    "coda_posterior",
    "coda_prior",
    "coda_row_p_best",
    "consensus_confusion",
    "diagonal_base",
    "p_best_from_beta",
]

#: classes up to which the class posterior is one ``einsum`` rather than a matrix product per
#: model (small products pay BLAS's threading: 0.26 s against 0.03 s at M = 32, K = 10,
#: N = 10,000 on 2 shared cores; benchmarks/results/bench_coda.md).
_EINSUM_K = 32


#: CODA's prior weight on the consensus confusions, α (the authors' code: 1 − alpha, alpha 0.9).
STRENGTH = 0.1
#: s, the scale of CODA's prior ``s · (β + α M̂)`` (the authors' ``multiplier``, default 2): each
#: prior row holds ``s · (2 + α)`` = 4.2 pseudo-counts.
SCALE = 2.0
#: η, what one label adds to its cell of every model's Dirichlet (the authors' ``learning_rate``,
#: default 0.01): a prior row weighs 420 labels of its class.
LABEL_WEIGHT = 0.01
#: w, what the EIG's hypothetical label adds (the authors' fixed 1.0: a hundred labels' worth at
#: η = 0.01) (:func:`coda_eig`).
LOOKAHEAD = 1.0


@dataclass(frozen=True)
class CodaPrior:
    """CODA's prior: Dirichlet parameters ``alpha`` (M, K, K) of every model's confusion rows,
    the models' class probabilities ``predictions`` (M, N, K) and top-1 ``votes`` (M, N),
    ``class_prior`` π̂ (K,), the class marginal before any label (:func:`coda_class_posterior`),
    and ``label_weight`` η, what each label adds to its Dirichlet cell (:func:`coda_posterior`)."""

    alpha: np.ndarray
    predictions: np.ndarray
    votes: np.ndarray
    class_prior: np.ndarray
    label_weight: float = LABEL_WEIGHT


#: CODA's exploration share ε (:func:`coda_next`): the chance that a pick is a uniform draw
#: among the free images rather than the image of largest EIG. 0: plain CODA. A pre-registered
#: choice among 0, 0.25, 0.5 and 1 on the shift benchmark's development domains picked 1, which
#: then needed 55 more labels than CODA on the UvA nets; so 0 stays
#: (benchmarks/results/coda_labels.md, section 6).
EXPLORE = 0.0
#: the entropy word that keeps the exploration draws apart from the tie-breaking shuffle of the
#: same ``seed``.
_EXPLORE_STREAM = 0xE5


def diagonal_base(k: int) -> np.ndarray:
    """CODA's ``β`` (K, K): 1 on the diagonal, ``1 / (K − 1)`` off it (each row sums to 2)."""
    if k < 2:
        raise ValueError(f"need at least 2 classes, got {k}")
    base = np.full((k, k), 1.0 / (k - 1))
    np.fill_diagonal(base, 1.0)
    return base


def consensus_confusion(P) -> np.ndarray:
    """``M̂`` (M, K, K): row c of model m is the mean of m's class probabilities over the images
    whose consensus top-1 (:func:`consensus`, ties: the lowest class) is c; a class no image's
    consensus picks gets a row of zeros. Cost O(M · N · K)."""
    return _confusion(check_predictions(P))


def _confusion(P: np.ndarray, recheck: bool = False) -> np.ndarray:
    """:func:`consensus_confusion` of checked ``P``; ``recheck``: of ``check_predictions(P)``,
    renormalised one model at a time (the same values, without a second (M, N, K) array)."""
    m, n, k = P.shape

    def model(j: int) -> np.ndarray:
        return P[j] / P[j].sum(axis=1, keepdims=True) if recheck else P[j]

    total = np.zeros((n, k))
    for j in range(m):  # the mean over the models, summed in their order as np.mean does
        total += model(j)
    pseudo = (total / m).argmax(axis=1)
    out = np.zeros((m, k, k))
    for j in range(m):
        np.add.at(out[j], pseudo, model(j))
    sums = out.sum(axis=2, keepdims=True)
    return out / np.where(sums > 0, sums, 1.0)


def coda_class_posterior(alpha, P) -> tuple[np.ndarray, np.ndarray]:
    """CODA's class estimates from Dirichlet parameters ``alpha`` (M, K, K) and predictions ``P``
    (M, N, K): ``π̂(c | i) ∝ Σ_m Σ_s alpha[m, c, s] P[m, i, s]`` (N, K), and the class marginal
    π̂ (K,), their mean over the N images. Cost O(M · N · K²) (one matrix product per model)."""
    return _normalised(_class_scores(alpha, P))


def _class_scores(alpha, P) -> np.ndarray:
    """``Σ_m P[m] alpha[m]ᵀ`` (N, K): :func:`coda_class_posterior` before normalising. Beyond
    :data:`_EINSUM_K` classes its sums run in BLAS's order (the einsum's to ~1e-16)."""
    alpha = np.asarray(alpha, dtype=np.float64)
    P = np.asarray(P, dtype=np.float64)
    if P.shape[2] <= _EINSUM_K:
        return np.einsum("mcs,mns->nc", alpha, P)
    q = np.zeros(P.shape[1:])
    for j in range(len(P)):
        q += P[j] @ alpha[j].T
    return q


def _normalised(scores: np.ndarray) -> tuple[np.ndarray, np.ndarray]:
    """π̂(c | i) (N, K) and π̂ (K,) from :func:`_class_scores`."""
    q = scores / np.clip(scores.sum(axis=1, keepdims=True), 1e-300, None)
    return q, q.mean(axis=0)


def coda_prior(P, strength: float = STRENGTH, scale: float = SCALE,
               label_weight: float = LABEL_WEIGHT) -> CodaPrior:
    """CODA's consensus-initialised prior: ``alpha[m] = scale · (β + strength · M̂_m)``
    (:func:`diagonal_base`, :func:`consensus_confusion`), each label then adding
    ``label_weight`` (:func:`coda_posterior`).

    ``strength``: α, the weight of the consensus confusions against the diagonal base;
    ``scale``: s, the prior's concentration (each row holds ``scale · (2 + strength)``
    pseudo-counts); ``label_weight``: η, a label's count. The defaults are the authors' (s = 2,
    α = 0.1, η = 0.01: a prior row weighs 420 labels). Only the ratio s / η sets how fast labels
    overturn the prior; the scale itself sets how wide each Beta of P(best) is. Cost
    O(M · N · K²).
    """
    if not (strength >= 0 and scale > 0 and label_weight > 0):
        raise ValueError(f"strength must be ≥ 0, scale and label_weight > 0, got {strength}, "
                         f"{scale}, {label_weight}")
    return _prior_and_scores(P, strength, scale, label_weight)[0]


def _prior_and_scores(P, strength: float = STRENGTH, scale: float = SCALE,
                      label_weight: float = LABEL_WEIGHT, in_place: bool = False
                      ) -> tuple[CodaPrior, np.ndarray]:
    """:func:`coda_prior` and its class scores (N, K) (:func:`_class_scores`). ``in_place``:
    ``P`` is a checked array of the caller's own, renormalised in place (as
    :func:`check_predictions` would)."""
    if in_place:
        np.divide(P, P.sum(axis=2, keepdims=True), out=P)
    else:
        P = check_predictions(P)
    alpha = scale * (diagonal_base(P.shape[2])[None] + strength * _confusion(P, recheck=True))
    scores = _class_scores(alpha, P)
    return CodaPrior(alpha, P, top1_votes(P), _normalised(scores)[1], float(label_weight)), scores


def _add_label(scores: np.ndarray, prior: CodaPrior, i: int, c: int) -> None:
    """``scores`` (:func:`_class_scores`) after a label ``c`` of image ``i`` (in place): column c
    gains η times every model's probabilities of its vote on i. O(M · N)."""
    models = np.arange(len(prior.votes))
    scores[:, c] += prior.label_weight * prior.predictions[models, :, prior.votes[:, i]].sum(axis=0)


def coda_posterior(prior: CodaPrior, labelled=(), labels=(), weights=None) -> np.ndarray:
    """Dirichlet parameters (M, K, K) given the labels: each label ``y`` of image i adds η
    (``prior.label_weight``) times 1 (or its entry of ``weights``, one per label, ≥ 0:
    :func:`~zoorank.metrics.active.coda_weighted.importance_weights`) to ``alpha[m, y, ŷ_m(i)]`` for every
    model m. Cost O(M · L)."""
    m, k, _ = prior.alpha.shape
    at, y = check_labels(labelled, labels, prior.votes.shape[1], k)
    w = np.ones(len(at)) if weights is None else np.asarray(weights, dtype=np.float64)
    if w.shape != (len(at),) or not np.all(np.isfinite(w)) or (w < 0).any():
        raise ValueError(f"weights must be {len(at)} finite values ≥ 0, one per label")
    alpha = prior.alpha.copy()
    for j in range(m):
        np.add.at(alpha[j], (y, prior.votes[j, at]), prior.label_weight * w)
    return alpha


def coda_row_p_best(alpha, grid: int = GRID) -> np.ndarray:
    """P(model m is best on class c) (K, M): per class, :func:`p_best_from_beta` of the
    Beta marginals ``Beta(alpha[m, c, c], Σ_s alpha[m, c, s] − alpha[m, c, c])``."""
    a, b = _rows(np.asarray(alpha, dtype=np.float64))
    return p_best_from_beta(a, b, grid)


def coda_p_best(alpha, class_prior, grid: int = GRID) -> np.ndarray:
    """CODA's class-mix score (M,), which the paper calls P(best): ``Σ_c π̂_c P(m is best on
    class c)`` (:func:`coda_row_p_best`), the class marginal ``class_prior`` mixing the per-class
    answers. Not the probability of being the most accurate model (module docstring, step 5).
    Cost O(K · M · grid)."""
    pi = np.asarray(class_prior, dtype=np.float64)
    return pi @ coda_row_p_best(alpha, grid)


def checked_with_mask(P, labelled, labels, excluded):
    """``P`` checked, the labels' positions and classes checked, and the mask (N,) of images not
    to ask: ``excluded`` (a mask, copied) or none, plus the labelled ones."""
    P = check_predictions(P)
    _, n, kk = P.shape
    at, y = check_labels(labelled, labels, n, kk)
    mask = np.zeros(n, dtype=bool) if excluded is None else np.asarray(excluded, dtype=bool).copy()
    if mask.shape != (n,):
        raise ValueError(f"excluded must be a mask over the {n} images")
    mask[at] = True
    return P, at, y, mask


def coda_next(P, labelled=(), labels=(), excluded=None, k: int = 1, seed: int = 0,
              prior: CodaPrior | None = None, max_candidates: int = MAX_CANDIDATES,
              grid: int = GRID, lookahead: float = LOOKAHEAD, explore: float = EXPLORE
              ) -> np.ndarray:
    """The ``k`` images (sorted positions) CODA asks next, none ``excluded`` (a mask) or labelled.

    One at a time by largest :func:`coda_eig` (ties: a seeded shuffle), each pick's label then
    assumed to be its most probable class under π̂(c | i) for the next pick. Candidates: every
    free image, or a seeded subsample of ``max_candidates``. When no free image splits the models
    (every EIG is 0), the rest are the free images of highest consensus entropy. ``prior``: a
    :func:`coda_prior` to reuse (default: built here); ``lookahead``: :func:`coda_eig`'s.
    ``explore`` (ε in [0, 1]): each pick is, with probability ε, a uniform draw among the free
    images instead (coin and draw from their own generator of ``seed``; ε = 0 draws nothing and
    is plain CODA, ε = 1 is uniform sampling without EIG). Cost: one O(M · N · K²) product for
    the class posterior, each label and pick then adding its class's column (O(M · N)); one
    :func:`coda_eig` set-up (O(K · M · grid)) whose per-class pieces are kept across the picks, a
    pick's assumed label recomputing its class's only, and per greedy pick O(U · M · grid) for the
    U (class, who-predicted-it) pairs not met before (benchmarks/results/bench_coda.md).
    """
    if not 0.0 <= explore <= 1.0:
        raise ValueError(f"explore must be in [0, 1], got {explore}")
    if not lookahead > 0:
        raise ValueError(f"lookahead must be > 0, got {lookahead}")
    P, at, y, mask = checked_with_mask(P, labelled, labels, excluded)
    consensus = P.mean(axis=0)  # (N, K), before P becomes the prior's (one copy of P)
    if prior is None:  # the prior's class scores, plus each label's column: O(L · M · N)
        prior, scores_q = _prior_and_scores(P, in_place=True)
        for i, c in zip(at, y):
            _add_label(scores_q, prior, i, c)
        alpha = coda_posterior(prior, at, y)
    else:
        alpha = coda_posterior(prior, at, y)
        scores_q = _class_scores(alpha, prior.predictions)
    rng = np.random.default_rng(seed)
    explorer = np.random.default_rng([seed, _EXPLORE_STREAM]) if explore > 0 else None
    state = None
    models = np.arange(len(alpha))
    picks: list[int] = []
    for step in range(int(k)):
        free = np.flatnonzero(~mask)
        if not len(free):
            break
        q, pi = _normalised(scores_q)
        if explorer is not None and explorer.random() < explore:
            i = int(free[explorer.integers(len(free))])
        else:
            cand = subsample_candidates(free, max_candidates, seed + step)
            state = _EigState(alpha, grid, lookahead) if state is None else state
            gain = state.eig(pi, prior.votes, cand, q[cand])
            scores = gain if gain.max() > 0 else entropy(consensus[cand])
            order = np.lexsort((rng.permutation(len(cand)), -scores))
            i = int(cand[order[0]])
        picks.append(i)
        mask[i] = True
        c = int(q[i].argmax())
        alpha[models, c, prior.votes[:, i]] += prior.label_weight
        _add_label(scores_q, prior, i, c)
        if state is not None:
            state.relabel(alpha, c)
    return np.sort(np.asarray(picks, dtype=np.int64))


def coda_belief(prior: CodaPrior, labelled=(), labels=(), grid: int = GRID, weights=None
                ) -> tuple[np.ndarray, np.ndarray]:
    """CODA's class-mix score (M,) (:func:`coda_p_best`, the paper's P(best)) given the labels
    (each counting η times its entry of ``weights``, default 1), and its Dirichlet parameters
    (M, K, K): the class marginal π̂ re-estimated from the posterior
    (:func:`coda_class_posterior`)."""
    alpha = coda_posterior(prior, labelled, labels, weights)
    _, pi = coda_class_posterior(alpha, prior.predictions)
    return coda_p_best(alpha, pi, grid), alpha


def coda_draw_labels(prior: CodaPrior, labelled, labels, batch, draws: int = 16, seed: int = 0
                     ) -> np.ndarray:
    """(draws, B) labels of the ``batch`` images, each drawn from CODA's class estimate
    π̂(c | i) (:func:`coda_class_posterior`) given the labels so far: the heads' answer to "what
    would the labeller say", for simulating a round. Cost O(M · N · K²) + O(draws · B · K)."""
    batch = np.asarray(batch, dtype=np.int64)
    q, _ = coda_class_posterior(coda_posterior(prior, labelled, labels), prior.predictions)
    cum = np.cumsum(q[batch], axis=1)
    u = np.random.default_rng(seed).random((int(draws), len(batch), 1))
    return np.minimum((u > cum[None]).sum(axis=2), q.shape[1] - 1)
