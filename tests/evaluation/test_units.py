"""Per-zoo regrets and baselines against closed forms."""

import numpy as np
import pandas as pd
import pytest
from evaluation_tables import TRUTH, sweep_table

from zoorank.evaluation import check_table, first_near_best, unit_table, zoo_table
from zoorank.evaluation.units import metric_regret


def test_random_baseline_is_the_mean_gap_and_equals_a_pick_among_all_tied():
    zoos = zoo_table(sweep_table(1))
    truth = np.array([0.5, 0.6, 0.7, 0.8, 0.91, 1.0])
    assert zoos.loc[0, "random"] == pytest.approx(100 * (1.0 - truth.mean()))
    # a metric that ties every model picks uniformly at random: the same expected regret
    assert metric_regret(np.ones(6), truth, 1) == pytest.approx(zoos.loc[0, "random"])


def test_metric_regrets_and_the_name_heuristic():
    zoos = zoo_table(sweep_table(3))
    assert zoos["rankme"].tolist() == pytest.approx([9.0, 9.0, 9.0])
    assert zoos["rankme_proj"].tolist() == pytest.approx([0.0, 0.0, 40.0])
    # the longest-trained (epochs 3: models 4 and 5), then the widest (16: model 5, the best)
    assert zoos["name_heuristic"].tolist() == pytest.approx([0.0, 0.0, 0.0])
    assert zoos["final_loss"].isna().all()


def test_heuristic_ties_average_and_final_loss_picks_the_lowest():
    t = pd.DataFrame({"unit": "a", "truth": TRUTH, "epochs": [1, 1, 1, 1, 5, 5],
                      "final_loss": [0.1, 0.2, 0.3, 0.4, 0.5, 0.6]})
    z = zoo_table(t, metrics=[]).iloc[0]
    assert z["name_heuristic"] == pytest.approx(100 * (1.0 - (0.9 + 1.0) / 2))
    assert z["final_loss"] == pytest.approx(50.0)  # the lowest loss is the worst model


def test_direction_and_missing_metric():
    truth = TRUTH
    # uniformity: lower is better; the lowest value sits on the best model
    assert metric_regret(-truth, truth, -1) == pytest.approx(0.0)
    assert np.isnan(metric_regret(np.full(6, np.nan), truth, 1))


def test_first_near_best_counts_the_head_with_ties():
    truth = np.array([0.50, 0.80, 0.798, 0.70])
    # order by value: model 3 (0.9), then 0 and 2 tied (0.5), then 1: model 2 is near the best
    values = np.array([0.5, 0.1, 0.5, 0.9])
    assert first_near_best(values, truth, 1) == 2.0  # the head of 2 keeps 0 and 2 (tied)
    assert first_near_best(np.array([np.nan, np.nan, 1.0, 2.0]), truth, 1) == 2.0
    assert first_near_best(np.array([1.0, np.nan, np.nan, 2.0]), truth, 1) == np.inf
    assert np.isnan(first_near_best(np.full(4, np.nan), truth, 1))


def test_unit_regret_is_the_mean_over_its_zoos():
    three = sweep_table(3)  # rankme_proj: 0 pp on u0, 40 pp on u2
    a, b = three.query("unit == 'u0'"), three.query("unit == 'u2'")
    b = b.assign(unit="u0", zoo="z0-other-domain")
    units = unit_table(zoo_table(pd.concat([a, b])))
    assert list(units.index) == ["u0"] and units.loc["u0", "n_zoos"] == 2
    assert units.loc["u0", "rankme_proj"] == pytest.approx((0.0 + 40.0) / 2)


def test_bad_tables_name_the_column():
    with pytest.raises(ValueError, match="'unit'"):
        check_table(pd.DataFrame({"truth": [0.1]}))
    with pytest.raises(ValueError, match="'board'"):
        check_table(pd.DataFrame({"unit": ["a"], "truth": [0.1], "board": ["tables"]}))
    with pytest.raises(ValueError, match="'role'"):
        check_table(pd.DataFrame({"unit": ["a"], "truth": [0.1], "role": ["test"]}))


def test_a_metric_with_an_ideal_value_picks_the_model_closest_to_it():
    # alpha_req is ranked by |α − 1| (its registered target): the model with α = 1.05 is picked,
    # not the one with the smallest α (0.2, the worst model)
    alpha = np.array([0.2, 0.5, 1.6, 1.4, 0.8, 1.05])
    t = pd.DataFrame({"unit": "a", "truth": TRUTH, "alpha_req": alpha})
    z = zoo_table(t, metrics=["alpha_req"]).iloc[0]
    assert z["alpha_req"] == pytest.approx(0.0)
    assert z["first:alpha_req"] == 1.0
