"""What the active-selection tests share: zoos of classifiers' predictions and CODA's first
formulas written out (the references the vectorised code is checked against)."""

from __future__ import annotations

import numpy as np
from scipy import stats

from zoorank.metrics.active import coda, coda_eig
from zoorank.metrics.active import model_selection as ms


def prediction_zoo(accuracies, n: int = 400, k: int = 5, seed: int = 0):
    """Predictions (M, n, k) of models right with the given probabilities (wrong: a uniform
    other class), their top-1 carrying 0.8 of the mass; and the true labels."""
    rng = np.random.default_rng(seed)
    y = rng.integers(0, k, n)
    P = np.full((len(accuracies), n, k), 0.2 / (k - 1))
    for m, a in enumerate(accuracies):
        wrong = (y + rng.integers(1, k, n)) % k
        pred = np.where(rng.random(n) < a, y, wrong)
        P[m, np.arange(n), pred] = 0.8
    return P, y


def loop_class_posterior(alpha, P):
    """π̂(c | i) ∝ Σ_m Σ_s alpha[m, c, s] P[m, i, s], written with loops."""
    m, n, k = P.shape
    q = np.zeros((n, k))
    for i in range(n):
        for c in range(k):
            q[i, c] = sum(alpha[j, c, s] * P[j, i, s] for j in range(m) for s in range(k))
        q[i] /= q[i].sum()
    return q


def reference_eig(alpha, pi, votes, cand, post, grid=coda.GRID, lookahead=1.0):
    """coda_eig as first written: one (class, who-predicted-it) key per candidate and class,
    ``np.unique`` over them, ``stats.beta.cdf`` of every class's rows in their three states."""
    m, k, _ = alpha.shape
    out = np.zeros(len(cand))
    cv = votes[:, cand]
    split = (cv != cv[:1]).any(axis=0)
    if not split.any():
        return out
    diag = np.diagonal(alpha, axis1=1, axis2=2)
    a0, b0 = diag.T, (alpha.sum(axis=2) - diag).T
    a3 = np.stack([a0, a0 + lookahead, a0], axis=1)
    b3 = np.stack([b0, b0, b0 + lookahead], axis=1)
    lo, hi = coda_eig._span(a3.reshape(k, -1), b3.reshape(k, -1))
    edges = lo[:, None] + (hi - lo)[:, None] * np.linspace(0.0, 1.0, grid + 1)
    cdf = stats.beta.cdf(edges[:, None, None, :], a3[..., None], b3[..., None])
    cdf[..., 0], cdf[..., -1] = 0.0, 1.0
    rows_now = coda_eig._p_best_cdf(cdf[:, 0])
    now = pi @ rows_now
    classes = np.arange(k)
    right = cv[:, split].T[:, None, :] == classes[None, :, None]
    keys = np.concatenate([np.broadcast_to(classes[None, :, None], right.shape[:2] + (1,)),
                           right], axis=2).reshape(-1, m + 1).astype(np.int64)
    combos, where = np.unique(keys, axis=0, return_inverse=True)
    c = combos[:, 0]
    sel = cdf[c[:, None], np.where(combos[:, 1:] == 1, 1, 2), np.arange(m)[None, :]]
    after = now[None, :] + pi[c, None] * (coda_eig._p_best_cdf(sel) - rows_now[c])
    h_after = ms.entropy(np.clip(after, 0.0, None))[where.reshape(-1)].reshape(-1, k)
    out[np.flatnonzero(split)] = np.clip(ms.entropy(now) - (post[split] * h_after).sum(axis=1), 0.0, None)
    return out


def reference_prior(P) -> coda.CodaPrior:
    """coda_prior as first written: ``P`` checked, its confusions from ``P`` checked again (all
    models at once), the consensus by ``mean``."""
    P = ms.check_predictions(P)
    again = ms.check_predictions(P)
    m, _, k = P.shape
    pseudo = again.mean(axis=0).argmax(axis=1)
    conf = np.zeros((m, k, k))
    for j in range(m):
        np.add.at(conf[j], pseudo, again[j])
    sums = conf.sum(axis=2, keepdims=True)
    conf /= np.where(sums > 0, sums, 1.0)
    alpha = coda.SCALE * (coda.diagonal_base(k)[None] + coda.STRENGTH * conf)
    q = np.einsum("mcs,mns->nc", alpha, P)
    return coda.CodaPrior(alpha, P, P.argmax(axis=2), (q / q.sum(axis=1, keepdims=True)).mean(axis=0),
                          coda.LABEL_WEIGHT)


def reference_next(P, labelled, labels, k, seed, max_candidates, grid, explore):
    """coda_next as first written: the prior of ``P`` checked (:func:`reference_prior`), the class
    posterior (einsum) and :func:`reference_eig` from scratch at every pick."""
    P = ms.check_predictions(P)
    prior = reference_prior(P)
    alpha = coda.coda_posterior(prior, labelled, labels)
    mask = np.zeros(P.shape[1], dtype=bool)
    mask[labelled] = True
    rng = np.random.default_rng(seed)
    explorer = np.random.default_rng([seed, coda._EXPLORE_STREAM])
    picks = []
    for step in range(k):
        free = np.flatnonzero(~mask)
        q = np.einsum("mcs,mns->nc", alpha, prior.predictions)
        q /= q.sum(axis=1, keepdims=True)
        if explore > 0 and explorer.random() < explore:
            i = int(free[explorer.integers(len(free))])
        else:
            cand = ms.subsample_candidates(free, max_candidates, seed + step)
            gain = reference_eig(alpha, q.mean(axis=0), prior.votes, cand, q[cand], grid)
            scores = gain if gain.max() > 0 else ms.entropy(P[:, cand].mean(axis=0))
            i = int(cand[np.lexsort((rng.permutation(len(cand)), -scores))[0]])
        picks.append(i)
        mask[i] = True
        alpha[np.arange(len(alpha)), int(q[i].argmax()), prior.votes[:, i]] += coda.LABEL_WEIGHT
    return np.sort(picks)


def random_zoo(seed: int):
    """A seeded zoo of 2–9 models, 2–60 classes, 40–300 images: Dirichlet predictions, or
    softmaxes of normal logits lifting the true class (probability 0.5–0.9, graded over the
    models) or another. Continuous: no two images' EIG tie exactly in exact arithmetic (on the
    discrete predictions of :func:`_zoo` they do, and the last bits of the sums decide)."""
    rng = np.random.default_rng(seed)
    m, k, n = int(rng.integers(2, 10)), int(rng.integers(2, 61)), int(rng.integers(40, 301))
    if seed % 2 == 0:
        return rng.dirichlet(np.full(k, rng.choice([0.05, 0.3, 1.0])), size=(m, n))
    y = rng.integers(k, size=n)
    z = rng.standard_normal((m, n, k))
    for j, acc in enumerate(np.linspace(0.5, 0.9, m)):
        target = np.where(rng.random(n) < acc, y, (y + rng.integers(1, k, size=n)) % k)
        z[j, np.arange(n), target] += 3.0
    z = np.exp(z - z.max(axis=2, keepdims=True))
    return z / z.sum(axis=2, keepdims=True)
