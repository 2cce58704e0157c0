"""CODA's expected information gain and P(best) integrals: closed forms and a brute force over
hypothetical labels."""

from __future__ import annotations

import numpy as np
import pytest
from active_cases import loop_class_posterior, prediction_zoo, random_zoo, reference_eig

from zoorank.metrics.active import coda, coda_eig
from zoorank.metrics.active import model_selection as ms


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
    q = loop_class_posterior(alpha, P)
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


@pytest.mark.parametrize("seed", range(6))
def test_coda_eig_equals_the_first_formula_exactly(seed):
    # the cached, chunked evaluation returns the very floats of the first one, chunks of one
    # pair's CDFs included
    P = random_zoo(seed)
    n, k = P.shape[1:]
    prior = coda.coda_prior(P)
    rng = np.random.default_rng(seed)
    at = rng.choice(n, 8, replace=False)
    alpha = coda.coda_posterior(prior, at, rng.integers(k, size=8))
    q, pi = coda.coda_class_posterior(alpha, P)
    cand = np.arange(n)
    expected = reference_eig(alpha, pi, prior.votes, cand, q, lookahead=3.0)
    np.testing.assert_array_equal(coda.coda_eig(alpha, pi, prior.votes, cand, q, lookahead=3.0),
                                  expected)
    with pytest.MonkeyPatch.context() as patch:
        patch.setattr(coda_eig, "_CHUNK", 1)
        np.testing.assert_array_equal(
            coda.coda_eig(alpha, pi, prior.votes, cand, q, lookahead=3.0), expected)
