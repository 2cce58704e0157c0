"""CODA bias-corrected acquisition: unbiased weights, the weighted update and the exploration mix."""

from __future__ import annotations

import math

import numpy as np
import pytest
from active_cases import prediction_zoo, reference_next
from scipy import stats

from zoorank.metrics.active import coda, coda_weighted
from zoorank.metrics.active import model_selection as ms


def test_lure_weights_are_unbiased_over_every_draw_sequence():
    # pool of 5, 3 labels drawn without replacement from q ∝ (1 − ε) s + ε / F over the free
    # images; exact expectation of Σ v_l f(i_l) / L over all 60 ordered sequences = mean of f
    import itertools

    n, big, eps = 5, 3, 0.3
    s = np.array([5.0, 1.0, 0.5, 3.0, 0.1])
    f = np.array([1.0, -2.0, 0.5, 4.0, 7.0])
    expected = 0.0
    for seq in itertools.permutations(range(n), big):
        prob, qs = 1.0, []
        for step, i in enumerate(seq):
            free = [j for j in range(n) if j not in seq[:step]]
            q = (1 - eps) * s[i] / s[free].sum() + eps / len(free)
            prob *= q
            qs.append(q)
        v = coda_weighted.importance_weights(qs, n, normalise=False)
        assert (v >= 0).all()
        expected += prob * (v * f[list(seq)]).sum() / big
    assert expected == pytest.approx(f.mean(), abs=1e-12)
    # uniform draws: every weight exactly 1; the whole pool labelled: 1 too
    np.testing.assert_array_equal(coda_weighted.importance_weights([1 / 5, 1 / 4, 1 / 3], 5), np.ones(3))
    np.testing.assert_array_equal(coda_weighted.importance_weights([0.9, 0.5, 0.2, 0.5, 1.0], 5), np.ones(5))
    # hand case, n = 4, L = 2: v_1 = 1 + (2/3)(1/(4·0.5) − 1) = 2/3, v_2 = 1 + (2/2)(1/(3·0.25) − 1) = 4/3
    np.testing.assert_allclose(coda_weighted.importance_weights([0.5, 0.25], 4, normalise=False),
                               [2 / 3, 4 / 3])
    np.testing.assert_allclose(coda_weighted.importance_weights([0.5, 0.25], 4), [2 / 3, 4 / 3])
    with pytest.raises(ValueError, match="q must hold"):
        coda_weighted.importance_weights([0.0], 4)


def test_weighted_update_matches_a_loop_and_unit_weights_match_plain_counts():
    P, y = prediction_zoo([0.9, 0.7, 0.6], n=40, k=4, seed=8)
    prior = coda.coda_prior(P)  # each label counts η = 0.01 times its weight
    at = [3, 7, 7 + 1, 20, 31]
    w = [0.5, 2.0, 1.25, 0.0, 3.0]
    expected = prior.alpha.copy()
    for i, wi in zip(at, w):
        for m in range(3):
            expected[m, y[i], int(np.argmax(P[m, i]))] += 0.01 * wi
    np.testing.assert_allclose(coda.coda_posterior(prior, at, y[at], w), expected, atol=1e-12)
    np.testing.assert_array_equal(coda.coda_posterior(prior, at, y[at], np.ones(5)),
                                  coda.coda_posterior(prior, at, y[at]))
    with pytest.raises(ValueError, match="weights must be 5"):
        coda.coda_posterior(prior, at, y[at], [1.0, -1.0, 1.0, 1.0, 1.0])


def test_proposal_mixes_eig_with_uniform_and_epsilon_one_is_random_sampling():
    P, y = prediction_zoo([0.9, 0.8, 0.7], n=60, k=4, seed=9)
    prior = coda.coda_prior(P)
    at = [0, 1, 2]
    excluded = np.zeros(60, bool)
    excluded[50:] = True
    free, q = coda_weighted.coda_proposal(P, at, y[at], excluded=excluded, epsilon=0.25, prior=prior)
    np.testing.assert_array_equal(free, np.arange(3, 50))
    alpha = coda.coda_posterior(prior, at, y[at])
    post, pi = coda.coda_class_posterior(alpha, P)
    gain = coda.coda_eig(alpha, pi, prior.votes, free, post[free])
    np.testing.assert_allclose(q, 0.75 * gain / gain.sum() + 0.25 / 47, atol=1e-15)
    assert q.sum() == pytest.approx(1.0, abs=1e-12)
    # ε = 1: uniform over the free images, the draw is a seeded uniform choice, every weight 1,
    # so the belief is CODA's P(best) on randomly asked labels
    free, q = coda_weighted.coda_proposal(P, at, y[at], excluded=excluded, epsilon=1.0, prior=prior)
    np.testing.assert_array_equal(q, np.full(47, 1 / 47))
    i, qi = coda_weighted.coda_sample_next(P, at, y[at], excluded=excluded, epsilon=1.0, seed=4, prior=prior)
    assert i == free[np.random.default_rng([4, 1]).choice(47, p=np.full(47, 1 / 47))]
    assert qi == 1 / 47
    labelled, qs = list(at), []
    for step in range(5):
        i, qi = coda_weighted.coda_sample_next(P, labelled, y[labelled], epsilon=1.0, seed=step, prior=prior)
        assert i not in labelled
        labelled.append(i)
        qs.append(qi)
    w = coda_weighted.importance_weights([1 / 60, 1 / 59, 1 / 58] + qs, 60)
    np.testing.assert_array_equal(w, np.ones(8))
    np.testing.assert_array_equal(coda.coda_belief(prior, labelled, y[labelled], weights=w)[0],
                                  coda.coda_belief(prior, labelled, y[labelled])[0])


def test_explore_zero_is_plain_coda_bit_for_bit():
    P, y = prediction_zoo([0.9, 0.8, 0.7, 0.6], n=120, seed=11)
    for seed in range(3):
        # the greedy batch written out, from scratch at every pick (no exploration draw)
        ref = reference_next(P, [0, 5], y[[0, 5]], 6, seed, ms.MAX_CANDIDATES, coda.GRID, 0.0)
        got = coda.coda_next(P, [0, 5], y[[0, 5]], k=6, seed=seed, explore=0.0)
        np.testing.assert_array_equal(got, ref)
        np.testing.assert_array_equal(coda.coda_next(P, [0, 5], y[[0, 5]], k=6, seed=seed), ref)


def test_explore_one_is_uniform_sampling_of_the_free_images():
    P, y = prediction_zoo([0.9, 0.7, 0.6], n=40, seed=12)
    other, _ = prediction_zoo([0.5, 0.95, 0.3], n=40, seed=13)
    excluded = np.zeros(40, bool)
    excluded[:10] = True
    counts = np.zeros(40)
    for seed in range(3000):
        pick = coda.coda_next(P, [], [], excluded=excluded, k=1, seed=seed, explore=1.0)
        counts[pick] += 1
        if seed < 20:  # uniform draws do not look at the predictions
            np.testing.assert_array_equal(
                pick, coda.coda_next(other, [], [], excluded=excluded, k=1, seed=seed, explore=1.0))
    assert counts[:10].sum() == 0
    # 30 free images, 100 draws expected each: a chi-square test of uniformity
    assert stats.chisquare(counts[10:]).pvalue > 1e-4
    # a whole batch is a draw without replacement of distinct free images
    batch = coda.coda_next(P, [11], y[[11]], excluded=excluded, k=29, seed=0, explore=1.0)
    np.testing.assert_array_equal(batch, np.setdiff1d(np.arange(10, 40), [11]))


@pytest.mark.parametrize("eps", [0.25, 0.5])
def test_explore_share_of_uniform_picks_matches_epsilon(eps):
    # a uniform pick differs from the greedy pick of the same seed except when it lands on it
    # (1 in F free images): P(differs) = ε (1 − 1/F); binomial bound of 4 standard errors
    P, y = prediction_zoo([0.95, 0.7, 0.6], n=50, k=3, seed=14)
    prior = coda.coda_prior(P)
    seeds, free = 400, 48
    differ = 0
    for seed in range(seeds):
        greedy = coda.coda_next(P, [0, 1], y[[0, 1]], k=1, seed=seed, prior=prior)
        mixed = coda.coda_next(P, [0, 1], y[[0, 1]], k=1, seed=seed, prior=prior, explore=eps)
        differ += int(mixed[0] != greedy[0])
    p = eps * (1 - 1 / free)
    assert abs(differ / seeds - p) < 4 * math.sqrt(p * (1 - p) / seeds)


def test_explore_outside_zero_one_is_refused():
    P, _ = prediction_zoo([0.9, 0.7], n=20, seed=15)
    for bad in (-0.1, 1.5, float("nan")):
        with pytest.raises(ValueError, match="explore"):
            coda.coda_next(P, k=1, explore=bad)


