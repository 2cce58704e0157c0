"""zoorank.metrics.active.knn_committee: few-label kNN predictions, p(best | labels), committee disagreement,
diverse selection — each against a hand-computed case or a reference implementation."""

from __future__ import annotations

import numpy as np
import pytest

from zoorank.metrics.active.knn_committee import (
    cold_start,
    committee_disagreement,
    knn_predictions,
    knn_votes,
    label_evidence,
    next_batch,
    random_batch,
    select_diverse,
    uncertainty_batch,
)
from zoorank.metrics.active.label_posterior import (
    STOP_WIDENING,
    labelled_p_best,
    labelled_p_best_widened,
    probability_mass_set,
)


def test_knn_predictions_match_a_reference_leave_one_out_vote():
    rng = np.random.default_rng(0)
    Z = rng.normal(size=(40, 5))
    labelled = np.arange(0, 40, 2)
    labels = rng.integers(0, 3, size=len(labelled))
    got = knn_predictions(Z, labelled, labels, n_classes=3, k=3)
    U = Z / np.linalg.norm(Z, axis=1, keepdims=True)
    for i in range(len(Z)):  # the reference: plain loops
        cands = [(float(U[i] @ U[j]), int(c)) for j, c in zip(labelled, labels) if j != i]
        cands.sort(key=lambda t: -t[0])
        votes = np.zeros(3)
        for s, c in cands[:3]:
            votes[c] += max(s, 0.0) + 1e-6
        assert got[i] == int(np.argmax(votes))


def test_knn_predictions_need_two_labels():
    with pytest.raises(ValueError, match="at least 2 labelled"):
        knn_predictions(np.eye(3), np.array([0]), np.array([1]), 2)


def test_p_best_with_every_pool_label_is_the_observed_best_with_ties_within_tolerance_shared():
    # the whole pool labelled (population = L): no uncertainty left, the observed accuracies decide
    correct = np.zeros((1000, 3))
    correct[:900, 0] = 1  # 0.900
    correct[:800, 1] = 1  # 0.800
    correct[:897, 2] = 1  # 0.897: 0.3 pp behind model 0, within the 0.5 pp tolerance
    assert labelled_p_best(correct, 200, 0, population=1000) == pytest.approx([0.5, 0.0, 0.5])
    assert labelled_p_best(correct[:, :2], 200, 0, population=1000) == pytest.approx([1.0, 0.0])
    assert labelled_p_best(np.zeros((0, 4))) == pytest.approx([0.25] * 4)
    assert labelled_p_best(correct[:, :1]) == pytest.approx([1.0])
    with pytest.raises(ValueError, match="population"):
        labelled_p_best(correct, population=10)


def test_exchangeable_models_get_equal_p_best_and_a_permutation_permutes_it():
    rng = np.random.default_rng(0)
    base = (rng.random((60, 1)) < 0.7).astype(float)
    twins = np.hstack([base, base, base])  # identical columns: exchangeable
    assert labelled_p_best(twins, 4000, 1) == pytest.approx([1 / 3] * 3, abs=0.03)
    symmetric = np.array([[1, 0], [0, 1], [1, 1]], dtype=float)  # each right once alone
    assert labelled_p_best(symmetric, 4000, 3) == pytest.approx([0.5, 0.5], abs=0.03)
    c = (rng.random((80, 4)) < [0.6, 0.7, 0.75, 0.8]).astype(float)
    perm = np.array([2, 0, 3, 1])
    assert labelled_p_best(c[:, perm], 4000, 5) == pytest.approx(
        labelled_p_best(c, 4000, 5)[perm], abs=0.03)


def test_one_lucky_sample_in_ten_stays_below_the_stopping_target_and_a_hundred_do_not():
    correct = np.zeros((10, 2))
    correct[0, 1] = 1.0  # model 1 right on one sample, both wrong on the other nine
    assert labelled_p_best(correct, 2000, 0)[1] < 0.9
    many = np.vstack([correct] * 10)  # the same pattern on 100 labels: now it is evidence
    assert labelled_p_best(many, 2000, 0)[1] > 0.9


def test_paired_differences_count_not_the_accuracies_alone():
    # the same accuracies (0.90 and 0.88 on 500 labels): when the models disagree on only 10
    # images (A right on all of them) the difference is sure; with independent errors it is not
    paired = np.zeros((500, 2))
    paired[:440] = 1
    paired[440:450, 0] = 1
    rng = np.random.default_rng(2)
    a, b = np.zeros(500), np.zeros(500)
    a[rng.permutation(500)[:450]] = 1
    b[rng.permutation(500)[:440]] = 1
    independent = np.column_stack([a, b])
    assert paired.mean(axis=0) == pytest.approx(independent.mean(axis=0))
    assert labelled_p_best(paired, 4000, 0)[0] > 0.9
    assert labelled_p_best(independent, 4000, 0)[0] < 0.75


@pytest.mark.parametrize("widen", [1.0, 3.0])
def test_p_best_of_two_symmetric_models_matches_the_gaussian_mixture_closed_form(widen):
    # A right on 60 of 100 labels, B on 40 (A only 30, B only 10, both 30, neither 30): equal
    # variances, so (1, −1) is an eigenvector of the sampling covariance S and for each prior
    # spread σ of the grid the posterior of d = θ_A − θ_B is normal with mean σ²/(σ² + s)·0.2,
    # variance 2σ²s/(σ² + s), s = S_AA − S_AB; the grid weight is N(0.2/√2; 0, σ² + s).
    # ``widen`` multiplies each component's posterior variance (mean and weight unchanged).
    from scipy import stats

    from zoorank.metrics.active.label_posterior import PRIOR_SAMPLES, SPREAD_GRID, TIE_TOLERANCE

    rows = [[1, 0]] * 30 + [[0, 1]] * 10 + [[1, 1]] * 30 + [[0, 0]] * 30
    c = np.array(rows, dtype=float)
    n, k = 100, PRIOR_SAMPLES
    var = 0.24 * n / (n - 1)  # ddof 1: p(1 − p) · n / (n − 1)
    cov_ab = (0.30 - 0.6 * 0.4) * n / (n - 1)  # E[ab] − E[a]E[b], ddof 1
    pbar = (100 + 1) / (200 + 2)
    s_aa = ((n - 1) * var + k * pbar * (1 - pbar)) / (n - 1 + k) / n
    s_ab = (n - 1) * cov_ab / (n - 1 + k) / n
    s = s_aa - s_ab
    y = 0.2 / np.sqrt(2)
    sig2 = SPREAD_GRID ** 2
    w = stats.norm.pdf(y, 0, np.sqrt(sig2 + s))
    w = w / w.sum()
    mean = sig2 / (sig2 + s) * 0.2
    sd = np.sqrt(widen * 2 * sig2 * s / (sig2 + s))
    t = TIE_TOLERANCE
    with np.errstate(divide="ignore", invalid="ignore"):
        ahead = np.where(sd > 0, stats.norm.sf((t - mean) / np.where(sd > 0, sd, 1)), 0.0)
        tied = np.where(sd > 0, stats.norm.cdf((t - mean) / np.where(sd > 0, sd, 1))
                        - stats.norm.cdf((-t - mean) / np.where(sd > 0, sd, 1)), 1.0)
    expected = float(np.sum(w * (ahead + 0.5 * tied)))
    got = labelled_p_best(c, 20000, 0, widen=widen)
    assert got[0] == pytest.approx(expected, abs=0.01)
    assert got.sum() == pytest.approx(1.0)


def test_a_clear_winner_gets_p_best_near_one_even_widened_for_the_stop():
    # model 0 right on every one of 400 labels, model 1 on 300 of them (a subset), model 2 on 280:
    # 25 pp ahead with no sample against it
    c = np.ones((400, 3))
    c[300:, 1] = 0
    c[280:, 2] = 0
    assert labelled_p_best(c, 4000, 0, population=2000)[0] > 0.99
    assert labelled_p_best(c, 4000, 0, population=2000, widen=3.0)[0] > 0.99


@pytest.mark.parametrize("k", [1, 5, 40, 200])
def test_exactly_tied_models_never_clear_the_stopping_target(k):
    # equal accuracies, each right alone on k samples: exchangeable, p(best) 1/2 each however
    # many labels (within Monte-Carlo error), below the target widened or not
    rows = [[1, 0]] * k + [[0, 1]] * k + [[1, 1]] * 300 + [[0, 0]] * 100
    c = np.array(rows, dtype=float)
    for widen in (1.0, 3.0):
        p = labelled_p_best(c, 4000, k, population=2000, widen=widen)
        assert p == pytest.approx([0.5, 0.5], abs=0.03)
    with pytest.raises(ValueError, match="widen"):
        labelled_p_best(c, widen=0.5)


@pytest.mark.parametrize("n", [0, 1, 40])
def test_p_best_at_several_widenings_from_one_mixture_equals_one_call_per_widening(n):
    # the stopping rule's widened p(best) and the printed one share one posterior mixture; each
    # must equal its own separate call exactly (same seed, same draws)
    c = (np.random.default_rng(3).random((n, 6)) < np.linspace(0.5, 0.7, 6)).astype(float)
    pair = labelled_p_best_widened(c, (1.0, STOP_WIDENING), 500, seed=7, population=100)
    assert len(pair) == 2
    for widen, got in zip((1.0, STOP_WIDENING), pair, strict=True):
        np.testing.assert_array_equal(got, labelled_p_best(c, 500, seed=7, population=100, widen=widen))
    with pytest.raises(ValueError, match="widen"):
        labelled_p_best_widened(c, (1.0, 0.5))


def test_probability_mass_set_is_the_fewest_models_holding_the_mass():
    assert probability_mass_set([0.1, 0.6, 0.3], 0.95).tolist() == [1, 2, 0]
    assert probability_mass_set([0.1, 0.6, 0.3], 0.85).tolist() == [1, 2]
    assert probability_mass_set([0.96, 0.04], 0.95).tolist() == [0]


def test_committee_disagreement_hand_computed():
    preds = np.array([[0, 1, 2], [0, 1, 1], [0, 2, 1]])
    d = committee_disagreement(preds, [0.5, 0.25, 0.25])
    # sample 0: everyone says 0 → 0; sample 1: class 1 holds 0.75 → 0.25; sample 2: 0.5 → 0.5
    assert d == pytest.approx([0.0, 0.25, 0.5])
    with pytest.raises(ValueError, match="weights"):
        committee_disagreement(preds, [1.0, -1.0, 0.0])


def _blobs(seed: int = 0):
    rng = np.random.default_rng(seed)
    centers = np.array([[10, 0, 0], [0, 10, 0], [0, 0, 10]], dtype=float)
    X = np.vstack([c + rng.normal(scale=0.5, size=(30, 3)) for c in centers])
    return X, np.repeat(np.arange(3), 30)


def test_cold_start_takes_one_image_per_well_separated_cluster():
    X, blob = _blobs()
    picks = cold_start(X, 3, seed=0)
    assert sorted(blob[picks].tolist()) == [0, 1, 2]


def test_select_diverse_prefers_high_scores_but_not_near_duplicates():
    X, blob = _blobs(1)
    scores = np.where(blob == 0, 1.0, 0.9)  # blob 0 scores highest everywhere
    picks = select_diverse(scores, X, 3, seed=0, pool_factor=30)
    assert sorted(blob[picks].tolist()) == [0, 1, 2]  # spread, not three of blob 0
    top = select_diverse(scores, X, 3, seed=0, pool_factor=1)
    assert set(blob[top].tolist()) == {0}  # a pool of exactly k: the k best


def test_next_batch_asks_where_the_committee_disagrees_and_never_an_excluded_row():
    X, blob = _blobs(2)
    good = X
    bad = X.copy()
    bad[blob == 2] = bad[blob == 2][:, [2, 1, 0]] * [1, 1, 1]  # blob 2 lands on blob 0
    labelled = np.array([0, 1, 30, 31, 60, 61])
    ev = label_evidence([good, bad], labelled, blob[labelled], 3, seed=0)
    assert ev.p_best[0] > ev.p_best[1]
    excluded = np.zeros(len(X), bool)
    excluded[labelled] = True
    picks = next_batch([good, bad], ev, excluded, 4, seed=0)
    assert not excluded[picks].any() and len(picks) == 4
    disagree = ev.predictions[0] != ev.predictions[1]
    assert disagree[picks].all()  # every pick separates the two models


def test_knn_votes_are_the_normalised_reference_vote_and_their_argmax_the_prediction():
    rng = np.random.default_rng(1)
    Z = rng.normal(size=(30, 4))
    labelled = np.arange(0, 30, 3)
    labels = rng.integers(0, 3, size=len(labelled))
    got = knn_votes(Z, labelled, labels, n_classes=3, k=3)
    U = Z / np.linalg.norm(Z, axis=1, keepdims=True)
    for i in range(len(Z)):  # the reference: plain loops, as in the test above
        cands = sorted(((float(U[i] @ U[j]), int(c)) for j, c in zip(labelled, labels) if j != i),
                       key=lambda t: -t[0])
        votes = np.zeros(3)
        for s, c in cands[:3]:
            votes[c] += max(s, 0.0) + 1e-6
        np.testing.assert_allclose(got[i], votes / votes.sum(), rtol=1e-9)
    assert (got.argmax(axis=1) == knn_predictions(Z, labelled, labels, 3, k=3)).all()


def test_random_batch_draws_only_free_rows_without_repeats_and_is_seeded():
    excluded = np.zeros(50, bool)
    excluded[::2] = True
    a = random_batch(excluded, 10, seed=3)
    assert len(a) == 10 == len(set(a.tolist())) and not excluded[a].any()
    assert (a == random_batch(excluded, 10, seed=3)).all()
    assert (random_batch(excluded, 99, seed=0) == np.flatnonzero(~excluded)).all()  # all 25


def test_uncertainty_batch_asks_the_rows_of_largest_consensus_vote_entropy():
    from scipy.stats import entropy

    X, blob = _blobs(2)
    bad = X.copy()
    bad[blob == 2] = bad[blob == 2][:, [2, 1, 0]]  # blob 2 lands on blob 0 in the second model
    labelled = np.array([0, 1, 30, 31, 60, 61])
    excluded = np.zeros(len(X), bool)
    excluded[labelled] = True
    picks = uncertainty_batch([X, bad], labelled, blob[labelled], 3, excluded, 5, seed=0)
    consensus = (knn_votes(X, labelled, blob[labelled], 3)
                 + knn_votes(bad, labelled, blob[labelled], 3)) / 2
    h = entropy(consensus, axis=1)
    h[excluded] = -np.inf
    assert len(picks) == 5 and not excluded[picks].any()
    assert np.sort(h[picks]).min() >= np.sort(h)[-5] - 1e-12  # the five largest entropies
    # blobs 0 and 2 overlap in the second model (its votes there split), blob 1 is unanimous
    assert set(blob[picks].tolist()) <= {0, 2}
    # before two classes are labelled: the cold start, one image per well-separated cluster
    cold = uncertainty_batch([X, bad], labelled[:1], blob[:1], 3, np.zeros(len(X), bool), 3)
    assert sorted(blob[cold].tolist()) == [0, 1, 2]
