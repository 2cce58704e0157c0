"""The metric record of the report's first screen (zoorank.report.metric_record_page) on hand-made
records, and the package's own record file against the benchmark's contract."""

from __future__ import annotations

import json
from pathlib import Path

import pytest

from zoorank.report.metric_record_page import WEAK_TAU, load_record, summarise

RECORD = {
    "commit": "abc1234", "date": "2026-11-26", "oracle": "knn_accuracy", "regret_tolerance_pp": 2.0,
    "zoos": {"z1": {"kind": "SSL encoders", "models": 12}, "z2": {"kind": "SSL encoders", "models": 8},
             "z3": {"kind": "autoencoders", "models": 4}},
    "metrics": {
        "good": {"zoos": {"z1": {"tau": 0.6, "regret_pp": 0.0, "top_set_holds_best": True,
                                 "top_set_size": 2},
                          "z2": {"tau": 0.4, "regret_pp": 1.0, "top_set_holds_best": True,
                                 "top_set_size": 1}},
                 "not_run": ["z3"], "picked_out_of_sample_on": ["z1"],
                 "failed_out_of_sample": False},
        "bad": {"zoos": {z: {"tau": t, "regret_pp": r, "top_set_holds_best": h, "top_set_size": 1}
                         for z, t, r, h in (("z1", 0.5, 0.5, True), ("z2", -0.2, 8.0, False),
                                            ("z3", 0.2, 2.5, False))},
                "not_run": [], "picked_out_of_sample_on": ["z2"], "failed_out_of_sample": True},
    },
}


def test_a_good_record_states_its_figures_and_zoo_counts():
    out = summarise("good", RECORD)
    assert out["has_record"] and not out["weak"]
    s = out["sentence"]
    # mean τ (0.6 + 0.4) / 2, mean regret (0 + 1) / 2, worst 1.0 on z2, 2 of 2 top-set hits
    assert "on the 2 of 3 validation zoos it ran on (SSL encoders)" in s
    assert "Kendall τ +0.50 on average (from +0.40 to +0.60)" in s
    assert "0.5 pp below the labels' best on average, 1.0 pp at worst (z2)" in s
    assert "held the labels' best model on 2 of 2" in s and "commit abc1234, 2026-11-26" in s
    # only the coverage warning: 3 zoos of two kinds, no shift
    assert len(out["warnings"]) == 1
    assert "3 (SSL encoders, autoencoders); none under a distribution shift" in out["warnings"][0]


def test_a_weak_record_says_where_it_missed():
    out = summarise("bad@heavy", RECORD)  # a view's metric takes its base metric's record
    assert out["weak"]
    text = " ".join(out["warnings"])
    # misses above 2 pp: z2 (8.0) and z3 (2.5), not z1 (0.5); mean τ 0.5/3 < WEAK_TAU
    assert "on 2 of 3 validation zoos: z2 (8.0 pp), z3 (2.5 pp)" in text
    assert (0.5 - 0.2 + 0.2) / 3 < WEAK_TAU and "mean τ +0.17 over 3 zoos" in text
    assert "failed out of sample" in text and "missed on z2" in text
    assert "missed the labels' best model on 2 of 3 zoos" in text


def test_a_metric_without_a_record_says_so():
    out = summarise("lidar", RECORD)
    assert not out["has_record"] and out["weak"] and out["sentence"] == ""
    assert out["warnings"][0].startswith("lidar has no record against labels")


def test_the_package_record_is_the_benchmarks_output():
    record = load_record()
    path = Path(__file__).resolve().parents[2] / "zoorank" / "report" / "metric_record.json"
    assert record == json.loads(path.read_text())
    assert record["generated_by"] == "benchmarks/science/default_lozo.py" and record["commit"]
    for name, entry in record["metrics"].items():
        for zoo, z in entry["zoos"].items():
            assert zoo in record["zoos"], (name, zoo)
            assert -1.0 <= z["tau"] <= 1.0 and z["regret_pp"] >= 0.0
        assert set(entry["zoos"]) | set(entry["not_run"]) == set(record["zoos"])
    # the default order starts with a metric that did not fail out of sample
    assert record["default_order"][0] not in record["failed_out_of_sample"]


@pytest.mark.parametrize("metric", ["rankme", "alignment", "nc"])
def test_the_record_sentence_matches_the_file(metric):
    entry = load_record()["metrics"][metric]
    taus = [z["tau"] for z in entry["zoos"].values()]
    s = summarise(metric)["sentence"]
    assert f"Kendall τ {sum(taus) / len(taus):+.2f} on average" in s
    assert f"on the {len(taus)} of {len(load_record()['zoos'])} validation zoos" in s
