"""CODA's bias-corrected acquisition (an option, not the paper's and not ``zoorank ask``'s
default): which image to draw next, and the weight its label carries.

CODA's update counts every label as a random draw from its class, but EIG asks the images the
models disagree on. Following Active Testing (Kossen, Farquhar, Gal, Rainforth, ICML 2021),
:func:`coda_sample_next` draws the next image from ``q = (1 − ε) · EIG / ΣEIG + ε / F`` over the F
free images (EIG over a seeded subsample of candidates, 0 outside it; q is the draw's probability
given that subsample), and each label enters the Dirichlet counts with its LURE weight
(:func:`importance_weights`, normalised to mean 1) times η instead of η (``weights`` of
:func:`~zoorank.metrics.active.coda.coda_posterior` / :func:`~zoorank.metrics.active.coda.coda_belief`).
ε = 1 is random sampling with CODA's pick, every weight exactly 1.

Conventions (``P``, ``labelled``, ``labels``): :mod:`zoorank.metrics.active.coda`. Measured in
``benchmarks/results/coda_labels.md`` section 5.
"""

from __future__ import annotations

import numpy as np

from zoorank.metrics.active.coda import (
    GRID,
    LOOKAHEAD,
    CodaPrior,
    checked_with_mask,
    coda_class_posterior,
    coda_eig,
    coda_posterior,
    coda_prior,
)
from zoorank.metrics.active.model_selection import MAX_CANDIDATES, subsample_candidates

__all__ = ["coda_proposal", "coda_sample_next", "importance_weights"]


def importance_weights(q, n: int, normalise: bool = True) -> np.ndarray:
    """LURE weights (Farquhar, Gal, Rainforth, "On statistical bias in active learning", ICLR 2021;
    the estimator of Active Testing) of L labels drawn one at a time without replacement from a
    pool of ``n``, the l-th (1-based) with probability ``q[l − 1]`` among the n − l + 1 images then
    free: ``v_l = 1 + (n − L) / (n − l) · (1 / ((n − l + 1) q_l) − 1)``, so that
    ``Σ_l v_l f(i_l) / L`` is an unbiased estimate of f's pool mean. Every ``v_l`` is ≥ 0 and
    exactly 1 under uniform draws; all are 1 when the whole pool is labelled (L = n).
    ``normalise``: divided by their mean (self-normalised; their sum is then L). Cost O(L)."""
    q = np.asarray(q, dtype=np.float64)
    big = len(q)
    if big > n or not np.all((q > 0) & (q <= 1)):
        raise ValueError(f"q must hold at most n = {n} probabilities in (0, 1], got {q}")
    if big == 0 or big == n:
        return np.ones(big)
    step = np.arange(1, big + 1)
    v = 1.0 + (n - big) / (n - step) * (1.0 / ((n - step + 1) * q) - 1.0)
    v = np.clip(v, 0.0, None)  # ≥ 0 in exact arithmetic; rounding only
    return v / v.mean() if normalise and v.sum() > 0 else v


def coda_proposal(P, labelled=(), labels=(), weights=None, excluded=None,
                  epsilon: float = 0.5, seed: int = 0, prior: CodaPrior | None = None,
                  max_candidates: int = MAX_CANDIDATES, grid: int = GRID,
                  lookahead: float = LOOKAHEAD
                  ) -> tuple[np.ndarray, np.ndarray]:
    """The free images (positions, F) and the probability q (F,) of drawing each next:
    ``q = (1 − ε) · EIG / ΣEIG + ε / F``, EIG (:func:`~zoorank.metrics.active.coda.coda_eig`, under the
    posterior with the labels' ``weights``) on a seeded subsample of ``max_candidates`` free images
    and 0 off it; ``q = 1 / F`` when every EIG is 0 or ε = 1. Free: neither labelled nor ``excluded``."""
    if not 0 <= epsilon <= 1:
        raise ValueError(f"epsilon must be in [0, 1], got {epsilon}")
    P, at, y, mask = checked_with_mask(P, labelled, labels, excluded)
    prior = coda_prior(P) if prior is None else prior
    free = np.flatnonzero(~mask)
    uniform = np.full(len(free), 1.0 / max(len(free), 1))
    if not len(free) or epsilon == 1:
        return free, uniform
    alpha = coda_posterior(prior, at, y, weights)
    cand = subsample_candidates(free, max_candidates, seed)
    post, pi = coda_class_posterior(alpha, prior.predictions)
    gain = np.zeros(len(free))
    gain[np.searchsorted(free, cand)] = coda_eig(alpha, pi, prior.votes, cand, post[cand], grid,
                                                 lookahead)
    if not gain.sum() > 0:
        return free, uniform
    return free, (1.0 - epsilon) * gain / gain.sum() + epsilon * uniform


def coda_sample_next(P, labelled=(), labels=(), weights=None, excluded=None,
                     epsilon: float = 0.5, seed: int = 0, prior: CodaPrior | None = None,
                     max_candidates: int = MAX_CANDIDATES, grid: int = GRID,
                     lookahead: float = LOOKAHEAD) -> tuple[int, float]:
    """The next image (position) of the bias-corrected acquisition, drawn from
    :func:`coda_proposal`'s q by a generator seeded ``(seed, 1)`` (a stream apart from the
    candidates' subsample), and its q (the input of :func:`importance_weights`). Raises when no
    image is free."""
    free, q = coda_proposal(P, labelled, labels, weights, excluded, epsilon, seed, prior,
                            max_candidates, grid, lookahead)
    if not len(free):
        raise ValueError("no free image to ask")
    j = int(np.random.default_rng([seed, 1]).choice(len(free), p=q))
    return int(free[j]), float(q[j])
