"""Rank uncertainty maths: folds, the fold bootstrap, rank intervals, p_best and the top set."""

import numpy as np
import pytest

from zoorank.stats.uncertainty import (
    MEASURED_COVERAGE,
    fold_assignment,
    fold_bootstrap,
    fold_means,
    fold_scale,
    rank_uncertainty,
    replicate_ranks,
    small_sample_factor,
    snap,
    split_p_best,
)


def test_fold_assignment_is_balanced_and_independent_of_row_order():
    ids = np.arange(1000, 2000)
    folds = fold_assignment(ids, 8, fraction=0.5, seed=3)
    assert (folds == -1).sum() == 500
    assert np.bincount(folds[folds >= 0]).tolist() == [63] * 4 + [62] * 4
    perm = np.random.default_rng(0).permutation(len(ids))
    assert np.array_equal(fold_assignment(ids[perm], 8, 0.5, 3), folds[perm])
    assert not np.array_equal(fold_assignment(ids, 8, 0.5, 4), folds)


def test_fold_scale_is_one_for_all_samples_in_many_folds_limit():
    assert fold_scale(2, 0.5, small_sample=False) == pytest.approx(1.0)
    assert fold_scale(10, 1.0, small_sample=False) == pytest.approx(np.sqrt(10 / 9))


def test_small_sample_factor_is_the_t_over_normal_quantile_ratio():
    # printed tables: t_7(0.99) = 2.998, z(0.99) = 2.326; t_31(0.99) = 2.453
    assert small_sample_factor(8) == pytest.approx(2.998 / 2.326, rel=1e-3)
    assert small_sample_factor(32) == pytest.approx(2.453 / 2.326, rel=1e-3)
    assert small_sample_factor(100_000) == pytest.approx(1.0, abs=1e-3)
    assert fold_scale(8, 0.5) == pytest.approx(np.sqrt(0.5 * 8 / 7) * 2.998 / 2.326, rel=1e-3)
    with pytest.raises(ValueError, match="n_folds"):
        small_sample_factor(1)


def test_measured_coverage_names_every_simulated_setting_with_its_error():
    assert {"8 tied", "4 tied best", "2 tied best", "unique best (1 pp ahead)"} <= set(
        MEASURED_COVERAGE)
    for coverage, error, reps in MEASURED_COVERAGE.values():
        assert 0 <= coverage <= 1 and error == pytest.approx(
            np.sqrt(max(coverage * (1 - coverage), 1e-12) / reps), abs=5e-4)


def test_fold_bootstrap_without_fold_spread_returns_the_point_value():
    reps = fold_bootstrap([3.0, np.nan], [[1.0, 1.0, 1.0], [2.0, 2.0, 2.0]], 50, seed=0)
    assert np.all(reps[:, 0] == 3.0)
    assert np.all(np.isnan(reps[:, 1]))


def test_fold_bootstrap_spread_matches_the_plug_in_variance_of_the_fold_mean():
    # two folds 0 and 2: the resampled mean is 0, 1 or 2 with probabilities 1/4, 1/2, 1/4, so the
    # replicate is point + s·{-1, 0, +1} with variance s²/2
    s = 1.7
    reps = fold_bootstrap([10.0], [[0.0, 2.0]], 40000, seed=1, scale=s)[:, 0]
    assert set(np.round(reps - 10.0, 9)) == {-s, 0.0, s}
    assert reps.mean() == pytest.approx(10.0, abs=0.03)
    assert reps.var() == pytest.approx(s * s / 2, rel=0.03)


def test_fold_bootstrap_draws_are_paired_across_models():
    folds = np.array([[0.0, 1.0, 2.0, 3.0], [10.0, 11.0, 12.0, 13.0]])
    reps = fold_bootstrap([0.0, 0.0], folds, 200, seed=2)
    assert np.allclose(reps[:, 0], reps[:, 1])  # same draw, same deviations


def test_replicate_ranks_ties_share_the_best_rank_and_nan_takes_no_place():
    r = replicate_ranks([[3.0, 3.0, 1.0, np.nan], [0.0, 2.0, 1.0, 5.0]])
    assert r[0, :3].tolist() == [1.0, 1.0, 3.0] and np.isnan(r[0, 3])
    assert r[1].tolist() == [4.0, 2.0, 3.0, 1.0]


def test_hand_computed_p_best_interval_and_top_set():
    point = np.array([1.0, 0.0, -5.0])
    reps = np.array([[1.0, 0.0, -5.0], [0.0, 1.0, -5.0], [1.0, 0.0, -5.0], [1.0, 0.0, -5.0]])
    u = rank_uncertainty(point, reps, confidence=0.5)
    assert u.p_best.tolist() == [0.75, 0.25, 0.0]
    # sorted ranks of model 0: 1, 1, 1, 2; the 25% quantile's position 0.75 rounds down (rank 1),
    # the 75% quantile's position 2.25 rounds up (rank 2); model 1: 1, 2, 2, 2
    assert u.rank_low.tolist() == [1.0, 1.0, 3.0]
    assert u.rank_high.tolist() == [2.0, 2.0, 3.0]
    assert u.share_vs_best.tolist() == [1.0, 0.25, 0.0]
    # MCS (T_max) by hand: model 2 leaves first (no spread and d > 0: t = +inf, p = 0); then
    # M = {0, 1}: d = (−½, ½), σ = (½, ½), t = (−1, 1), and only the replicate where model 1 wins
    # has a larger max statistic (2): p = 1/4, rejected at size 0.5, kept at size 0.1
    assert u.in_top_set.tolist() == [True, False, False]
    strict = rank_uncertainty(point, reps, confidence=0.9)
    assert strict.in_top_set.tolist() == [True, True, False]
    stricter = rank_uncertainty(point, reps[[0, 2, 3, 0, 2, 3, 0, 2, 3, 1, 0, 2, 3, 0, 2, 3, 0, 2,
                                             3, 0, 2, 3]], confidence=0.95)
    # one replicate in 22 where model 1 beats model 0: p = 1/22 < 0.05, distinguishable
    assert stricter.in_top_set.tolist() == [True, False, False]


def test_identical_models_get_identical_intervals_and_top_set_membership():
    rng = np.random.default_rng(0)
    base = rng.normal(size=(6, 8))
    folds = np.vstack([base, base[2]])  # model 6 is model 2 again
    point = np.append(base.mean(axis=1), base[2].mean())
    for shift in (0.0, 5.0):  # model 2 (and its copy) in the pack, then far ahead
        p = point.copy()
        p[[2, 6]] += shift
        reps = fold_bootstrap(p, folds, 500, seed=4, scale=fold_scale(8, 1.0))
        u = rank_uncertainty(p, reps, confidence=0.9)
        for field in ("rank_low", "rank_high", "p_best", "in_top_set"):
            values = getattr(u, field)
            assert values[2] == values[6], field
        if shift:
            assert u.in_top_set[[2, 6]].all() and u.in_top_set.sum() == 2
            # the two copies share the first two places in every replicate, and split p_best
            assert (u.rank_low[2], u.rank_high[2]) == (1, 2) and u.p_best[2] == 0.5
        assert np.nansum(u.p_best) == pytest.approx(1.0)


def test_well_separated_models_get_point_intervals_and_a_single_top_model():
    point = np.array([10.0, 5.0, 0.0])
    folds = np.array([[10.0, 10.1, 9.9, 10.0], [5.0, 5.1, 4.9, 5.0], [0.0, 0.1, -0.1, 0.0]])
    u = rank_uncertainty(point, fold_bootstrap(point, folds, 300, seed=0))
    assert u.rank_low.tolist() == u.rank_high.tolist() == [1.0, 2.0, 3.0]
    assert u.p_best.tolist() == [1.0, 0.0, 0.0]
    assert u.in_top_set.tolist() == [True, False, False]


def test_blocked_model_is_never_in_the_top_set_and_the_next_best_leads():
    point = np.array([10.0, 5.0, 0.0, np.nan])
    reps = np.tile(point, (20, 1))
    u = rank_uncertainty(point, reps, blocked=[True, False, False, False])
    assert u.in_top_set.tolist() == [False, True, False, False]
    assert u.rank_low[0] == 1 and u.p_best[0] == 1.0  # it still gets its interval
    assert np.isnan(u.rank_low[3]) and np.isnan(u.p_best[3])


def test_rank_uncertainty_rejects_bad_confidence():
    with pytest.raises(ValueError, match="confidence"):
        rank_uncertainty([1.0], [[1.0]], confidence=1.0)


def test_values_equal_to_six_significant_digits_tie():
    point = np.array([5.98765432, 5.98765431, 1.0])  # a checkpoint and its rotated copy
    reps = np.tile(point, (10, 1))
    u = rank_uncertainty(point, reps)
    assert u.rank_low.tolist() == [1, 1, 3] and u.rank_high.tolist() == [2, 2, 3]
    assert u.in_top_set.tolist() == [True, True, False]
    assert snap([[123456.7, 0.5]]).tolist() == [[123457.0, 0.0]]


def test_fold_bootstrap_equals_the_resampled_fold_means_of_its_seeded_draws():
    """Each replicate is point + scale · (mean of the drawn folds' values − mean of all folds),
    with the draws of ``default_rng(seed).integers(0, F, (B, F))`` and NaN folds skipped."""
    rng = np.random.default_rng(6)
    point = rng.normal(size=5)
    folds = rng.normal(size=(5, 4))
    folds[1, 2] = np.nan
    reps = fold_bootstrap(point, folds, 30, seed=9, scale=1.3)
    draws = np.random.default_rng(9).integers(0, 4, size=(30, 4))
    for b, draw in enumerate(draws):
        for m in range(5):
            drawn = folds[m, draw]
            expected = point[m] + 1.3 * (np.nanmean(drawn) - np.nanmean(folds[m]))
            if np.isnan(drawn).all():
                expected = point[m]
            assert reps[b, m] == pytest.approx(expected, abs=1e-12)


def test_p_best_is_split_among_ties_and_sums_to_one():
    # three seed models with one ensemble-level value tie for first in every replicate
    ranks = np.array([[1, 1, 1, 4], [1, 1, 1, 4], [4, 2, 2, 1]], dtype=float)
    assert split_p_best(ranks).tolist() == pytest.approx([2 / 9, 2 / 9, 2 / 9, 1 / 3])
    rng = np.random.default_rng(2)
    folds = rng.normal(size=(5, 6))
    folds[[1, 2]] = folds[0]  # three identical members
    point = folds.mean(axis=1)
    u = rank_uncertainty(point, fold_bootstrap(point, folds, 300, seed=1))
    assert np.nansum(u.p_best) == pytest.approx(1.0)
    assert u.p_best[0] == u.p_best[1] == u.p_best[2]
    assert u.in_top_set[0] == u.in_top_set[1] == u.in_top_set[2]


def test_fold_means_hand_case_skips_left_out_samples_and_marks_empty_folds():
    got = fold_means([1, 0, 1, 1, 0, 5], [0, 0, 1, 1, 1, -1], 3)
    assert got[:2].tolist() == [0.5, pytest.approx(2 / 3)] and np.isnan(got[2])
