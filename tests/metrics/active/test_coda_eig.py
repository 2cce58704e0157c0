"""CODA's expected information gain and P(best) integrals: closed forms and a brute force over
hypothetical labels."""

from __future__ import annotations

import numpy as np
import pytest
from active_cases import prediction_zoo
from scipy import stats

from zoorank.metrics.active import coda, coda_eig
from zoorank.metrics.active import model_selection as ms


def _loop_class_posterior(alpha, P):
    """π̂(c | i) ∝ Σ_m Σ_s alpha[m, c, s] P[m, i, s], written with loops."""
    m, n, k = P.shape
    q = np.zeros((n, k))
    for i in range(n):
        for c in range(k):
            q[i, c] = sum(alpha[j, c, s] * P[j, i, s] for j in range(m) for s in range(k))
        q[i] /= q[i].sum()
    return q


def test_eig_is_zero_on_an_image_every_model_agrees_on():
    P, y = prediction_zoo([0.9, 0.8, 0.7], n=200, seed=3)
    votes = P.argmax(axis=2)
    prior = coda.coda_prior(P, scale=1.0, label_weight=1.0)
    unanimous = np.flatnonzero((votes == votes[:1]).all(axis=0))
    split = np.flatnonzero(~(votes == votes[:1]).all(axis=0))
    assert len(unanimous) and len(split)
    q, pi = coda.coda_class_posterior(prior.alpha, P)
    gain = coda.coda_eig(prior.alpha, pi, votes, np.arange(200), q)
    assert (gain[unanimous] == 0).all()
    assert (gain[split] > 0).all()
    mp = ms.model_picker_eig(votes, np.array([0.5, 0.3, 0.2]), np.arange(200), 5)
    assert np.abs(mp[unanimous]).max() < 1e-15 and (mp[split] > 0).all()


@pytest.mark.parametrize("lookahead", [1.0, 10.0])
def test_eig_equals_a_brute_force_over_hypothetical_labels(lookahead):
    P, y = prediction_zoo([0.9, 0.8, 0.7, 0.6], n=120, k=4, seed=4)
    prior = coda.coda_prior(P, scale=2.0, label_weight=1.0)
    alpha = coda.coda_posterior(prior, [0, 1, 2, 3, 4], y[:5])
    q = _loop_class_posterior(alpha, P)
    pi = q.mean(axis=0)
    cand = np.arange(5, 60)
    gain = coda.coda_eig(alpha, pi, prior.votes, cand, q[cand], grid=4096, lookahead=lookahead)
    h_now = ms.entropy(coda.coda_p_best(alpha, pi, grid=4096))
    for i, g in zip(cand, gain):
        v = prior.votes[:, i]
        if (v == v[0]).all():
            assert g == 0
            continue
        expected = 0.0
        for c in range(4):
            after = alpha.copy()
            after[np.arange(4), c, v] += lookahead
            expected += q[i, c] * ms.entropy(coda.coda_p_best(after, pi, grid=4096))
        assert g == pytest.approx(max(h_now - expected, 0.0), abs=2e-4)


def test_p_best_of_two_betas_matches_the_closed_form():
    # X ~ Beta(a, 1), Y ~ Beta(b, 1): P(X > Y) = ∫ a x^(a-1) x^b dx = a / (a + b)
    p = coda.p_best_from_beta(np.array([3.0, 5.0]), np.array([1.0, 1.0]), grid=4096)
    np.testing.assert_allclose(p, [3 / 8, 5 / 8], atol=1e-4)


def _reference_eig(alpha, pi, votes, cand, post, grid=coda.GRID, lookahead=1.0):
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


def _random_zoo(seed: int):
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


@pytest.mark.parametrize("seed", range(6))
def test_coda_eig_equals_the_first_formula_exactly(seed):
    # the cached, chunked evaluation returns the very floats of the first one, chunks of one
    # pair's CDFs included
    P = _random_zoo(seed)
    n, k = P.shape[1:]
    prior = coda.coda_prior(P)
    rng = np.random.default_rng(seed)
    at = rng.choice(n, 8, replace=False)
    alpha = coda.coda_posterior(prior, at, rng.integers(k, size=8))
    q, pi = coda.coda_class_posterior(alpha, P)
    cand = np.arange(n)
    expected = _reference_eig(alpha, pi, prior.votes, cand, q, lookahead=3.0)
    np.testing.assert_array_equal(coda.coda_eig(alpha, pi, prior.votes, cand, q, lookahead=3.0),
                                  expected)
    with pytest.MonkeyPatch.context() as patch:
        patch.setattr(coda_eig, "_CHUNK", 1)
        np.testing.assert_array_equal(
            coda.coda_eig(alpha, pi, prior.votes, cand, q, lookahead=3.0), expected)
