"""CODA: its prior on hand cases and the authors' defaults, P(best) against Monte Carlo, and the
acquisition against the first formulas."""

from __future__ import annotations

import numpy as np
import pytest
from active_cases import loop_class_posterior, prediction_zoo, random_zoo, reference_next, reference_prior

from zoorank.metrics.active import coda
from zoorank.metrics.active import model_selection as ms


def test_coda_prior_hand_case():
    # two models, three images, two classes; consensus top-1: image 0 → 0, 1 → 0, 2 → 1
    P = np.array([[[0.9, 0.1], [0.6, 0.4], [0.2, 0.8]],
                  [[0.7, 0.3], [0.5, 0.5], [0.4, 0.6]]])
    prior = coda.coda_prior(P, strength=0.5, scale=4.0)
    # model 0: row 0 = mean of (0.9, 0.1), (0.6, 0.4) = (0.75, 0.25); row 1 = (0.2, 0.8)
    # model 1: row 0 = mean of (0.7, 0.3), (0.5, 0.5) = (0.6, 0.4); row 1 = (0.4, 0.6);
    # β = [[1, 1], [1, 1]] for K = 2
    m_hat = np.array([[[0.75, 0.25], [0.2, 0.8]], [[0.6, 0.4], [0.4, 0.6]]])
    np.testing.assert_allclose(prior.alpha, 4.0 * (1.0 + 0.5 * m_hat))
    np.testing.assert_allclose(coda.diagonal_base(3), [[1, .5, .5], [.5, 1, .5], [.5, .5, 1]])
    q = loop_class_posterior(prior.alpha, P)
    got, pi = coda.coda_class_posterior(prior.alpha, P)
    np.testing.assert_allclose(got, q, atol=1e-12)
    np.testing.assert_allclose(pi, q.mean(axis=0), atol=1e-12)
    np.testing.assert_allclose(prior.class_prior, pi, atol=1e-12)


def test_coda_defaults_are_the_authors_dirichlet_scale_on_a_hand_fixture():
    # the authors' code (github.com/justinkay/coda, main.py defaults multiplier 2, alpha 0.9,
    # learning_rate 0.01): prior 2 · (β + 0.1 · M̂), each label adding 0.01 at (true class, the
    # model's vote), the EIG's hypothetical label adding 1.0. Two models, three images, K = 3
    # (β: 1 on the diagonal, 1/2 off it). Consensus: image 0 (0.6, 0.3, 0.1) → class 0,
    # image 1 (0.2, 0.45, 0.35) → 1, image 2 (0.15, 0.15, 0.7) → 2, so M̂'s row c is the
    # model's probabilities on image c.
    P = np.array([[[0.7, 0.2, 0.1], [0.1, 0.6, 0.3], [0.2, 0.2, 0.6]],
                  [[0.5, 0.4, 0.1], [0.3, 0.3, 0.4], [0.1, 0.1, 0.8]]])
    prior = coda.coda_prior(P)
    # e.g. model 0, row 0: 2 · (1 + 0.1 · 0.7, 0.5 + 0.1 · 0.2, 0.5 + 0.1 · 0.1)
    expected = np.array([[[2.14, 1.04, 1.02], [1.02, 2.12, 1.06], [1.04, 1.04, 2.12]],
                         [[2.10, 1.08, 1.02], [1.06, 2.06, 1.08], [1.02, 1.02, 2.16]]])
    np.testing.assert_allclose(prior.alpha, expected, rtol=0, atol=1e-12)
    # image 1 labelled 2 (votes: model 0 → 1, model 1 → 2), image 0 labelled 0 (both vote 0)
    alpha = coda.coda_posterior(prior, [1, 0], [2, 0])
    expected[0, 2, 1] = 1.05
    expected[1, 2, 2] = 2.17
    expected[0, 0, 0] = 2.15
    expected[1, 0, 0] = 2.11
    np.testing.assert_allclose(alpha, expected, rtol=0, atol=1e-12)
    # the class-mix score reads the Beta of each diagonal: model 1 on class 2 is
    # Beta(2.17, 1.02 + 1.02); the score's per-class answers equal p_best_from_beta of them
    a = np.array([[2.15, 2.11], [2.12, 2.06], [2.12, 2.17]])
    b = np.array([[1.04 + 1.02, 1.08 + 1.02], [1.02 + 1.06, 1.06 + 1.08],
                  [1.04 + 1.05, 1.02 + 1.02]])
    np.testing.assert_allclose(coda.coda_row_p_best(alpha), coda.p_best_from_beta(a, b),
                               rtol=0, atol=1e-12)
    # the EIG's look-ahead: a hypothetical label of class c on image 2 adds 1.0 (not 0.01) to
    # row c of each model at its vote (model 0 → 2, model 1 → 2)
    q, pi = coda.coda_class_posterior(alpha, P)
    gain = coda.coda_eig(alpha, pi, prior.votes, [2], q[[2]], grid=4096)
    h_after = 0.0
    for c in range(3):
        after = alpha.copy()
        after[:, c, 2] += 1.0
        h_after += q[2, c] * ms.entropy(coda.coda_p_best(after, pi, grid=4096))
    # image 2 is one every model agrees on: no candidate (the authors' filter), gain 0
    assert gain[0] == 0.0 and h_after > 0
    P2 = P.copy()
    P2[1, 2] = [0.1, 0.5, 0.4]  # now model 1 votes 1 on image 2: the models disagree
    prior2 = coda.coda_prior(P2)
    alpha2 = coda.coda_posterior(prior2, [1, 0], [2, 0])
    q2, pi2 = coda.coda_class_posterior(alpha2, P2)
    h_now = ms.entropy(coda.coda_p_best(alpha2, pi2, grid=4096))
    h_after = 0.0
    for c in range(3):
        after = alpha2.copy()
        after[0, c, 2] += 1.0
        after[1, c, 1] += 1.0
        h_after += q2[2, c] * ms.entropy(coda.coda_p_best(after, pi2, grid=4096))
    got = coda.coda_eig(alpha2, pi2, prior2.votes, [2], q2[[2]], grid=4096)
    assert got[0] == pytest.approx(max(h_now - h_after, 0.0), abs=1e-4) and got[0] > 0
    assert (coda.SCALE, coda.STRENGTH, coda.LABEL_WEIGHT, coda.LOOKAHEAD) == (2.0, 0.1, 0.01, 1.0)


def test_coda_p_best_matches_monte_carlo_over_the_dirichlet_posteriors():
    # P(best) = Σ_c π_c P(m has the largest θ_m[c, c]), the diagonal drawn from each row's
    # Dirichlet
    P, y = prediction_zoo([0.85, 0.8, 0.75], n=300, seed=5)
    prior = coda.coda_prior(P, scale=1.0, label_weight=1.0)
    alpha = coda.coda_posterior(prior, np.arange(40), y[:40])
    pi = np.array([0.1, 0.3, 0.2, 0.25, 0.15])
    p = coda.coda_p_best(alpha, pi)
    rng = np.random.default_rng(0)
    draws = 20000
    mc = np.zeros(3)
    for c in range(alpha.shape[1]):
        diag = np.stack([rng.dirichlet(alpha[m, c], size=draws)[:, c] for m in range(3)], axis=1)
        mc += pi[c] * np.bincount(diag.argmax(axis=1), minlength=3) / draws
    np.testing.assert_allclose(p, mc, atol=0.02)
    assert abs(p.sum() - 1) < 1e-12


def test_coda_next_never_asks_a_labelled_or_excluded_image():
    P, y = prediction_zoo([0.9, 0.7, 0.6], n=150, seed=6)
    excluded = np.zeros(150, bool)
    excluded[::2] = True
    picks = coda.coda_next(P, [1, 3], y[[1, 3]], excluded=excluded, k=10, seed=0)
    assert len(picks) == len(set(picks.tolist())) == 10
    assert not excluded[picks].any() and not np.isin(picks, [1, 3]).any()
    # the greedy batch spreads over vote patterns instead of repeating the best one
    votes = P.argmax(axis=2)[:, picks].T
    assert len({tuple(v) for v in votes}) > 1


@pytest.mark.parametrize("seed", range(6))
def test_coda_prior_equals_the_first_formula_exactly(seed):
    # the confusions' renormalisation one model at a time, and the in-place one of coda_next,
    # return the very floats of the whole-array checks
    P = random_zoo(seed)
    expected = reference_prior(P)
    got = coda.coda_prior(P)
    for field in ("alpha", "predictions", "votes"):
        np.testing.assert_array_equal(getattr(got, field), getattr(expected, field))
    np.testing.assert_allclose(got.class_prior, expected.class_prior, rtol=0, atol=1e-15)
    checked = ms.check_predictions(P)
    inside, _ = coda._prior_and_scores(checked.copy(), in_place=True)
    np.testing.assert_array_equal(inside.alpha, reference_prior(checked).alpha)
    np.testing.assert_array_equal(inside.predictions, reference_prior(checked).predictions)
    cand = np.random.default_rng(seed).choice(P.shape[1], 30, replace=False)
    np.testing.assert_array_equal(checked.mean(axis=0)[cand], checked[:, cand].mean(axis=0))


@pytest.mark.parametrize("seed", range(24))
def test_coda_next_picks_the_first_formulas_images(seed):
    # the class posterior by matrix products (beyond coda._EINSUM_K classes), updated per label
    # and per pick, differs from the einsum in the last bits only (≤ 1e-12 here); the picks, the
    # per-class cache across picks included, are the same images on every seeded zoo, with
    # candidate subsampling and exploration draws
    P = random_zoo(seed)
    n, k = P.shape[1:]
    rng = np.random.default_rng(seed)
    at = rng.choice(n, 5, replace=False)
    y = rng.integers(k, size=5)
    grid = coda.GRID if seed < 4 else 64
    explore = 0.3 if seed % 3 == 2 else 0.0
    kw = dict(k=8, seed=seed, max_candidates=n // 2 if seed % 4 else n, grid=grid, explore=explore)
    prior = coda.coda_prior(P) if seed % 5 == 0 else None  # built inside, or given
    np.testing.assert_array_equal(coda.coda_next(P, at, y, prior=prior, **kw),
                                  reference_next(P, at, y, **kw))
    alpha = coda.coda_posterior(coda.coda_prior(P), at, y)
    q = np.einsum("mcs,mns->nc", alpha, coda.coda_prior(P).predictions)
    np.testing.assert_allclose(coda.coda_class_posterior(alpha, P)[0], q / q.sum(axis=1, keepdims=True),
                               rtol=0, atol=1e-12)
