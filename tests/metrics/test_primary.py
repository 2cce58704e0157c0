"""The default primary metric (``zoorank.metrics.primary``): preference order, the augmented-view
rule and the per-dataset choice by coverage (issue 17)."""

from __future__ import annotations

from zoorank.metrics.primary import (
    DEFAULT_COVERAGE,
    PRIMARY_PREFERENCE,
    default_for_coverage,
    default_order,
    default_primary,
)
from zoorank.metrics.registry import REGISTRY, config_names


def test_default_order_follows_the_preference_and_skips_augmented_metrics_without_a_view():
    every = config_names()
    order = default_order(every)
    assert order[: len(PRIMARY_PREFERENCE)] == [m for m in PRIMARY_PREFERENCE if m in order]
    assert all(REGISTRY[m].primary for m in order)
    clean = default_order(every, augmented=False)
    assert clean == [m for m in order if REGISTRY[m].inputs != "augmented"]
    assert {"lidar", "rankme_aug", "alignment"} <= set(order) - set(clean)
    assert default_primary(["lidar", "rankme"], augmented=False) == "rankme"
    assert default_primary(["lidar", "rankme"]) == PRIMARY_PREFERENCE[
        min(PRIMARY_PREFERENCE.index("lidar"), PRIMARY_PREFERENCE.index("rankme"))]
    assert default_primary([], augmented=False) is None


def test_default_for_coverage_takes_the_first_metric_that_ranks_nearly_the_whole_zoo():
    order = ["nc", "cluster_learnability", "rankme"]
    # a zoo of seed ensembles: NC ranks every model, so NC orders it
    assert default_for_coverage(order, {"nc": 12, "cluster_learnability": 12, "rankme": 12}) == "nc"
    # no ensembles: NC ranks nobody, the next metric orders it
    assert default_for_coverage(order, {"cluster_learnability": 8, "rankme": 8}) == \
        "cluster_learnability"
    # half the zoo in ensembles: NC would leave half unranked, so it is passed over
    assert default_for_coverage(order, {"nc": 6, "cluster_learnability": 12, "rankme": 12}) == \
        "cluster_learnability"
    # one model a metric failed on does not move the default (coverage 19/20 ≥ DEFAULT_COVERAGE)
    assert 19 / 20 >= DEFAULT_COVERAGE
    assert default_for_coverage(order, {"nc": 19, "cluster_learnability": 20, "rankme": 20}) == "nc"
    assert default_for_coverage(order, {}) is None
    assert default_for_coverage(order, {"nc": 0}) is None


def _record(regrets: dict[str, list[float]], taus: dict[str, float]):
    import pandas as pd

    zoos = ["A", "B", "C", "D"]
    return pd.DataFrame([{"zoo": z, "candidate": c, "regret": r[i], "tau": taus[c]}
                         for c, r in regrets.items() for i, z in enumerate(zoos)])


def test_leave_one_zoo_out_on_a_hand_made_record():
    import math

    from zoorank.metrics.primary import REGRET_TOLERANCE, leave_one_zoo_out, order_by_record

    assert REGRET_TOLERANCE == 2.0  # the figures below are hand-computed for this tolerance
    nan = math.nan
    table = _record({"x": [0.0, 0.5, 5.0, 0.0],   # fails on C only
                     "y": [1.0, 1.0, 1.0, 1.0],   # never fails, never best
                     "z": [0.0, 0.0, 0.0, 3.0],   # fails on D only
                     "nc": [0.0, 0.0, nan, nan]},  # ran on two zoos (ensembles)
                    {"x": 0.6, "y": 0.4, "z": 0.5, "nc": 0.8})
    out = leave_one_zoo_out(table)
    held = out["held_out"].set_index("zoo")
    # held out A (or B): nc ran on one other zoo only (last); y has no failure → y, regret 1
    assert held.loc["A", "order"] == ["y", "z", "x", "nc"]
    assert held.loc["A", "pick"] == held.loc["B", "pick"] == "y"
    assert held.loc["A", "regret"] == 1.0 and not held.loc["A", "failed"]
    # held out C: nc (worst 0) then x (worst 0.5) lead; nc did not run on C → x, which misses
    assert held.loc["C", "order"][:2] == ["nc", "x"]
    assert held.loc["C", "pick"] == "x" and held.loc["C", "regret"] == 5.0 and held.loc["C", "failed"]
    # held out D: z and nc tie on failures, worst and mean regret (0); nc's τ is higher → nc
    # leads, did not run on D → z, which misses
    assert held.loc["D", "order"][:2] == ["nc", "z"]
    assert held.loc["D", "pick"] == "z" and held.loc["D", "regret"] == 3.0
    assert out["failed"] == ["x", "z"]
    # in sample, on every zoo: nc, y, then the two that failed out of sample
    assert order_by_record(table) == ["nc", "y", "z", "x"]
    assert out["order"] == ["nc", "y", "z", "x"]


def test_a_candidate_that_fails_out_of_sample_goes_behind_every_other():
    from zoorank.metrics.primary import leave_one_zoo_out, order_by_record

    # w: best but for one miss (2.2 pp on C); t: never misses; s: misses everywhere (2.1 pp)
    table = _record({"t": [1.5] * 4, "w": [0.0, 0.0, 2.2, 0.0], "s": [2.1] * 4},
                    {"t": 0.1, "w": 0.9, "s": 0.0})
    assert order_by_record(table) == ["t", "w", "s"]
    out = leave_one_zoo_out(table)
    picks = out["held_out"].set_index("zoo")["pick"].to_dict()
    # held out C, w has no miss on A, B, D: it is picked there and misses
    assert picks == {"A": "t", "B": "t", "C": "w", "D": "t"}
    assert out["failed"] == ["w"] and out["order"] == ["t", "s", "w"]


def test_the_default_order_is_the_records_out_of_sample_choice():
    import json
    from pathlib import Path

    from zoorank.metrics.primary import leave_one_zoo_out

    path = Path(__file__).resolve().parents[2] / "zoorank" / "report" / "metric_record.json"
    record = json.loads(path.read_text())
    chosen = [m for m in record["default_order"] if m in REGISTRY and REGISTRY[m].primary]
    assert list(PRIMARY_PREFERENCE[: len(chosen)]) == chosen
    # the record's order is the rule applied to the record's own figures
    import pandas as pd

    table = pd.DataFrame([{"zoo": z, "candidate": m, "regret": v["regret_pp"], "tau": v["tau"]}
                          for m, e in record["metrics"].items() for z, v in e["zoos"].items()])
    out = leave_one_zoo_out(table)
    assert out["order"] == record["default_order"]
    assert out["failed"] == record["failed_out_of_sample"]
    assert PRIMARY_PREFERENCE[0] not in record["failed_out_of_sample"]
