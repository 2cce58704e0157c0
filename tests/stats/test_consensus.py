"""Consensus among metrics: Kendall W on hand cases and the rank disagreement."""

import numpy as np
import pytest

from zoorank.stats.consensus import kendall_w, rank_disagreement


def test_kendall_w_hand_computed_without_ties():
    # rank sums 4, 6, 8, 12 around m(n+1)/2 = 7.5: S = 35, W = 12·35 / (3²·(4³ − 4)) = 7/9
    ranks = [[1, 2, 3, 4], [1, 3, 2, 4], [2, 1, 3, 4]]
    assert kendall_w(ranks) == pytest.approx(7 / 9)


def test_kendall_w_hand_computed_with_ties():
    # rank sums 2.5, 3.5, 6 around 4: S = 6.5; ties T = 2³ − 2 = 6; W = 78 / (4·24 − 2·6) = 13/14
    assert kendall_w([[1, 2, 3], [1.5, 1.5, 3]]) == pytest.approx(13 / 14)


def test_kendall_w_is_one_for_identical_orders_and_zero_for_opposite_pairs():
    assert kendall_w([[1, 2, 3, 4, 5]] * 4) == pytest.approx(1.0)
    assert kendall_w([[1, 2, 3, 4], [4, 3, 2, 1]]) == pytest.approx(0.0)


def test_kendall_w_uses_models_every_metric_ranks():
    with_nan = [[1, 2, 3, np.nan], [1, 3, 2, 1], [2, 1, 3, 2]]
    assert kendall_w(with_nan) == pytest.approx(kendall_w([[1, 2, 3], [1, 3, 2], [2, 1, 3]]))
    assert np.isnan(kendall_w([[1, 2, 3]]))


def test_rank_disagreement_is_zero_for_agreement_and_one_for_first_versus_last():
    d = rank_disagreement([[1, 2, 3], [3, 2, 1]])
    assert d.tolist() == pytest.approx([1.0, 0.0, 1.0])
    assert rank_disagreement([[1, 2], [1, 2]]).tolist() == [0.0, 0.0]
