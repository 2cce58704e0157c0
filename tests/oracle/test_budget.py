"""The label-budget curve (zoorank.oracle.budget): subsets, cells, τ rows and crossovers, without Ray."""

from __future__ import annotations

import json
import math

import numpy as np
import pandas as pd
import pytest
from scipy import stats

from zoorank.metrics import logme
from zoorank.oracle import budget


def test_stratified_subset_takes_k_per_class_seeded_and_nested():
    labels = np.repeat([3, 7, 9], [20, 8, 30])
    small = budget.stratified_subset(labels, 5, seed=1)
    large = budget.stratified_subset(labels, 10, seed=1)
    assert {c: int((labels[small] == c).sum()) for c in (3, 7, 9)} == {3: 5, 7: 5, 9: 5}
    # a class smaller than k gives what it has
    assert {c: int((labels[large] == c).sum()) for c in (3, 7, 9)} == {3: 10, 7: 8, 9: 10}
    assert set(small) <= set(large)
    assert np.array_equal(small, budget.stratified_subset(labels, 5, seed=1))
    assert not np.array_equal(small, budget.stratified_subset(labels, 5, seed=2))


def test_transferability_rows_score_the_subset_of_each_cell(digits):
    images, labels = digits
    Z = images.reshape(len(images), -1)[:300] / 16.0
    y = labels[:300]
    rows = budget.transferability_rows(Z, y, ["logme", "gbc"], (1, 5), seeds=2, base_seed=10)
    assert [r["metric"] for r in rows] == [
        "logme:k1s10", "gbc:k1s10", "logme:k5s10", "gbc:k5s10",
        "logme:k1s11", "gbc:k1s11", "logme:k5s11", "gbc:k5s11"]
    by_name = {r["metric"]: r for r in rows}
    idx = budget.stratified_subset(y, 5, 11)
    assert by_name["logme:k5s11"]["value"] == logme(Z[idx], y[idx])
    assert by_name["logme:k5s11"]["n"] == 50
    # GBC cannot estimate a variance from one sample per class: NaN with the reason
    assert math.isnan(by_name["gbc:k1s10"]["value"])
    assert "at least 2 samples" in by_name["gbc:k1s10"]["params"]["error"]


def _cells(values: dict[tuple[str, int, int], list[float]], models: list[str]) -> pd.DataFrame:
    rows = []
    for (score, k, seed), vals in values.items():
        for m, v in zip(models, vals):
            rows.append({"model_id": m, "dataset": "d", "metric": f"{score}:k{k}s{seed}",
                         "value": v, "params": json.dumps({})})
    rows.append({"model_id": models[0], "dataset": "d", "metric": "knn_accuracy", "value": 0.5,
                 "params": "{}"})
    return pd.DataFrame(rows)


def test_split_oracle_parses_budget_cells_and_keeps_oracle_rows():
    frame = _cells({("logme", 5, 0): [1.0, 2.0], ("h_score", 25, 2): [3.0, 4.0]}, ["a", "b"])
    oracle, cells = budget.split_oracle(frame)
    assert oracle["metric"].tolist() == ["knn_accuracy"]
    assert sorted(zip(cells["score"], cells["labels_per_class"], cells["budget_seed"])) == [
        ("h_score", 25, 2), ("h_score", 25, 2), ("logme", 5, 0), ("logme", 5, 0)]


def test_budget_agreement_per_seed_is_kendall_and_the_mean_row_averages_seeds():
    models = ["m0", "m1", "m2", "m3", "m4"]
    oracle = pd.Series([0.1, 0.2, 0.3, 0.4, 0.5], index=models)
    s0 = [1.0, 2.0, 3.0, 5.0, 4.0]
    s1 = [2.0, 1.0, 3.0, 4.0, 5.0]
    _, cells = budget.split_oracle(_cells({("logme", 5, 0): s0, ("logme", 5, 1): s1}, models))
    rows = pd.DataFrame(budget.budget_agreement(cells, {"knn_accuracy": oracle},
                                                {"knn_accuracy": 1}, "d", bootstrap=200))
    per_seed = rows[rows["budget_seed"] != "mean"].set_index("budget_seed")["kendall_tau"]
    tau0 = stats.kendalltau(s0, oracle).statistic
    tau1 = stats.kendalltau(s1, oracle).statistic
    assert per_seed.to_dict() == pytest.approx({"0": tau0, "1": tau1})
    mean = rows[rows["budget_seed"] == "mean"].iloc[0]
    assert mean["kendall_tau"] == pytest.approx((tau0 + tau1) / 2)
    assert mean["kendall_ci_low"] <= mean["kendall_tau"] <= mean["kendall_ci_high"]
    assert set(rows["labels_per_class"]) == {5.0}


def _agreement_frame() -> pd.DataFrame:
    label_free = [("rankme", 0.40), ("nc", 0.55), ("leaderboard_rank", 0.9)]
    rows = [{"metric": m, "oracle_metric": "knn_accuracy", "dataset": "d", "family": "all",
             "kendall_tau": t, "labels_per_class": np.nan, "budget_seed": None}
            for m, t in label_free]
    curve = {"logme": [0.2, 0.5, 0.6], "gbc": [0.1, 0.3, 0.5]}
    for score, taus in curve.items():
        for k, t in zip((5, 10, 25), taus):
            rows.append({"metric": score, "oracle_metric": "knn_accuracy", "dataset": "d",
                         "family": "all", "kendall_tau": t, "labels_per_class": float(k),
                         "budget_seed": "mean"})
            rows.append({"metric": score, "oracle_metric": "knn_accuracy", "dataset": "d",
                         "family": "all", "kendall_tau": 1.0, "labels_per_class": float(k),
                         "budget_seed": "0"})  # a per-seed row never decides the crossover
    return pd.DataFrame(rows)


def test_crossover_is_the_first_k_whose_mean_tau_beats_the_best_label_free_metric():
    table = budget.crossovers(_agreement_frame()).set_index("score")
    # leaderboard_rank is not a metric of its own: the best label-free metric is nc (0.55)
    assert set(table["best_label_free"]) == {"nc"}
    assert table.loc["logme", "crossover_labels_per_class"] == 25
    assert table.loc["logme", "tau_at_crossover"] == pytest.approx(0.6)
    assert math.isnan(table.loc["gbc", "crossover_labels_per_class"])
    lines = budget.crossover_lines(budget.crossovers(_agreement_frame()))
    assert "d vs knn_accuracy: logme overtakes nc (τ=+0.55) at 25 labels/class (τ=+0.60)" in lines
    assert any(line.startswith("d vs knn_accuracy: gbc does not overtake nc (τ=+0.55) within 25 "
                               "labels/class") for line in lines)


def test_split_agreement_separates_budget_rows():
    label_free, curve = budget.split_agreement(_agreement_frame())
    assert set(label_free["metric"]) == {"rankme", "nc", "leaderboard_rank"}
    assert set(curve["metric"]) == {"logme", "gbc"}


def test_oracle_config_needs_a_reference_oracle_for_the_budget_curve():
    from rank_fixtures import config_dict

    from zoorank.config.loading import parse_config
    from zoorank.errors import ConfigError

    ok = parse_config(config_dict("/tmp/unused", oracle={"knn": True, "transferability": ["gbc"]}))
    newer = ["sfda", "etran", "ncti", "knn_few_label"]
    assert parse_config(config_dict("/tmp/unused", oracle={
        "knn": True, "transferability": newer})).oracle.transferability == newer
    assert ok.oracle.labels_per_class == (5, 10, 25, 50, 100)
    assert ok.oracle.label_budget_seeds == 3
    with pytest.raises(ConfigError, match="transferability"):
        parse_config(config_dict("/tmp/unused", oracle={"transferability": ["logme"]}))
    with pytest.raises(ConfigError, match="transferability"):
        parse_config(config_dict("/tmp/unused", oracle={"knn": True, "transferability": ["no_such_score"]}))
    with pytest.raises(ConfigError, match="labels_per_class"):
        parse_config(config_dict("/tmp/unused", oracle={"knn": True, "labels_per_class": [0, 5]}))


def test_oracle_suite_adds_the_budget_cells_of_the_train_split(digits):
    from zoorank.config import OracleSpec
    from zoorank.oracle.measures import oracle_suite

    images, labels = digits
    Z = images.reshape(len(images), -1) / 16.0
    spec = OracleSpec(knn=True, transferability=["h_score"], labels_per_class=(5,),
                      label_budget_seeds=2)
    rows = oracle_suite(Z[:200], labels[:200], Z[200:400], labels[200:400], spec, seed=7)
    cells = {r["metric"]: r for r in rows if ":" in r["metric"]}
    assert set(cells) == {"h_score:k5s7", "h_score:k5s8"}
    idx = budget.stratified_subset(labels[:200], 5, 8)
    from zoorank.metrics import h_score

    assert cells["h_score:k5s8"]["value"] == h_score(Z[:200][idx], labels[:200][idx])
    assert [r["metric"] for r in rows if ":" not in r["metric"]] == ["knn_accuracy"]


def test_zoo_relative_scores_store_their_terms_and_rank_combines_them_over_the_zoo(digits):
    from zoorank.metrics import ncti, ncti_combine

    images, labels = digits
    X, y = images.reshape(len(images), -1)[:300] / 16.0, labels[:300]
    rows = budget.transferability_rows(X, y, ["ncti", "knn_few_label"], (5,), seeds=1)
    assert [r["metric"] for r in rows] == [
        "ncti.seli:k5s0", "ncti.ncc:k5s0", "ncti.vc:k5s0", "knn_few_label:k5s0"]
    idx = budget.stratified_subset(y, 5, 0)
    np.testing.assert_array_equal([r["value"] for r in rows[:3]], ncti(X[idx], y[idx]))

    # RANK: the raw terms of four models become one NCTI cell per model, min–max over the zoo;
    # a model with a NaN term gets NaN and does not move the others' normalisation
    terms = {"a": (10.0, 0.9, 2.0), "b": (30.0, 0.5, 3.0), "c": (20.0, 0.7, 4.0),
             "d": (99.0, math.nan, 1.0)}
    frame = pd.DataFrame([
        {"model_id": m, "dataset": "d", "metric": f"ncti.{t}:k5s0", "value": v, "params": "{}"}
        for m, vals in terms.items() for t, v in zip(("seli", "ncc", "vc"), vals)]
        + [{"model_id": m, "dataset": "d", "metric": "logme:k5s0", "value": 1.0, "params": "{}"}
           for m in terms])
    _, cells = budget.split_oracle(frame)
    out = budget.zoo_relative_cells(cells)
    assert sorted(out["metric"].unique()) == ["logme:k5s0", "ncti:k5s0"]
    got = out[out["score"] == "ncti"].set_index("model_id")["value"]
    expected = ncti_combine([10.0, 30.0, 20.0], [0.9, 0.5, 0.7], [2.0, 3.0, 4.0])
    np.testing.assert_allclose(got[["a", "b", "c"]], expected)
    np.testing.assert_allclose(expected, [1.0, 0.5, 0.0], atol=1e-12)  # by hand
    assert math.isnan(got["d"])
    assert json.loads(out[out["score"] == "ncti"]["params"].iloc[0])["terms"] == [
        "seli", "ncc", "vc"]
