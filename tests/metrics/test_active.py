"""zoorank.metrics.active: few-label kNN predictions, p(best | labels), committee disagreement,
diverse selection — each against a hand-computed case or a reference implementation."""

from __future__ import annotations

import numpy as np
import pytest

from zoorank.metrics.active import (
    cold_start,
    committee_disagreement,
    knn_predictions,
    label_evidence,
    labelled_p_best,
    next_batch,
    probability_mass_set,
    select_diverse,
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


def test_p_best_of_a_dominating_model_is_one_and_of_identical_models_is_split():
    correct = np.array([[1, 1, 0], [1, 0, 0], [1, 1, 1], [1, 0, 1]], dtype=float)
    p = labelled_p_best(correct, resamples=500, seed=1, prior_samples=0)
    # model 0 is right wherever another is, and strictly better somewhere: it wins every replicate
    assert p[0] == pytest.approx(1.0) and p.sum() == pytest.approx(1.0)
    twins = labelled_p_best(np.array([[1, 1], [0, 0], [1, 1]], dtype=float), 100, 0)
    assert twins == pytest.approx([0.5, 0.5], abs=0.1)  # the prior's coins: symmetric, noisy
    assert labelled_p_best(np.zeros((0, 4)), prior_samples=0) == pytest.approx([0.25] * 4)


def test_the_prior_keeps_one_lucky_sample_in_ten_below_the_stopping_target():
    correct = np.zeros((10, 2))
    correct[0, 1] = 1.0  # model 1 right on one sample, both wrong on the other nine
    assert labelled_p_best(correct, 2000, 0, prior_samples=0)[1] == pytest.approx(1.0)
    assert labelled_p_best(correct, 2000, 0)[1] < 0.9
    many = np.vstack([correct] * 10)  # the same pattern on 100 labels: now it is evidence
    assert labelled_p_best(many, 2000, 0)[1] > 0.9


def test_p_best_of_two_models_matches_the_dirichlet_closed_form():
    # model A right on sample 0 only, B on sample 1 only: A wins iff w0 > w1, P = 1/2 under
    # Dirichlet(1,1); with a third sample where both are right nothing changes.
    p = labelled_p_best(np.array([[1, 0], [0, 1], [1, 1]], dtype=float), 20000, 3,
                        prior_samples=0)
    assert p == pytest.approx([0.5, 0.5], abs=0.02)


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
