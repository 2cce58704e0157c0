"""Label-free accuracy estimates (zoorank.metrics.heads.classifier): each against its paper's formula,
written a second way here, or a hand-computed case."""

from __future__ import annotations

import itertools
import math

import numpy as np
import pytest
from scipy.optimize import linear_sum_assignment

from zoorank.metrics import registry
from zoorank.metrics.heads.classifier import (
    DEFAULT_CLASSIFIER_METRIC,
    atc_accuracy,
    average_confidence,
    consensus_agreement,
    cot_accuracy,
    dawid_skene_accuracy,
    doc_accuracy,
    majority_vote,
    nuclear_norm_accuracy,
    softmax,
)


def _ref_softmax(z):
    out = []
    for row in z:
        e = [math.exp(v - max(row)) for v in row]
        out.append([v / sum(e) for v in e])
    return np.array(out)


def _shifted_zoo(seed=0, n=300, k=5):
    """Source and target logits of a model whose target is noisier (a shift)."""
    rng = np.random.default_rng(seed)
    y_s = rng.integers(0, k, n)
    y_t = rng.integers(0, k, n)
    src = rng.normal(size=(n, k)) + 3.0 * np.eye(k)[y_s]
    tgt = rng.normal(size=(n, k)) * 1.5 + 1.5 * np.eye(k)[y_t]
    return src, y_s, tgt, y_t


def test_softmax_matches_the_definition_and_accepts_log_probabilities():
    z = np.array([[1.0, 2.0, 3.0], [0.0, 0.0, -1.0]])
    np.testing.assert_allclose(softmax(z), _ref_softmax(z), rtol=1e-12)
    P = np.array([[0.5, 0.5, 0.0], [0.2, 0.3, 0.5]])
    with np.errstate(divide="ignore"):
        np.testing.assert_allclose(softmax(np.log(P)), P, atol=1e-15)


def test_average_confidence_hand_case():
    # softmax of [0, log 3] is [1/4, 3/4]; of [0, 0] is [1/2, 1/2]
    z = np.array([[0.0, math.log(3.0)], [0.0, 0.0]])
    assert average_confidence(z) == pytest.approx((0.75 + 0.5) / 2)


def test_doc_is_source_accuracy_minus_the_confidence_drop():
    src, y_s, tgt, _ = _shifted_zoo()
    ps, pt = _ref_softmax(src), _ref_softmax(tgt)
    want = np.mean(ps.argmax(1) == y_s) - (ps.max(1).mean() - pt.max(1).mean())
    assert doc_accuracy(tgt, src, y_s) == pytest.approx(min(1.0, max(0.0, want)), abs=1e-12)
    # on the source itself DoC is the source accuracy
    assert doc_accuracy(src, src, y_s) == pytest.approx(np.mean(ps.argmax(1) == y_s))


def _atc_reference(src, y_s, tgt, score):
    """ATC written from the paper's definition: the threshold t that makes the share of source
    scores above t equal to the source accuracy, found by scanning every candidate."""
    def s(p):
        if score == "max_confidence":
            return p.max(1)
        return np.array([sum(v * math.log(v) for v in row if v > 0) for row in p])
    ss, st = s(_ref_softmax(src)), s(_ref_softmax(tgt))
    acc = np.mean(_ref_softmax(src).argmax(1) == y_s)
    candidates = np.concatenate([[-np.inf], np.sort(ss)])
    gaps = [abs(np.mean(ss > t) - acc) for t in candidates]
    t = candidates[int(np.argmin(gaps))]  # the smallest t that matches
    return float(np.mean(st > t))


@pytest.mark.parametrize("score", ["negative_entropy", "max_confidence"])
def test_atc_matches_the_threshold_definition(score):
    src, y_s, tgt, y_t = _shifted_zoo(seed=1)
    got = atc_accuracy(tgt, src, y_s, score=score)
    assert got == pytest.approx(_atc_reference(src, y_s, tgt, score))
    # on the source itself the estimate is the source accuracy (distinct scores)
    acc_s = np.mean(src.argmax(1) == y_s)
    assert atc_accuracy(src, src, y_s, score=score) == pytest.approx(acc_s)


def test_atc_hand_case():
    # source max-confidences 0.9, 0.8, 0.6, 0.55 with one error → t = 0.55 (the smallest score);
    # target confidences 0.95, 0.7, 0.5 → two of three above t
    def two_class(c):
        return [math.log(c), math.log(1 - c)]
    src = np.array([two_class(c) for c in (0.9, 0.8, 0.6, 0.55)])
    y_s = np.array([0, 0, 0, 1])
    tgt = np.array([two_class(c) for c in (0.95, 0.7, 0.5)])
    assert atc_accuracy(tgt, src, y_s, score="max_confidence") == pytest.approx(2 / 3)


def test_nuclear_norm_hand_cases():
    # confident, balanced one-hot predictions: singular values sqrt(n/K) each → 1
    k, per = 4, 5
    onehot = np.repeat(np.eye(k), per, axis=0)
    with np.errstate(divide="ignore"):
        assert nuclear_norm_accuracy(np.log(onehot)) == pytest.approx(1.0)
    # uniform rows: rank one, ‖P‖_* = ‖P‖_F = sqrt(n/K) → 1/K
    assert nuclear_norm_accuracy(np.zeros((20, k))) == pytest.approx(1 / k)
    # every image predicted as one class (no dispersity): sqrt(n) / sqrt(nK) = 1/sqrt(K)
    one_class = np.zeros((20, k))
    one_class[:, 0] = 50.0
    assert nuclear_norm_accuracy(one_class) == pytest.approx(1 / math.sqrt(k), abs=1e-9)


def test_nuclear_norm_matches_the_trace_of_the_gram_square_root():
    _, _, tgt, _ = _shifted_zoo(seed=2)
    P = _ref_softmax(tgt)
    w = np.linalg.eigvalsh(P.T @ P)  # ‖P‖_* = tr sqrt(PᵀP)
    want = np.sqrt(np.clip(w, 0, None)).sum() / math.sqrt(P.shape[0] * min(P.shape))
    assert nuclear_norm_accuracy(tgt) == pytest.approx(want, rel=1e-9)


def _cot_by_assignment(P, labels):
    """COT written as an assignment: when n·(class share) is an integer for every class, the
    optimal transport is a matching of the n images to n one-hot label slots."""
    slots = np.sort(labels)  # the source labels themselves are the slots (n source = n target)
    cost = 1.0 - P[:, slots]  # ‖p − e_k‖_∞ = 1 − p_k
    r, c = linear_sum_assignment(cost)
    return 1.0 - cost[r, c].sum() / len(P)


def test_cot_equals_the_assignment_of_images_to_source_label_slots():
    rng = np.random.default_rng(3)
    n, k = 30, 4
    y_s = rng.integers(0, k, n)
    tgt = rng.normal(size=(n, k)) * 2
    P = _ref_softmax(tgt)
    # the L∞ and total-variation costs agree for a probability vector and a one-hot
    for p, j in itertools.product(P[:3], range(k)):
        e = np.eye(k)[j]
        assert np.abs(p - e).max() == pytest.approx(np.abs(p - e).sum() / 2)
    assert cot_accuracy(tgt, y_s) == pytest.approx(_cot_by_assignment(P, y_s), abs=1e-9)


def test_cot_hand_case_under_label_shift():
    # two confident images both predicting class 0, source labels half 0 / half 1: one image must
    # move to class 1 at cost 1 − p_1 = 0.9, so W = 0.45 and the estimate 0.55 (AC would say 0.9)
    P = np.array([[0.9, 0.1], [0.9, 0.1]])
    y_s = np.array([0, 1])
    assert cot_accuracy(np.log(P), y_s) == pytest.approx(1 - (0.1 + 0.9) / 2)
    assert average_confidence(np.log(P)) == pytest.approx(0.9)


def test_consensus_agreement_hand_case():
    preds = np.array([[0, 1, 2, 2],
                      [0, 1, 1, 2],
                      [1, 1, 1, 0]])
    # votes: image 0 → 0 (2 of 3), image 1 → 1, image 2 → 1, image 3 → 2
    np.testing.assert_array_equal(majority_vote(preds), [0, 1, 1, 2])
    np.testing.assert_allclose(consensus_agreement(preds), [3 / 4, 4 / 4, 2 / 4])
    # a tie goes to the lowest class: votes 2 and 0 on one image → 0
    np.testing.assert_array_equal(majority_vote(np.array([[2], [0]])), [0])


def _one_coin_reference(preds, k, iters=200, smoothing=0.01):
    """One-coin Dawid–Skene EM written with loops, from the model's likelihood."""
    m, n = preds.shape
    T = np.zeros((n, k))
    for i in range(n):
        for j in range(m):
            T[i, preds[j, i]] += 1.0 / m
    for _ in range(iters):
        rho = (T.sum(0) + smoothing) / (n + k * smoothing)
        acc = np.array([(sum(T[i, preds[j, i]] for i in range(n)) + smoothing) / (n + 2 * smoothing)
                        for j in range(m)])
        new = np.zeros_like(T)
        for i in range(n):
            for c in range(k):
                like = rho[c]
                for j in range(m):
                    like *= acc[j] if preds[j, i] == c else (1 - acc[j]) / (k - 1)
                new[i, c] = like
            new[i] /= new[i].sum()
        T = new
    return np.array([np.mean([T[i, preds[j, i]] for i in range(n)]) for j in range(m)])


def _simulated_votes(accuracies, n, k, seed):
    rng = np.random.default_rng(seed)
    truth = rng.integers(0, k, n)
    preds = []
    for a in accuracies:
        right = rng.random(n) < a
        wrong = (truth + rng.integers(1, k, n)) % k
        preds.append(np.where(right, truth, wrong))
    return np.array(preds), truth


def test_dawid_skene_one_coin_matches_a_loop_implementation():
    preds, _ = _simulated_votes([0.9, 0.7, 0.5, 0.4], n=40, k=3, seed=4)
    got = dawid_skene_accuracy(preds, n_classes=3, tol=0.0, max_iter=200)
    np.testing.assert_allclose(got, _one_coin_reference(preds, 3), atol=1e-9)


@pytest.mark.parametrize("model", ["one_coin", "class_conditional"])
def test_dawid_skene_recovers_known_accuracies(model):
    true_acc = np.array([0.92, 0.8, 0.65, 0.5, 0.35])
    preds, truth = _simulated_votes(true_acc, n=4000, k=5, seed=5)
    measured = (preds == truth[None, :]).mean(axis=1)
    est = dawid_skene_accuracy(preds, n_classes=5, model=model)
    np.testing.assert_allclose(est, measured, atol=0.03)
    # it beats plain agreement with the vote on the weakest models (the vote is wrong sometimes)
    agree = consensus_agreement(preds, 5)
    assert np.abs(est - measured).mean() < np.abs(agree - measured).mean()


def test_one_class_heads_are_always_right():
    z = np.zeros((6, 1))
    y = np.zeros(6, dtype=int)
    for value in (average_confidence(z), doc_accuracy(z, z, y), atc_accuracy(z, z, y),
                  nuclear_norm_accuracy(z), cot_accuracy(z, y)):
        assert value == 1.0
    np.testing.assert_array_equal(dawid_skene_accuracy(np.zeros((3, 6), dtype=int)), np.ones(3))


@pytest.mark.parametrize("bad, match", [
    (np.array([[0.0, np.nan]]), "NaN"),
    (np.array([[0.0, np.inf]]), "NaN/\\+Inf"),
    (np.zeros((0, 3)), "n = 0"),
    (np.array([[-np.inf, -np.inf]]), "all -inf"),
    (np.zeros(3), "2-D"),
])
def test_degenerate_logits_are_errors_naming_the_problem(bad, match):
    with pytest.raises(ValueError, match=match):
        average_confidence(bad)
    with pytest.raises(ValueError, match=match):
        nuclear_norm_accuracy(bad)


def test_source_mismatches_are_errors():
    src, y_s, tgt, _ = _shifted_zoo()
    with pytest.raises(ValueError, match="columns"):
        doc_accuracy(tgt, src[:, :3], y_s)
    with pytest.raises(ValueError, match="source_labels must lie"):
        atc_accuracy(tgt, src, y_s + 10)
    with pytest.raises(ValueError, match="source_labels"):
        cot_accuracy(tgt, np.array([], dtype=int))


def test_registered_as_logits_metrics_outside_the_config_metrics():
    names = registry.classifier_metrics()
    assert list(names) == ["average_confidence", "doc_accuracy", "atc_accuracy",
                           "nuclear_norm_accuracy", "cot_accuracy", "consensus_agreement",
                           "dawid_skene_accuracy"]
    assert DEFAULT_CLASSIFIER_METRIC in names
    assert all(m.direction == 1 and not m.primary for m in names.values())
    assert not set(names) & set(registry.config_names())
    assert registry.is_label_free("nuclear_norm_accuracy")


def test_cot_above_its_cell_budget_solves_a_seeded_subset(monkeypatch):
    from zoorank.metrics.heads import classifier as module

    rng = np.random.default_rng(6)
    tgt, y_s = rng.normal(size=(400, 5)) * 2, rng.integers(0, 5, 200)
    exact = cot_accuracy(tgt, y_s)
    monkeypatch.setattr(module, "COT_MAX_CELLS", 1000)  # 200 of the 400 images
    sub = cot_accuracy(tgt, y_s, seed=1)
    assert sub == cot_accuracy(tgt, y_s, seed=1)  # seeded
    rows = np.sort(np.random.default_rng(1).choice(400, 200, replace=False))
    monkeypatch.setattr(module, "COT_MAX_CELLS", 10**9)
    assert sub == pytest.approx(cot_accuracy(tgt[rows], y_s), abs=1e-12)
    assert abs(sub - exact) < 0.05
