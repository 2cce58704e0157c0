"""benchmarks/science/calibration.py pinned on cases with closed-form answers: a clear winner is always in
the top set and always the right stop, exchangeable models share p(best) equally, and the
reliability and outcome arithmetic on hand-computed cases."""

from __future__ import annotations

import sys
from pathlib import Path

import numpy as np
import pytest

sys.path.insert(0, str(Path(__file__).resolve().parents[2] / "benchmarks" / "science"))

import calibration as cal  # noqa: E402


def test_outcome_shares_best_among_the_models_within_the_tolerance():
    assert cal.outcome_share(np.array([0.80, 0.797, 0.79])).tolist() == [0.5, 0.5, 0.0]
    assert cal.outcome_share(np.array([0.7, 0.9, 0.8])).tolist() == [0.0, 1.0, 0.0]


def test_reliability_hand_computed():
    pairs = [(np.array([0.85, 0.15]), np.array([1.0, 0.0])),
             (np.array([0.95, 0.05]), np.array([0.0, 1.0])),
             (np.array([0.35, 0.65]), np.array([0.0, 1.0]))]
    # leader: (0.85, 1), (0.95, 0) in bin 0.8–0.9 / 0.9–1.0, (0.65, 1) in 0.6–0.7
    ece, rows = cal.reliability(pairs, leader_only=True)
    assert ece == pytest.approx((0.15 + 0.95 + 0.35) / 3)
    assert [r[1] for r in rows] == [1, 1, 1]
    # all six: bins 0.0–0.1 (0.05 → 1), 0.1–0.2 (0.15 → 0), 0.3–0.4 (0.35 → 0), 0.6–0.7,
    # 0.8–0.9, 0.9–1.0
    ece_all, rows_all = cal.reliability(pairs)
    assert ece_all == pytest.approx((0.95 + 0.15 + 0.35 + 0.35 + 0.15 + 0.95) / 6)
    assert len(rows_all) == 6


def test_a_clear_winner_is_always_in_the_top_set_and_always_the_right_stop():
    winner = cal.Zoo("winner", "simulated", np.array([0.95, 0.70, 0.70, 0.70]))
    lf = cal.label_free(winner, reps=8, images=1000, folds=8, fraction=0.5, resamples=300,
                        confidence=0.95, seed=0)
    assert lf["coverage"] == 1.0 and lf["baseline"] == 1.0
    assert all(p[np.argmax(o)] > 0.99 for p, o in lf["pairs"])
    lab = cal.labelled(winner, reps=5, pool=1000, budgets=[200], round_size=50, max_labels=300,
                       target=0.9, seed=0, resamples=300, baseline_reps=0)
    assert lab["product"]["fires"] == 5 and lab["product"]["right"] == 5
    assert lab["product"]["regret"] == 0.0


def test_exchangeable_tied_models_share_p_best_equally_within_mc_error():
    tied = cal.Zoo("tied", "simulated", np.full(4, 0.8))
    lf = cal.label_free(tied, reps=30, images=1000, folds=8, fraction=0.5, resamples=300,
                        confidence=0.95, seed=1)
    lab = cal.labelled(tied, reps=30, pool=1000, budgets=[100], round_size=100, max_labels=100,
                       target=0.9, seed=1, resamples=300, baseline_reps=0)
    for ps in ([p for p, _ in lf["pairs"]], [p for p, _ in lab["product"]["pairs"][100]]):
        ps = np.array(ps)
        assert ps.sum(axis=1) == pytest.approx(np.ones(len(ps)))
        error = ps.std(axis=0, ddof=1) / np.sqrt(len(ps))
        assert np.all(np.abs(ps.mean(axis=0) - 0.25) <= 4 * error + 1e-9)


def test_the_baseline_bootstrap_sums_to_one_and_lets_one_lucky_label_win():
    correct = np.zeros((10, 2))
    correct[0, 1] = 1.0
    p = cal.bootstrap_p_best(correct, 2000, 0, prior_samples=0)
    assert p == pytest.approx([0.0, 1.0])  # the overconfidence the product's posterior removed
    assert cal.bootstrap_p_best(correct, 500, 0).sum() == pytest.approx(1.0)


def test_the_harness_few_label_knn_is_the_products_on_every_nested_look():
    # the incremental kNN over nested labelled prefixes equals knn_predictions (the product's,
    # as label_evidence scores the labelled rows) recomputed from scratch at each look
    from zoorank.metrics.active.knn_committee import knn_predictions

    rng = np.random.default_rng(3)
    codes = rng.integers(0, 4, size=150)
    Zs = [rng.normal(size=(150, 6)) + 1.5 * np.eye(6)[codes % 6] * s for s in (0.5, 1.0, 2.0)]
    units = [Z / np.linalg.norm(Z, axis=1, keepdims=True) for Z in Zs]
    order = rng.permutation(150)
    looks = [3, 5, 20, 37, 120]
    got = cal.few_label_correct(units, codes, order, looks)
    for n in looks:
        rows = order[:n]
        ref = np.stack([knn_predictions(Z, rows, codes[rows], 4)[rows] == codes[rows]
                        for Z in Zs], axis=1)
        assert got[n].shape == (n, 3)
        assert (got[n] == ref).all()


def test_an_embedding_zoo_whose_models_are_copies_never_stops():
    # three copies of one embedding: every look sees three identical correctness columns, so
    # p(best | labels) is 1/3 each (within Monte-Carlo error) and the rule never fires
    rng = np.random.default_rng(4)
    codes = rng.integers(0, 3, size=300)
    Z = rng.normal(size=(300, 5)) + 2 * np.eye(5)[codes]
    U = Z / np.linalg.norm(Z, axis=1, keepdims=True)
    every = np.arange(300)
    from zoorank.metrics.active.knn_committee import knn_predictions

    truth = (knn_predictions(Z, every, codes, 3) == codes).astype(float)
    zoo = cal.Zoo("copies", "real", correct=np.stack([truth] * 3, axis=1),
                  embeddings=(U, U, U), codes=codes)
    resamples = 2000
    lab = cal.labelled(zoo, reps=4, pool=300, budgets=[40], round_size=40, max_labels=200,
                       target=0.9, seed=0, resamples=resamples, baseline_reps=0)
    assert lab["product"]["fires"] == 0
    # four Monte-Carlo standard errors of a share of 1/3 over the draws (0.03 at 300 draws was
    # one: it failed on another machine's BLAS)
    tolerance = 4 * np.sqrt((1 / 3) * (2 / 3) / resamples)
    for p, o in lab["product"]["pairs"][40]:
        assert p == pytest.approx([1 / 3] * 3, abs=tolerance)
        assert o == pytest.approx([1 / 3] * 3)


def test_wilson_interval_equals_its_closed_form():
    z = 1.959963984540054
    for k, n in ((3, 10), (0, 12), (117, 117), (11, 1800)):
        p = k / n
        centre = (p + z * z / (2 * n)) / (1 + z * z / n)
        half = z / (1 + z * z / n) * np.sqrt(p * (1 - p) / n + z * z / (4 * n * n))
        assert cal.wilson(k, n) == pytest.approx((max(0.0, centre - half), min(1.0, centre + half)))
    assert all(np.isnan(cal.wilson(0, 0)))


def test_brier_hand_computed_and_the_uniform_p_scores_one_over_k_minus_one_over_m():
    pairs = [(np.array([0.7, 0.2, 0.1]), np.array([1.0, 0.0, 0.0])),
             (np.array([0.5, 0.5, 0.0]), np.array([0.0, 0.5, 0.5]))]
    # (0.09 + 0.04 + 0.01) and (0.25 + 0 + 0.25)
    assert cal.brier(pairs) == pytest.approx((0.14 + 0.5) / 2)
    # uniform p over M = 3: 1/k − 1/M with k = 1 and k = 2 tied best
    assert cal.brier(cal.uniform(pairs)) == pytest.approx(((1 - 1 / 3) + (1 / 2 - 1 / 3)) / 2)
    # the pooled ECE cannot tell the uniform p from a calibrated one: it scores 0 on any pairs
    assert cal.reliability(cal.uniform(pairs))[0] == pytest.approx(0.0)


def test_leader_summary_hand_computed_on_runs_of_two_predictions():
    # two runs × two budgets; leaders: 0.9 (outcome 1), 0.9 (outcome 0), 0.6 (1), 0.6 (1)
    runs = [[(np.array([0.9, 0.1]), np.array([1.0, 0.0])), (np.array([0.9, 0.1]), np.array([0.0, 1.0]))],
            [(np.array([0.4, 0.6]), np.array([0.0, 1.0])), (np.array([0.6, 0.4]), np.array([1.0, 0.0]))]]
    s = cal.leader_summary(runs, boot=200)
    assert s["runs"] == 2 and s["predictions"] == 4
    # bins 0.9–1.0: mean p 0.9, outcome 0.5; 0.6–0.7: p 0.6, outcome 1
    assert s["ece"] == pytest.approx(0.5 * 0.4 + 0.5 * 0.4)
    # Σ (p − o)² per prediction: 0.02, 1.62, 0.32, 0.32
    assert s["brier"] == pytest.approx((0.02 + 1.62 + 0.32 + 0.32) / 4)
    assert s["brier_uniform"] == pytest.approx(0.5)
    assert s["skill"] == pytest.approx(1 - s["brier"] / 0.5)
    assert s["sharpness"] == pytest.approx(0.75) and s["sharpness_uniform"] == pytest.approx(0.5)
    assert (s["confident"], s["confident_p"], s["confident_outcome"]) == (2, pytest.approx(0.9), 0.5)
    assert s["right"] == 3 and s["confident_right"] == 1
    lo, hi = s["brier_ci"]
    assert lo <= s["brier"] <= hi
    # two runs: the bootstrap's skills are those of run 1, run 2 or both, so they bracket it
    lo, hi = s["skill_ci"]
    assert lo <= s["skill"] <= hi


def test_a_leader_saying_point_nine_for_a_three_way_tie_reads_over_confident():
    tie = np.array([1 / 3, 1 / 3, 1 / 3, 0.0])
    runs = [[(np.array([0.9, 0.05, 0.03, 0.02])[np.roll(np.arange(4), r % 3)], tie)]
            for r in range(60)]
    s = cal.leader_summary(runs, boot=200)
    assert s["confident"] == 60 and s["confident_outcome"] == pytest.approx(1 / 3)
    assert cal.confidence_verdict(s) == "over-confident"
    # a single confident prediction that came true is no evidence either way
    one = cal.leader_summary([[(np.array([0.85, 0.15]), np.array([1.0, 0.0]))]], boot=50)
    assert cal.confidence_verdict(one) == "consistent"
    none = cal.leader_summary([[(np.array([0.5, 0.5]), np.array([1.0, 0.0]))]], boot=50)
    assert cal.confidence_verdict(none) == "no p ≥ 0.8"


def test_the_stop_records_the_labels_it_stopped_at():
    winner = cal.Zoo("winner", "simulated", np.array([0.95, 0.70, 0.70, 0.70]))
    lab = cal.labelled(winner, reps=4, pool=1000, budgets=[100], round_size=50, max_labels=300,
                       target=0.9, seed=0, resamples=300, baseline_reps=0)["product"]
    assert len(lab["stops"]) == lab["fires"] == 4
    assert all(s % 50 == 0 and 50 <= s <= 300 for s in lab["stops"])
