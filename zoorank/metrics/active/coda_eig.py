"""CODA's P(best) integrals and its expected information gain, on arrays (no I/O, no Ray): which of
M independent Beta variables is largest (:func:`p_best_from_beta`), and how much a label of an
image is expected to sharpen CODA's P(best) (:func:`coda_eig`), with the per-class pieces that
:func:`zoorank.metrics.active.coda.coda_next` keeps across the picks of a round (:class:`_EigState`).

Conventions: :mod:`zoorank.metrics.active.coda` (Dirichlet parameters ``alpha`` (M, K, K) of every
model's confusion rows; P(best) sums to 1 over the M models). The integrals run by the midpoint
rule on CDF increments over a grid spanning the densities' mass, not on a fixed [0, 1] grid.
"""

from __future__ import annotations

import numpy as np
from scipy import special, stats

from zoorank.metrics.active.model_selection import entropy

__all__ = ["GRID", "coda_eig", "p_best_from_beta"]

#: grid points of the P(best) integral.
GRID = 256
#: float64 values of the (combos, M, G + 1) CDF blocks :func:`coda_eig` evaluates at once (32 MB).
_CHUNK = 1 << 22

def _span(a: np.ndarray, b: np.ndarray) -> tuple[np.ndarray, np.ndarray]:
    """Grid ends (...,) covering every Beta(a, b) of the last axis: means ± 12 standard
    deviations, within [0, 1]."""
    mean = a / (a + b)
    sd = np.sqrt(a * b / ((a + b) ** 2 * (a + b + 1)))
    lo = np.clip((mean - 12 * sd).min(axis=-1), 0.0, 1.0)
    hi = np.clip((mean + 12 * sd).max(axis=-1), 0.0, 1.0)
    narrow = hi - lo < 1e-9
    lo = np.where(narrow, np.maximum(0.0, lo - 1e-6), lo)
    hi = np.where(narrow, np.minimum(1.0, hi + 1e-6), hi)
    return lo, hi


def _p_best_cdf(cdf: np.ndarray) -> np.ndarray:
    """P(best) (..., M) from CDFs (..., M, G + 1) on shared edges: per cell, the mass ``ΔF_m``
    times ``Π_{l≠m} F_l`` at the cell's midpoint, summed and renormalised."""
    mass = np.diff(cdf, axis=-1)
    log_mid = np.log(np.clip(0.5 * (cdf[..., 1:] + cdf[..., :-1]), 1e-300, None))
    others = log_mid.sum(axis=-2, keepdims=True) - log_mid
    out = (mass * np.exp(others)).sum(axis=-1)
    total = out.sum(axis=-1, keepdims=True)
    return out / np.where(total > 0, total, 1.0)


def p_best_from_beta(a, b, grid: int = GRID) -> np.ndarray:
    """``P(best = m) = ∫ f_m(x) Π_{l≠m} F_l(x) dx`` for independent Beta(a_m, b_m) variables.

    ``a``, ``b``: (..., M); each leading index is its own problem. The integral runs on ``grid``
    cells spanning its densities' mass (means ± 12 standard deviations, within [0, 1]), by the
    midpoint rule on CDF increments, renormalised. Identical (a, b) get equal shares exactly.
    Cost O(... · M · grid).
    """
    a = np.asarray(a, dtype=np.float64)
    b = np.asarray(b, dtype=np.float64)
    lo, hi = _span(a, b)
    edges = lo[..., None] + (hi - lo)[..., None] * np.linspace(0.0, 1.0, grid + 1)
    cdf = stats.beta.cdf(edges[..., None, :], a[..., None], b[..., None])
    cdf[..., 0], cdf[..., -1] = 0.0, 1.0
    return _p_best_cdf(cdf)


def _rows(alpha: np.ndarray, classes=slice(None)) -> tuple[np.ndarray, np.ndarray]:
    """Beta parameters (K, M) of every model's per-class accuracy ``θ_m[c, c]`` (of ``classes``
    only, when given)."""
    diag = np.diagonal(alpha, axis1=1, axis2=2)[:, classes]  # (M, K)
    return diag.T, (alpha[:, classes].sum(axis=2) - diag).T


def coda_eig(alpha, class_prior, votes, candidates, item_posterior, grid: int = GRID,
             lookahead: float = 1.0) -> np.ndarray:
    """CODA's expected information gain on P(best) of labelling each of ``candidates`` (image
    positions), given Dirichlet parameters ``alpha`` (M, K, K), the class marginal
    ``class_prior`` π̂, the models' ``votes`` (M, N) and ``item_posterior`` π̂(c | i) of the
    candidates (C, K) (:func:`coda_class_posterior`).

    ``EIG(i) = H(PBest) − Σ_c π̂(c | i) H(PBest^c)``: a label c adds ``lookahead`` (in the
    Dirichlet's own units: the authors' 1.0, a hundred real labels of η = 0.01) to row c of every model
    (on the diagonal where the model predicted c), which moves only that class's P(best), so
    ``PBest^c = PBest + π̂_c (P^c(best on c) − P(best on c))`` with π̂ held. The answer depends on
    (c, the models predicting c) only; each distinct one is evaluated once. Images every model
    agrees on get 0 (they are not candidates in the paper's code either). Cost O(K · M · grid +
    U · M · grid) for U distinct (class, who-predicted-it) pairs, memory O(K · M · grid) (the
    pairs' CDFs in blocks of :data:`_CHUNK` values).
    """
    if not lookahead > 0:
        raise ValueError(f"lookahead must be > 0, got {lookahead}")
    state = _EigState(np.asarray(alpha, dtype=np.float64), grid, lookahead)
    return state.eig(class_prior, votes, candidates, item_posterior)


class _EigState:
    """:func:`coda_eig`'s per-class pieces, kept across :func:`coda_next`'s picks: a label of class
    c changes row c of every model's alpha only, hence class c's grid, CDFs and P(best on c) only,
    and the answer of a (class, who-predicted-it) pair only when the class is c.

    ``cdf`` (K, 3, M, G + 1): every model's row of each class in its three states (now, right:
    a + lookahead, wrong: b + lookahead) on one grid per class covering all three;
    ``rows_now`` (K, M): P(best on c) now; ``deltas[c]``: P^c(best on c) − P(best on c) (M,)
    of the pairs of class c met so far, by their who-predicted-it bits."""

    def __init__(self, alpha: np.ndarray, grid: int, lookahead: float):
        self.grid, self.lookahead = grid, lookahead
        self.cdf = self._cdfs(*_rows(alpha))
        self.rows_now = _p_best_cdf(self.cdf[:, 0])
        self.deltas: list[dict[bytes, np.ndarray]] = [{} for _ in range(len(self.cdf))]

    def _cdfs(self, a0: np.ndarray, b0: np.ndarray) -> np.ndarray:
        k = len(a0)
        a3 = np.stack([a0, a0 + self.lookahead, a0], axis=1)  # (K, 3, M)
        b3 = np.stack([b0, b0, b0 + self.lookahead], axis=1)
        lo, hi = _span(a3.reshape(k, -1), b3.reshape(k, -1))
        edges = lo[:, None] + (hi - lo)[:, None] * np.linspace(0.0, 1.0, self.grid + 1)  # (K, G + 1)
        # C order, as stats.beta.cdf returns it: _p_best_cdf's sums run in the memory order
        cdf = np.empty(a3.shape + (self.grid + 1,))  # (K, 3, M, G + 1)
        special.betainc(a3[..., None], b3[..., None], edges[:, None, None, :], out=cdf)
        cdf[..., 0], cdf[..., -1] = 0.0, 1.0
        return cdf

    def relabel(self, alpha: np.ndarray, c: int) -> None:
        """Class ``c``'s pieces again, after its row of ``alpha`` changed."""
        self.cdf[c] = self._cdfs(*_rows(alpha, [c]))[0]
        self.rows_now[c] = _p_best_cdf(self.cdf[c:c + 1, 0])[0]
        self.deltas[c] = {}

    def _delta(self, c: np.ndarray, right: np.ndarray, bits: np.ndarray) -> np.ndarray:
        """P^c(best on c) − P(best on c) (U, M) of the pairs (class ``c``, models ``right``)."""
        out = np.empty(right.shape)
        keys = [row.tobytes() for row in bits]
        todo = []
        for u, key in enumerate(keys):
            known = self.deltas[c[u]].get(key)
            if known is None:
                todo.append(u)
            else:
                out[u] = known
        m = right.shape[1]
        step = max(1, _CHUNK // (m * (self.grid + 1)))
        for lo in range(0, len(todo), step):
            at = np.asarray(todo[lo:lo + step], dtype=np.int64)
            state = np.where(right[at], 1, 2)
            sel = self.cdf[c[at, None], state, np.arange(m)[None, :]]  # (u, M, G + 1)
            out[at] = _p_best_cdf(sel) - self.rows_now[c[at]]
            for u in at:
                self.deltas[c[u]][keys[u]] = out[u].copy()
        return out

    def eig(self, class_prior, votes, candidates, item_posterior) -> np.ndarray:
        """:func:`coda_eig` on the current pieces."""
        pi = np.asarray(class_prior, dtype=np.float64)
        votes = np.asarray(votes, dtype=np.int64)
        cand = np.asarray(candidates, dtype=np.int64)
        post = np.asarray(item_posterior, dtype=np.float64)
        out = np.zeros(len(cand))
        cv = votes[:, cand]  # (M, C)
        split = (cv != cv[:1]).any(axis=0)
        if not split.any():
            return out
        now = pi @ self.rows_now
        h_now = entropy(now)
        k, m = self.rows_now.shape
        # the pairs: (c, nobody) for every class, (the class of model j, the models agreeing
        # with j) for every split candidate and model
        cs = cv[:, split].T  # (S, M)
        c = np.concatenate([np.arange(k), cs.reshape(-1)])
        right = np.concatenate([np.zeros((k, m), dtype=bool),
                                (cs[:, :, None] == cs[:, None, :]).reshape(-1, m)])
        bits = np.packbits(right, axis=1)
        keys = np.concatenate([c[:, None].astype(">i8").view(np.uint8), bits], axis=1)
        _, first, where = np.unique(keys.view(np.dtype((np.void, keys.shape[1]))).ravel(),
                                    return_index=True, return_inverse=True)
        cu = c[first]
        after = now[None, :] + pi[cu, None] * self._delta(cu, right[first], bits[first])
        h_combo = entropy(np.clip(after, 0.0, None))[where.reshape(-1)]
        h_after = np.repeat(h_combo[None, :k], len(cs), axis=0)  # (S, K)
        h_after[np.repeat(np.arange(len(cs)), m), cs.reshape(-1)] = h_combo[k:]
        gain = h_now - (post[split] * h_after).sum(axis=1)
        out[np.flatnonzero(split)] = np.clip(gain, 0.0, None)
        return out
