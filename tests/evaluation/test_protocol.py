"""Leave-one-unit-out choices and the split-conformal fraction on tables with known answers."""

import math

import numpy as np
import pandas as pd
import pytest
from evaluation_tables import sweep_table

from zoorank.evaluation import (
    build_record,
    choose_metric,
    conformal_fraction,
    louo_fractions,
    louo_picks,
    shortlist_scores,
    unit_hits,
    unit_table,
    zoo_table,
)
from zoorank.evaluation.protocol import shortlist_size


def test_louo_differs_from_the_in_sample_choice():
    units = unit_table(zoo_table(sweep_table(5)))
    # in sample: rankme_proj's mean regret 40/5 = 8 pp beats rankme's 9 pp
    assert choose_metric(units, ["rankme", "rankme_proj"]) == "rankme_proj"
    picks = louo_picks(units, ["rankme", "rankme_proj"])
    # leaving out u0..u3, rankme_proj's mean over the others is 40/4 = 10 > 9: rankme (9 pp);
    # leaving out u4, rankme_proj is perfect on the others and misses by 40 pp there
    assert picks["metric"].tolist() == ["rankme"] * 4 + ["rankme_proj"]
    assert picks["regret"].tolist() == pytest.approx([9, 9, 9, 9, 40])


def test_a_candidate_on_fewer_than_half_the_units_is_not_chosen():
    t = sweep_table(5)
    t.loc[t["unit"] != "u0", "rankme_proj"] = np.nan
    units = unit_table(zoo_table(t))
    assert choose_metric(units, ["rankme_proj", "rankme"]) == "rankme"


@pytest.mark.parametrize(("n", "k"), [(8, 9), (9, 9), (19, 18), (29, 27)])
def test_conformal_order_statistic(n, k):
    scores = np.arange(1, n + 1) / 100  # the i-th smallest is i / 100
    c = conformal_fraction(scores, alpha=0.1, cap=0.5)
    assert c["order_statistic"] == k == math.ceil(0.9 * (n + 1))
    if k > n:
        assert c["fraction"] == 0.5 and c["capped"] and not c["guaranteed"]
    else:
        assert c["fraction"] == pytest.approx(k / 100) and c["guaranteed"]


def test_a_capped_fraction_is_no_guarantee():
    c = conformal_fraction(np.linspace(0.6, 0.9, 30), alpha=0.1, cap=0.5)
    assert c["fraction"] == 0.5 and c["capped"] and not c["guaranteed"]


def test_shortlist_size_rounds_up_and_caps():
    assert shortlist_size(0.3, 10) == 3 and shortlist_size(0.31, 10) == 4
    assert shortlist_size(0.5, 9) == 4 and shortlist_size(0.1, 1) == 1


def test_louo_shortlist_hits_by_hand():
    # unit u_i's model order puts the near-best model at position p_i of 10 (score p_i / 10)
    rows = []
    for u, p in enumerate([1, 2, 2, 3, 5]):
        truth = np.linspace(0.1, 0.55, 10)
        truth[p - 1] = 0.9
        rows += [{"unit": f"u{u}", "truth": truth[i], "rankme": 10.0 - i} for i in range(10)]
    zoos = zoo_table(pd.DataFrame(rows))
    scores = shortlist_scores(zoos, "rankme")
    assert scores.tolist() == pytest.approx([0.1, 0.2, 0.2, 0.3, 0.5])
    fractions = louo_fractions(scores, alpha=0.1, cap=0.5)
    # n = 4 others: ceil(0.9 * 5) = 5 > 4, so every fold is the cap
    assert fractions.tolist() == [0.5] * 5
    hits = unit_hits(zoos, "rankme", fractions)
    assert hits.tolist() == [True] * 5
    tight = unit_hits(zoos, "rankme", pd.Series(0.2, index=scores.index))
    assert tight.tolist() == [True, True, True, False, False]


def test_record_on_the_constructed_sweep():
    t = sweep_table(5)
    record = build_record(t, seed=0)
    entry = record["boards"]["encoders"]
    assert entry["metric"] == "rankme_proj"
    assert entry["held_out_units"]["protocol"] == "leave-one-unit-out"
    assert entry["regret_pp"]["held_out"]["mean"] == pytest.approx((4 * 9 + 40) / 5)
    assert entry["regret_pp"]["all_units"]["mean"] == pytest.approx(8)
    # the longest-then-widest model is the best on every unit: the heuristic's regret is 0
    assert entry["baselines"]["name_heuristic"]["mean"] == 0.0
    assert entry["paired"]["name_heuristic"]["mean_diff_pp"] == pytest.approx(15.2)
    assert entry["baselines"]["random"]["n"] == 5
    assert not entry["guaranteed"]  # 5 units: ceil(0.9 * 6) = 6 > 5
    # against a random pick (24.8 pp): -15.8 pp on four units, +15.2 on u4; a resample with three
    # or more draws of u4 (P = 0.058 > 5%) has a positive mean, so the 90% interval reaches over 0
    lo, hi = entry["paired"]["random"]["interval_90"]
    assert lo < 0 < hi and "does not beat a random pick" in entry["statement"]


def test_held_out_role_is_one_look_after_choosing_on_calibration_units():
    t = sweep_table(5)
    t["role"] = np.where(t["unit"] == "u4", "held_out", "calibration")
    entry = build_record(t)["boards"]["encoders"]
    assert entry["held_out_units"]["names"] == ["u4"] and entry["units"]["n"] == 4
    # chosen on u0..u3 (rankme_proj perfect there), then 40 pp on the held-out u4
    assert entry["metric"] == "rankme_proj"
    assert entry["regret_pp"]["held_out"]["median"] == pytest.approx(40)
