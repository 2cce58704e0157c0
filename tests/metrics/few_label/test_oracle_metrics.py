"""Label oracle: kNN / linear probe, URL R@1 and R-AUROC, loss-data curve and SDL/εSC/MDL
(spec url_sdl_nc.md PARTS A, B and E)."""

from __future__ import annotations

import math

import numpy as np
import pytest
import torch
from few_label_cases import digits_split

from zoorank.metrics._checks import DegenerateInputWarning
from zoorank.metrics.few_label.loss_data import loss_data_curve
from zoorank.metrics.few_label.oracle_metrics import (
    knn_accuracy,
    knn_few_label,
    linear_probe_accuracy,
    r_auroc,
    recall_at_1,
)

# ----------------------------------------------------------------------------------- helpers


def _dino_vote_reference(train_Z, train_y, test_Z, k, T):
    """DINO's weighted vote written out directly: full cosine matrix, top-k, exp(sim/T) sums."""
    a = train_Z / np.linalg.norm(train_Z, axis=1, keepdims=True)
    b = test_Z / np.linalg.norm(test_Z, axis=1, keepdims=True)
    sim = b @ a.T
    top = np.argsort(-sim, axis=1)[:, :k]
    classes = np.unique(train_y)
    votes = np.zeros((len(test_Z), len(classes)))
    for i in range(len(test_Z)):
        for j in top[i]:
            votes[i, np.searchsorted(classes, train_y[j])] += np.exp(sim[i, j] / T)
    return classes[np.argmax(votes, axis=1)]


def _pairwise_auroc(u, wrong):
    """P(u_wrong > u_right) + ½ P(tie), by enumerating every (wrong, right) pair."""
    pos, neg = u[wrong == 1], u[wrong == 0]
    wins = sum((p > q) + 0.5 * (p == q) for p in pos for q in neg)
    return wins / (len(pos) * len(neg))


def test_recall_at_1_hand_case_a_is_one_half():
    Z = np.array([[1.0, 0.0], [0.9, 0.1], [0.0, 1.0], [0.1, 0.9]])
    r1, correct = recall_at_1(Z, [0, 0, 1, 0], return_correct=True)
    assert r1 == 0.5
    np.testing.assert_array_equal(correct, [1, 1, 0, 0])
    assert recall_at_1(Z, [0, 0, 1, 0]) == 0.5


def test_recall_at_1_excludes_self_but_counts_an_exact_duplicate():
    Z = np.array([[1.0, 0.0], [1.0, 0.0], [0.0, 1.0], [0.1, 1.0]])
    _, correct = recall_at_1(Z, ["a", "a", "b", "c"], return_correct=True)
    np.testing.assert_array_equal(correct, [1, 1, 0, 0])


def test_r_auroc_hand_case_b_is_0_875():
    assert r_auroc([0.1, 0.2, 0.2, 0.9], [1, 1, 0, 0]) == pytest.approx(0.875)


def test_r_auroc_constant_uncertainty_is_one_half_and_negation_gives_complement():
    rng = np.random.default_rng(0)
    u = rng.standard_normal(40)
    correct = (rng.random(40) < 0.6).astype(int)
    assert r_auroc(np.full(40, 3.0), correct) == 0.5
    assert r_auroc(-u, correct) == pytest.approx(1.0 - r_auroc(u, correct))


def test_r_auroc_equals_pairwise_win_probability_with_ties():
    rng = np.random.default_rng(1)
    u = rng.integers(0, 5, 60).astype(float)  # many ties
    correct = rng.random(60) < 0.5
    expected = _pairwise_auroc(u, (~correct).astype(int))
    assert r_auroc(u, correct) == pytest.approx(expected)


def test_r_auroc_all_correct_or_all_wrong_returns_one_half_with_warning():
    for correct in ([1, 1, 1], [0, 0, 0]):
        with pytest.warns(DegenerateInputWarning, match="undefined"):
            assert r_auroc([0.1, 0.5, 0.3], correct) == 0.5


def test_r_auroc_rejects_nan_non_binary_and_mismatched_inputs():
    with pytest.raises(ValueError, match="NaN"):
        r_auroc([0.1, np.nan, 0.3], [1, 0, 1])
    with pytest.raises(ValueError, match="0/1"):
        r_auroc([0.1, 0.2, 0.3], [1, 2, 0])
    with pytest.raises(ValueError, match="3 entries"):
        r_auroc([0.1, 0.2, 0.3], [1, 0])


def test_knn_accuracy_matches_direct_numpy_dino_vote():
    rng = np.random.default_rng(2)
    centers = rng.standard_normal((4, 16))
    ytr, yte = rng.integers(0, 4, 150), rng.integers(0, 4, 60)
    Xtr = centers[ytr] + 1.5 * rng.standard_normal((150, 16))
    Xte = centers[yte] + 1.5 * rng.standard_normal((60, 16))
    labels = np.array(["cat", "dog", "eel", "fox"])  # labels of any type
    for k, T in ((20, 0.07), (5, 0.5), (1, 0.07)):
        pred = _dino_vote_reference(Xtr, labels[ytr], Xte, k, T)
        expected = float(np.mean(pred == labels[yte]))
        got = knn_accuracy(Xtr, labels[ytr], Xte, labels[yte], k=k, temperature=T)
        assert got == pytest.approx(expected)
    assert 0.3 < expected < 1.0  # a non-trivial case


def test_knn_accuracy_is_high_on_digits(digits):
    Xtr, ytr, Xte, yte = digits_split(digits)
    assert knn_accuracy(Xtr, ytr, Xte, yte) > 0.95


def test_linear_probe_is_accurate_on_digit_pixels_and_at_chance_on_random_features(digits):
    Xtr, ytr, Xte, yte = digits_split(digits)
    assert linear_probe_accuracy(Xtr, ytr, Xte, yte, seed=0) > 0.9
    rng = np.random.default_rng(3)
    noise_tr, noise_te = rng.standard_normal(Xtr.shape), rng.standard_normal(Xte.shape)
    # Features independent of the labels cannot beat chance (0.1) by more than sampling noise.
    assert abs(linear_probe_accuracy(noise_tr, ytr, noise_te, yte, seed=0) - 0.1) < 0.06


def test_linear_probe_single_c_and_validation():
    rng = np.random.default_rng(4)
    X, y = rng.standard_normal((40, 3)), np.repeat([0, 1], 20)
    X[y == 1] += 3.0
    assert linear_probe_accuracy(X[::2], y[::2], X[1::2], y[1::2], Cs=[1.0]) > 0.9
    with pytest.raises(ValueError, match="single class"):
        linear_probe_accuracy(X, np.zeros(40), X, y)
    with pytest.raises(ValueError, match="Cs"):
        linear_probe_accuracy(X, y, X, y, Cs=[0.0])
    with pytest.raises(ValueError, match="cv must be"):
        linear_probe_accuracy(X, y, X, y, cv=1)


def test_oracle_accepts_torch_tensors_and_matches_numpy(digits):
    Xtr, ytr, Xte, yte = digits_split(digits, n_train=400)
    Xte, yte = Xte[:300], yte[:300]
    t = torch.tensor
    assert knn_accuracy(t(Xtr, dtype=torch.float32), t(ytr), t(Xte), t(yte)) == knn_accuracy(
        Xtr, ytr, Xte, yte
    )
    assert linear_probe_accuracy(t(Xtr), t(ytr), t(Xte), t(yte), Cs=[0.1]) == (
        linear_probe_accuracy(Xtr, ytr, Xte, yte, Cs=[0.1])
    )
    r1, correct = recall_at_1(t(Xte, dtype=torch.float16), t(yte), return_correct=True)
    assert r1 == pytest.approx(recall_at_1(Xte, yte), abs=0.01)
    u = np.random.default_rng(5).random(300)
    assert r_auroc(t(u), t(correct).bool()) == r_auroc(u, correct)


def test_oracle_rejects_nan_and_bad_shapes():
    rng = np.random.default_rng(6)
    X, y = rng.standard_normal((20, 4)), np.repeat([0, 1], 10)
    bad = X.copy()
    bad[0, 0] = np.nan
    with pytest.raises(ValueError, match="NaN"):
        knn_accuracy(bad, y, X, y)
    with pytest.raises(ValueError, match="NaN"):
        recall_at_1(bad, y)
    with pytest.raises(ValueError, match="NaN"):
        linear_probe_accuracy(X, y, bad, y)
    with pytest.raises(ValueError, match="NaN"):
        loss_data_curve(bad, y, X, y, [10], 1, train_steps=1)
    with pytest.raises(ValueError, match="width"):
        knn_accuracy(X, y, X[:, :3], y)
    with pytest.raises(ValueError, match="train_y"):
        knn_accuracy(X, y[:5], X, y)
    with pytest.raises(ValueError, match="k="):
        knn_accuracy(X, y, X, y, k=21)
    with pytest.raises(ValueError, match="y must be 1-D"):
        recall_at_1(X, y[:5])
    with pytest.raises(ValueError, match="at least 2 rows"):
        recall_at_1(X[:1], y[:1])
    with pytest.raises(ValueError, match="only 20 rows"):
        loss_data_curve(X, y, X, y, [10, 30], 1)
    with pytest.raises(ValueError, match="probe"):
        loss_data_curve(X, y, X, y, [10], 1, probe="svm")


def test_return_correct_gives_each_test_points_correctness():
    # 1-NN by cosine, by hand: test point 0 is nearest train point 0 (class 0, right), test point
    # 1 nearest train point 1 (class 1, but its label is 0: wrong), test point 2 nearest 1 (right)
    Xtr = np.array([[1.0, 0.0], [0.0, 1.0]])
    Xte = np.array([[1.0, 0.1], [0.1, 1.0], [0.2, 1.0]])
    acc, correct = knn_accuracy(Xtr, [0, 1], Xte, [0, 0, 1], k=1, return_correct=True)
    assert correct.tolist() == [1, 0, 1] and acc == pytest.approx(2 / 3)
    rng = np.random.default_rng(0)
    X = rng.normal(size=(80, 5))
    y = (X[:, 0] > 0).astype(int)
    acc, correct = linear_probe_accuracy(X[:50], y[:50], X[50:], y[50:], return_correct=True)
    assert correct.shape == (30,) and acc == pytest.approx(correct.mean())
    assert acc == linear_probe_accuracy(X[:50], y[:50], X[50:], y[50:])


def loop_knn_few_label(X, y, k=20, temperature=0.07, max_folds=5):
    """Straightforward loop: fold j mod F per class, cosine similarities, exp(sim/T) votes."""
    classes = sorted(set(y.tolist()))
    folds = min(max_folds, min(int((y == c).sum()) for c in classes))
    fold = np.empty(len(y), dtype=int)
    for c in classes:
        for j, i in enumerate(np.flatnonzero(y == c)):
            fold[i] = j % folds
    unit = X / np.linalg.norm(X, axis=1, keepdims=True)
    correct = 0
    for i in range(len(y)):
        train = [j for j in range(len(y)) if fold[j] != fold[i]]
        sims = sorted(((float(unit[i] @ unit[j]), j) for j in train), reverse=True)
        top = sims[: min(k, len(train))]
        votes = dict.fromkeys(classes, 0.0)
        for s, j in top:
            votes[y[j]] += math.exp((s - top[0][0]) / temperature)
        best = max(votes.values())
        pred = min(c for c in classes if votes[c] == best)
        correct += pred == y[i]
    return correct / len(y)


def test_knn_few_label_matches_a_loop_over_held_out_samples(digits):
    images, labels = digits
    X, y = images.reshape(len(images), -1)[:400] / 16.0, labels[:400]
    idx = np.concatenate([np.flatnonzero(y == c)[:7] for c in range(10)])  # 7 labels per class
    Xs, ys = X[idx], y[idx]
    assert knn_few_label(Xs, ys) == pytest.approx(loop_knn_few_label(Xs, ys), abs=1e-12)
    assert knn_few_label(Xs, ys, k=3) == pytest.approx(loop_knn_few_label(Xs, ys, k=3), abs=1e-12)
    shuffled = np.random.default_rng(0).permutation(ys)
    assert knn_few_label(Xs, ys) > knn_few_label(Xs, shuffled) + 0.3


def test_knn_few_label_needs_two_labels_per_class(digits):
    images, labels = digits
    X, y = images.reshape(len(images), -1)[:400] / 16.0, labels[:400]
    idx = np.concatenate([np.flatnonzero(y == c)[:1] for c in range(10)])
    with pytest.raises(ValueError, match="at least 2 samples"):
        knn_few_label(X[idx], y[idx])
