"""Ranks, aggregation and agreement (zoorank.metrics.agreement) against scipy and hand cases."""

from __future__ import annotations

import numpy as np
import pandas as pd
import pytest
from scipy import stats

from zoorank.metrics.agreement import (
    aggregate_ranks,
    agreement,
    bootstrap_indices,
    joint_rank,
    kendall_tau_b_rows,
    rank_agreement_matrix,
    rank_within,
    top1_regret,
    topk_recall,
)


def test_rank_within_matches_scipy_rankdata_with_ties_and_puts_nan_last():
    values = np.array([0.3, np.nan, 0.9, 0.3, 0.1, np.nan, 0.9])
    ranks = rank_within(values, direction=+1)
    finite = ~np.isnan(values)
    np.testing.assert_allclose(ranks[finite], stats.rankdata(-values[finite], method="average"))
    # the two NaNs share places 6 and 7
    np.testing.assert_allclose(ranks[~finite], [6.5, 6.5])
    # hand case: 0.9, 0.9 tie for 1-2; 0.3, 0.3 for 3-4; 0.1 is 5th
    np.testing.assert_allclose(ranks, [3.5, 6.5, 1.5, 3.5, 5, 6.5, 1.5])


def test_rank_within_lower_is_better_reverses_the_order():
    values = np.array([2.0, 1.0, 3.0, np.nan])
    np.testing.assert_allclose(rank_within(values, direction=-1), [2, 1, 3, 4])
    np.testing.assert_allclose(rank_within(values, direction=+1), [2, 3, 1, 4])


def test_rank_within_rejects_a_bad_direction():
    with pytest.raises(ValueError, match="direction"):
        rank_within([1.0, 2.0], direction=0)


def test_rank_product_is_the_weighted_geometric_mean_of_ranks():
    table = pd.DataFrame({"a": [1.0, 2.0, 3.0], "b": [3.0, 1.0, 2.0]}, index=["m1", "m2", "m3"])
    out = aggregate_ranks(table, "rank_product")
    np.testing.assert_allclose(out.to_numpy(), [np.sqrt(3), np.sqrt(2), np.sqrt(6)])
    np.testing.assert_allclose(out.to_numpy(), stats.gmean(table.to_numpy(), axis=1))
    weighted = aggregate_ranks(table, "rank_product", weights={"a": 3.0, "b": 1.0})
    np.testing.assert_allclose(weighted.to_numpy(),
                               stats.gmean(table.to_numpy(), axis=1, weights=[3.0, 1.0]))


def test_mean_rank_and_borda_hand_cases():
    table = pd.DataFrame({"a": [1.0, 2.0, 3.0], "b": [3.0, 1.0, 2.0]})
    np.testing.assert_allclose(aggregate_ranks(table, "mean_rank"), [2.0, 1.5, 2.5])
    # Borda: 3 models per column, points n - r: a -> 2,1,0 ; b -> 0,2,1
    np.testing.assert_allclose(aggregate_ranks(table, "borda"), [2.0, 3.0, 1.0])
    np.testing.assert_allclose(aggregate_ranks(table, "borda", weights={"b": 2.0}),
                               [2.0, 5.0, 2.0])


def test_aggregation_skips_missing_datasets_and_renormalises():
    table = pd.DataFrame({"a": [1.0, 2.0], "b": [np.nan, 1.0]})
    np.testing.assert_allclose(aggregate_ranks(table, "mean_rank"), [1.0, 1.5])
    np.testing.assert_allclose(aggregate_ranks(table, "rank_product"), [1.0, np.sqrt(2)])


def test_aggregation_rejects_unknown_methods_and_weights():
    table = pd.DataFrame({"a": [1.0, 2.0]})
    with pytest.raises(ValueError, match="aggregation"):
        aggregate_ranks(table, "median")
    with pytest.raises(ValueError, match="unknown columns"):
        aggregate_ranks(table, "mean_rank", weights={"zz": 1.0})


def test_joint_rank_is_the_geometric_mean_of_two_ranks():
    np.testing.assert_allclose(joint_rank([1, 4, 2], [4, 1, 2]), [2.0, 2.0, 2.0])
    with pytest.raises(ValueError, match=">= 1"):
        joint_rank([0, 1], [1, 2])


def _pool(seed: int = 3, n: int = 12):
    rng = np.random.default_rng(seed)
    oracle = rng.uniform(0.2, 0.9, n)
    metric = 5 * oracle + rng.normal(0, 0.4, n)
    return metric, oracle


def test_agreement_point_estimates_equal_scipy_on_the_same_vectors():
    metric, oracle = _pool()
    out = agreement(metric, oracle, bootstrap=0)
    assert out["n_models"] == len(metric)
    assert out["kendall_tau"] == pytest.approx(stats.kendalltau(metric, oracle).statistic)
    assert out["spearman"] == pytest.approx(stats.spearmanr(metric, oracle).statistic)
    assert out["pearson"] == pytest.approx(stats.pearsonr(metric, oracle).statistic)


def test_agreement_orients_a_lower_is_better_metric_and_oracle():
    metric, oracle = _pool()
    out = agreement(-metric, -oracle, direction=-1, oracle_direction=-1, bootstrap=0)
    assert out["kendall_tau"] == pytest.approx(stats.kendalltau(metric, oracle).statistic)
    assert out["pearson"] == pytest.approx(stats.pearsonr(metric, oracle).statistic)
    flipped = agreement(-metric, oracle, direction=+1, bootstrap=0)
    assert flipped["kendall_tau"] == pytest.approx(-stats.kendalltau(metric, oracle).statistic)


def test_agreement_ranks_a_failed_metric_last():
    metric = np.array([3.0, 2.0, 1.0, np.nan])
    oracle = np.array([0.9, 0.8, 0.7, 0.1])
    out = agreement(metric, oracle, bootstrap=0)
    assert out["n_metric_nan"] == 1
    assert out["kendall_tau"] == pytest.approx(1.0)
    assert out["spearman"] == pytest.approx(1.0)
    # Pearson uses the three finite models only
    assert out["pearson"] == pytest.approx(stats.pearsonr(metric[:3], oracle[:3]).statistic)


def test_top1_regret_hand_case():
    metric = [0.1, 0.5, 0.3, 0.4]
    oracle = [0.70, 0.60, 0.95, 0.80]
    regret, picked, best = top1_regret(metric, oracle)
    assert (picked, best) == (0.60, 0.95)
    assert regret == pytest.approx(0.35)
    # lower-is-better oracle (a loss): best is the smallest value
    regret, picked, best = top1_regret(metric, [3.0, 2.0, 1.0, 4.0], oracle_direction=-1)
    assert (picked, best, regret) == (2.0, 1.0, 1.0)
    # a tie at the top is a random pick: the mean oracle value of the tied models
    regret, picked, _ = top1_regret([1.0, 1.0, 0.0], [0.5, 0.9, 1.0])
    assert picked == pytest.approx(0.7) and regret == pytest.approx(0.3)


def test_topk_recall_hand_case():
    metric = [5, 4, 3, 2, 1]
    oracle = [1, 5, 4, 3, 2]
    # metric top-2 = {0, 1}, oracle top-2 = {1, 2}
    assert topk_recall(metric, oracle, k=2) == 0.5
    assert topk_recall(metric, oracle, k=5) == 1.0


def test_vectorised_tau_b_equals_scipy_on_each_bootstrap_resample():
    metric, oracle = _pool(n=9)
    idx = bootstrap_indices(len(metric), 20, seed=1)
    taus = kendall_tau_b_rows(metric[idx], oracle[idx])
    for row, tau in zip(idx, taus):
        assert tau == pytest.approx(stats.kendalltau(metric[row], oracle[row]).statistic)


def test_bootstrap_ci_contains_the_point_estimate_and_is_deterministic_for_a_seed():
    metric, oracle = _pool(n=15)
    a = agreement(metric, oracle, bootstrap=500, seed=7)
    b = agreement(metric, oracle, bootstrap=500, seed=7)
    c = agreement(metric, oracle, bootstrap=500, seed=8)
    for name, point in (("kendall", "kendall_tau"), ("spearman", "spearman"),
                        ("pearson", "pearson")):
        assert a[f"{name}_ci_low"] <= a[point] <= a[f"{name}_ci_high"]
        assert a[f"{name}_ci_low"] < a[f"{name}_ci_high"]
        assert (a[f"{name}_ci_low"], a[f"{name}_ci_high"]) == (
            b[f"{name}_ci_low"], b[f"{name}_ci_high"])
    assert (a["kendall_ci_low"], a["kendall_ci_high"]) != (c["kendall_ci_low"],
                                                           c["kendall_ci_high"])


def test_agreement_of_a_constant_metric_is_undefined_not_an_error():
    out = agreement([1.0, 1.0, 1.0], [0.1, 0.2, 0.3], bootstrap=50)
    assert np.isnan(out["kendall_tau"]) and np.isnan(out["pearson"])


def test_rank_agreement_matrix_is_symmetric_with_unit_diagonal_and_oriented():
    values = pd.DataFrame({"up": [1.0, 2.0, 3.0, 4.0], "down": [4.0, 3.0, 2.0, 1.0],
                           "noise": [2.0, 1.0, 4.0, 3.0]})
    tau = rank_agreement_matrix(values, {"up": 1, "down": -1, "noise": 1})
    np.testing.assert_allclose(np.diag(tau), 1.0)
    np.testing.assert_allclose(tau.to_numpy(), tau.to_numpy().T)
    assert tau.loc["up", "down"] == pytest.approx(1.0)
    expected = stats.kendalltau(values["up"], values["noise"]).statistic
    assert tau.loc["up", "noise"] == pytest.approx(expected)
