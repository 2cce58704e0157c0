"""CODA (zoorank.metrics.active.coda), ModelPicker and the uncertainty baseline on prediction tensors:
hand-computed cases, closed forms and second implementations written here."""

from __future__ import annotations

import math

import numpy as np
import pytest
from scipy import stats

from zoorank.metrics.active import coda, coda_eig, coda_weighted
from zoorank.metrics.active import model_selection as ms


def _zoo(accuracies, n: int = 400, k: int = 5, seed: int = 0):
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


def test_p_best_concentrates_on_the_model_that_is_always_right():
    P, y = _zoo([1.0, 0.75, 0.7, 0.7], seed=1)
    prior = coda.coda_prior(P, scale=1.0, label_weight=1.0)
    labelled: list[int] = []
    for step in range(40):
        i = int(coda.coda_next(P, labelled, y[labelled], k=1, seed=step, prior=prior)[0])
        labelled.append(i)
    p, _ = coda.coda_belief(prior, labelled, y[labelled])
    # P(best) mixes the per-class answers: each class's rows must single model 0 out
    assert p.argmax() == 0 and p[0] > 0.9
    assert abs(p.sum() - 1) < 1e-12


def test_exchangeable_identical_models_get_equal_p_best():
    P, y = _zoo([0.8], seed=2)
    P3 = np.repeat(P, 3, axis=0)
    prior = coda.coda_prior(P3)
    for labelled in ([], [0, 5, 9, 30]):
        p, _ = coda.coda_belief(prior, labelled, y[labelled])
        np.testing.assert_allclose(p, np.full(3, 1 / 3), atol=1e-12)
    post = ms.model_picker_posterior(P3.argmax(axis=2), [0, 5], y[[0, 5]])
    np.testing.assert_allclose(post, np.full(3, 1 / 3), atol=1e-12)


def _reference_dawid_skene(votes, labelled, labels, k, iterations, smoothing):
    """Dawid-Skene EM written image by image with Python loops (the second implementation)."""
    m, n = len(votes), len(votes[0])
    q = [[sum(1.0 for j in range(m) if votes[j][i] == c) / m for c in range(k)] for i in range(n)]
    for i, c in zip(labelled, labels):
        q[i] = [1.0 if d == c else 0.0 for d in range(k)]

    def m_step(q):
        theta = []
        for j in range(m):
            rows = []
            for c in range(k):
                row = [smoothing + sum(q[i][c] for i in range(n) if votes[j][i] == d)
                       for d in range(k)]
                rows.append([v / sum(row) for v in row])
            theta.append(rows)
        pi = [smoothing + sum(q[i][c] for i in range(n)) for c in range(k)]
        return theta, [v / sum(pi) for v in pi]

    for _ in range(iterations):
        theta, pi = m_step(q)
        new = []
        for i in range(n):
            w = [pi[c] * math.prod(theta[j][c][votes[j][i]] for j in range(m)) for c in range(k)]
            new.append([v / sum(w) for v in w])
        for i, c in zip(labelled, labels):
            new[i] = [1.0 if d == c else 0.0 for d in range(k)]
        q = new
    theta, pi = m_step(q)
    return np.array(q), np.array(pi), np.array(theta)


def test_dawid_skene_em_matches_a_loop_implementation():
    votes = [[0, 0, 1, 1, 2, 0, 1], [0, 1, 1, 1, 2, 2, 0], [1, 0, 1, 2, 2, 0, 0]]
    P = np.eye(3)[np.array(votes)]  # one-hot: the consensus is the vote share
    for iterations, labelled, labels in ((0, [], []), (1, [], []), (4, [1, 3], [0, 2])):
        fit = ms.dawid_skene(P, labelled, labels, iterations=iterations, smoothing=0.1)
        q, pi, theta = _reference_dawid_skene(votes, labelled, labels, 3, iterations, 0.1)
        np.testing.assert_allclose(fit.class_posterior, q, atol=1e-12)
        np.testing.assert_allclose(fit.class_prior, pi, atol=1e-12)
        np.testing.assert_allclose(fit.confusion, theta, atol=1e-12)


def test_dawid_skene_hand_case_without_iterations():
    # two models, two images; consensus of image 0 = (1, 0), of image 1 = (0.5, 0.5)
    P = np.eye(2)[np.array([[0, 0], [0, 1]])]
    fit = ms.dawid_skene(P, smoothing=0.0)
    # model 0 predicts 0 on both: row 0 gets 1 + 0.5 on column 0; row 1 gets 0.5 on column 0
    np.testing.assert_allclose(fit.confusion[0], [[1.0, 0.0], [1.0, 0.0]])
    # model 1: image 0 → 0 (row 0 += 1 at col 0), image 1 → 1 (rows += 0.5 at col 1)
    np.testing.assert_allclose(fit.confusion[1], [[1 / 1.5, 0.5 / 1.5], [0.0, 1.0]])
    np.testing.assert_allclose(fit.class_prior, [0.75, 0.25])


def _loop_class_posterior(alpha, P):
    """π̂(c | i) ∝ Σ_m Σ_s alpha[m, c, s] P[m, i, s], written with loops."""
    m, n, k = P.shape
    q = np.zeros((n, k))
    for i in range(n):
        for c in range(k):
            q[i, c] = sum(alpha[j, c, s] * P[j, i, s] for j in range(m) for s in range(k))
        q[i] /= q[i].sum()
    return q


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
    q = _loop_class_posterior(prior.alpha, P)
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


def test_eig_is_zero_on_an_image_every_model_agrees_on():
    P, y = _zoo([0.9, 0.8, 0.7], n=200, seed=3)
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
    P, y = _zoo([0.9, 0.8, 0.7, 0.6], n=120, k=4, seed=4)
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


def test_coda_p_best_matches_monte_carlo_over_the_dirichlet_posteriors():
    # P(best) = Σ_c π_c P(m has the largest θ_m[c, c]), the diagonal drawn from each row's
    # Dirichlet
    P, y = _zoo([0.85, 0.8, 0.75], n=300, seed=5)
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


def test_model_picker_posterior_and_eig_match_their_closed_forms():
    votes = np.array([[0, 1, 1], [1, 1, 0]])
    post = ms.model_picker_posterior(votes, [1, 2], [1, 1], gamma=3.0)
    # model 0 right twice, model 1 once: weights 9 : 3
    np.testing.assert_allclose(post, [0.75, 0.25])
    eig = ms.model_picker_eig(votes, np.array([0.5, 0.5]), [0], n_classes=2, gamma=3.0)
    h = stats.entropy([0.75, 0.25])
    assert eig[0] == pytest.approx(math.log(2) - h, abs=1e-12)


def test_coda_next_never_asks_a_labelled_or_excluded_image():
    P, y = _zoo([0.9, 0.7, 0.6], n=150, seed=6)
    excluded = np.zeros(150, bool)
    excluded[::2] = True
    picks = coda.coda_next(P, [1, 3], y[[1, 3]], excluded=excluded, k=10, seed=0)
    assert len(picks) == len(set(picks.tolist())) == 10
    assert not excluded[picks].any() and not np.isin(picks, [1, 3]).any()
    # the greedy batch spreads over vote patterns instead of repeating the best one
    votes = P.argmax(axis=2)[:, picks].T
    assert len({tuple(v) for v in votes}) > 1


def test_uncertainty_scores_are_the_consensus_entropy():
    P = np.array([[[1.0, 0.0], [1.0, 0.0]], [[1.0, 0.0], [0.0, 1.0]]])  # image 1: (0.5, 0.5)
    np.testing.assert_allclose(ms.uncertainty_scores(P), [0.0, math.log(2)])


def test_bad_predictions_name_the_problem():
    with pytest.raises(ValueError, match="P must be 3-D"):
        ms.check_predictions(np.ones((3, 4)))
    with pytest.raises(ValueError, match="negative"):
        ms.check_predictions(-np.ones((1, 2, 2)))
    with pytest.raises(ValueError, match="labels must lie"):
        ms.dawid_skene(np.ones((1, 2, 2)), [0], [5])


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
    P, y = _zoo([0.9, 0.7, 0.6], n=40, k=4, seed=8)
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
    P, y = _zoo([0.9, 0.8, 0.7], n=60, k=4, seed=9)
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
    P, y = _zoo([0.9, 0.8, 0.7, 0.6], n=120, seed=11)
    for seed in range(3):
        # the greedy batch written out, from scratch at every pick (no exploration draw)
        ref = _reference_next(P, [0, 5], y[[0, 5]], 6, seed, ms.MAX_CANDIDATES, coda.GRID, 0.0)
        got = coda.coda_next(P, [0, 5], y[[0, 5]], k=6, seed=seed, explore=0.0)
        np.testing.assert_array_equal(got, ref)
        np.testing.assert_array_equal(coda.coda_next(P, [0, 5], y[[0, 5]], k=6, seed=seed), ref)


def test_explore_one_is_uniform_sampling_of_the_free_images():
    P, y = _zoo([0.9, 0.7, 0.6], n=40, seed=12)
    other, _ = _zoo([0.5, 0.95, 0.3], n=40, seed=13)
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
    P, y = _zoo([0.95, 0.7, 0.6], n=50, k=3, seed=14)
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
    P, _ = _zoo([0.9, 0.7], n=20, seed=15)
    for bad in (-0.1, 1.5, float("nan")):
        with pytest.raises(ValueError, match="explore"):
            coda.coda_next(P, k=1, explore=bad)


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


def _reference_prior(P) -> coda.CodaPrior:
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


def _reference_next(P, labelled, labels, k, seed, max_candidates, grid, explore):
    """coda_next as first written: the prior of ``P`` checked (:func:`_reference_prior`), the class
    posterior (einsum) and :func:`_reference_eig` from scratch at every pick."""
    P = ms.check_predictions(P)
    prior = _reference_prior(P)
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
            gain = _reference_eig(alpha, q.mean(axis=0), prior.votes, cand, q[cand], grid)
            scores = gain if gain.max() > 0 else ms.entropy(P[:, cand].mean(axis=0))
            i = int(cand[np.lexsort((rng.permutation(len(cand)), -scores))[0]])
        picks.append(i)
        mask[i] = True
        alpha[np.arange(len(alpha)), int(q[i].argmax()), prior.votes[:, i]] += coda.LABEL_WEIGHT
    return np.sort(picks)


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
def test_coda_prior_equals_the_first_formula_exactly(seed):
    # the confusions' renormalisation one model at a time, and the in-place one of coda_next,
    # return the very floats of the whole-array checks
    P = _random_zoo(seed)
    expected = _reference_prior(P)
    got = coda.coda_prior(P)
    for field in ("alpha", "predictions", "votes"):
        np.testing.assert_array_equal(getattr(got, field), getattr(expected, field))
    np.testing.assert_allclose(got.class_prior, expected.class_prior, rtol=0, atol=1e-15)
    checked = ms.check_predictions(P)
    inside, _ = coda._prior_and_scores(checked.copy(), in_place=True)
    np.testing.assert_array_equal(inside.alpha, _reference_prior(checked).alpha)
    np.testing.assert_array_equal(inside.predictions, _reference_prior(checked).predictions)
    cand = np.random.default_rng(seed).choice(P.shape[1], 30, replace=False)
    np.testing.assert_array_equal(checked.mean(axis=0)[cand], checked[:, cand].mean(axis=0))


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


@pytest.mark.parametrize("seed", range(24))
def test_coda_next_picks_the_first_formulas_images(seed):
    # the class posterior by matrix products (beyond coda._EINSUM_K classes), updated per label
    # and per pick, differs from the einsum in the last bits only (≤ 1e-12 here); the picks, the
    # per-class cache across picks included, are the same images on every seeded zoo, with
    # candidate subsampling and exploration draws
    P = _random_zoo(seed)
    n, k = P.shape[1:]
    rng = np.random.default_rng(seed)
    at = rng.choice(n, 5, replace=False)
    y = rng.integers(k, size=5)
    grid = coda.GRID if seed < 4 else 64
    explore = 0.3 if seed % 3 == 2 else 0.0
    kw = dict(k=8, seed=seed, max_candidates=n // 2 if seed % 4 else n, grid=grid, explore=explore)
    prior = coda.coda_prior(P) if seed % 5 == 0 else None  # built inside, or given
    np.testing.assert_array_equal(coda.coda_next(P, at, y, prior=prior, **kw),
                                  _reference_next(P, at, y, **kw))
    alpha = coda.coda_posterior(coda.coda_prior(P), at, y)
    q = np.einsum("mcs,mns->nc", alpha, coda.coda_prior(P).predictions)
    np.testing.assert_allclose(coda.coda_class_posterior(alpha, P)[0], q / q.sum(axis=1, keepdims=True),
                               rtol=0, atol=1e-12)
