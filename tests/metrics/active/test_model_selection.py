"""CODA (zoorank.metrics.active.coda), ModelPicker and the uncertainty baseline on prediction tensors:
hand-computed cases, closed forms and second implementations written here."""

from __future__ import annotations

import math

import numpy as np
import pytest
from active_cases import prediction_zoo
from scipy import stats

from zoorank.metrics.active import coda
from zoorank.metrics.active import model_selection as ms


def test_p_best_concentrates_on_the_model_that_is_always_right():
    P, y = prediction_zoo([1.0, 0.75, 0.7, 0.7], seed=1)
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
    P, y = prediction_zoo([0.8], seed=2)
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


def test_model_picker_posterior_and_eig_match_their_closed_forms():
    votes = np.array([[0, 1, 1], [1, 1, 0]])
    post = ms.model_picker_posterior(votes, [1, 2], [1, 1], gamma=3.0)
    # model 0 right twice, model 1 once: weights 9 : 3
    np.testing.assert_allclose(post, [0.75, 0.25])
    eig = ms.model_picker_eig(votes, np.array([0.5, 0.5]), [0], n_classes=2, gamma=3.0)
    h = stats.entropy([0.75, 0.25])
    assert eig[0] == pytest.approx(math.log(2) - h, abs=1e-12)


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
