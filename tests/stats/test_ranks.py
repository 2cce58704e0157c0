"""zoorank.stats.ranks.merged_signal_ranks: one board of models ranked by different signals."""

from __future__ import annotations

import numpy as np

from zoorank.stats.ranks import merged_signal_ranks


def test_each_signal_ranks_its_own_models_stretched_to_the_board():
    # heads 0.9, 0.5, 0.7 (ranks 1, 3, 2 of 3); encoders 10, 30 (ranks 2, 1 of 2); N = 5
    values = np.array([0.9, 0.5, 0.7, 10.0, 30.0])
    groups = np.array([1, 1, 1, 0, 0])
    got = merged_signal_ranks(values, groups)[0]
    # by hand: heads 1 + (r − 1)·4/2 → 1, 5, 3; encoders 1 + (r − 1)·4/1 → 5, 1
    np.testing.assert_allclose(got, [1, 5, 3, 5, 1])


def test_missing_values_take_no_place_and_a_lone_model_is_first():
    values = np.array([[0.9, np.nan, 0.1, 3.0]])
    got = merged_signal_ranks(values, np.array(["h", "h", "h", "e"]))
    # ranked: 3 models; heads 0.9, 0.1 → 1, 3; the lone encoder → 1
    np.testing.assert_allclose(got[0], [1, np.nan, 3, 1])


def test_replicates_are_ranked_row_by_row_with_ties_averaged():
    reps = np.array([[1.0, 2.0, 5.0, 5.0], [2.0, 2.0, 1.0, 0.0]])
    got = merged_signal_ranks(reps, np.array([0, 0, 1, 1]))
    np.testing.assert_allclose(got, [[4, 1, 2.5, 2.5], [2.5, 2.5, 1, 4]])
