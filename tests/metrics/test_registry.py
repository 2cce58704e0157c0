"""The metric registry: one registration is all a new metric needs.

A metric registered inside a test (through ``zoorank.metrics.registry.register`` only) is accepted by
config validation, scored by SCORE on a small real store (its values equal the function on the
stored arrays), ordered by RANK in its direction, shown by the report and accepted as a Tune
objective. The registry's other promises: settings written once, options declared once with their
defaults, one collapse guard for SCORE and Tune, one meaning of ``@``, no config import below.
"""

from __future__ import annotations

import math
import subprocess
import sys

import numpy as np
import pandas as pd
import pytest

from zoorank.config import ScoreOptions
from zoorank.config.loading import parse_config
from zoorank.errors import ConfigError
from zoorank.metrics import registry
from zoorank.metrics.score_options import OPTIONS, resolve_options
from zoorank.metrics.suite import label_free_suite

NEW = "mean_abs_coordinate"


@pytest.fixture
def new_metric():
    """Register a metric the way a user would: one function plus one registration beside it."""

    # defined inside the fixture, so Ray pickles it by value to the SCORE workers
    @registry.register(NEW, +1, "clean", tune_floor=0.0, settings=registry.fixed(power=1.0))
    def mean_abs_coordinate(Z, power: float):
        """mean |z|^p over every coordinate (a toy spread measure: 0 for a zero embedding)."""
        return float(np.mean(np.abs(np.asarray(Z, dtype=np.float64)) ** power))

    yield mean_abs_coordinate
    registry.unregister(NEW)


def test_a_registered_metric_is_validated_scored_ranked_reported_and_a_tune_objective(
    new_metric, tmp_path, ray_session
):
    from rank_fixtures import config_dict, stamp_fingerprints, write_store

    from zoorank.rank import run_rank
    from zoorank.report import run_report
    from zoorank.score import run_score
    from zoorank.store import Store
    from zoorank.tune.config import ObjectiveSpec
    from zoorank.tune.objective import score_features

    # config: accepted under metrics: and as the primary metric
    raw = config_dict(str(tmp_path), primary_metric=NEW)
    raw["metrics"] = ["rankme", NEW]
    config = parse_config(raw)
    assert config.primary_metric == NEW
    with pytest.raises(ConfigError, match="unknown metric"):
        parse_config({**raw, "metrics": ["rankme", "not_registered"]})

    # SCORE on a real store: one row per model, equal to the function on the stored array
    models = write_store(str(tmp_path))
    stamp_fingerprints(config, Store(config.store))
    table = run_score(config)
    rows = table[table["metric"] == NEW].set_index("model_id")
    assert set(rows.index) == set(models)
    for model_id, Z in models.items():
        assert rows.loc[model_id, "value"] == pytest.approx(np.mean(np.abs(Z.astype(np.float64))))
        assert '"power": 1.0' in rows.loc[model_id, "params"]

    # RANK: the leaderboard follows the new metric, higher first (+1)
    run_rank(config, show=False)
    board = pd.read_csv(tmp_path / "leaderboard.csv")
    from zoorank.stats.health import BLOCKING

    ranked = board[board["model_id"].isin(list(models))]["model_id"].tolist()
    # a model with a blocking health flag (the fixture's collapsed one) ranks below every other
    flags = board.set_index("model_id")["flags"].fillna("").astype(str)
    blocked = {m for m in models if set(flags[m].replace(",", " ").split()) & BLOCKING}
    assert blocked == {"collapsed"}
    expected = sorted(models, key=lambda m: (m in blocked,
                                             -float(np.mean(np.abs(models[m].astype(np.float64))))))
    assert ranked == expected

    # REPORT: the metric appears in the page
    index = run_report(config)
    assert NEW in open(index, encoding="utf-8").read()

    # Tune: a valid objective, scored by the same registration
    spec = ObjectiveSpec(metric=NEW)
    rng = np.random.default_rng(0)
    clean = rng.normal(size=(40, 6))
    views = clean[:, None, :] + 0.1 * rng.normal(size=(40, 2, 6))
    assert spec.metric == NEW
    assert score_features(views, clean, [NEW]) == {NEW: pytest.approx(np.mean(np.abs(clean)))}


def test_an_unregistered_name_is_no_tune_objective():
    from pydantic import ValidationError

    from zoorank.tune.config import ObjectiveSpec

    with pytest.raises(ValidationError, match="not a Tune objective"):
        ObjectiveSpec(metric=NEW)
    with pytest.raises(ValidationError, match="not a Tune objective"):
        ObjectiveSpec(metric="alignment")  # lower is better: no Tune floor


def test_settings_are_the_functions_keyword_arguments_written_once():
    from zoorank.metrics.label_free.geometry import twonn_id

    entry = registry.info("twonn_id")
    kwargs = entry.kwargs()
    assert kwargs == {"discard_fraction": 0.1, "normalize": True, "fit_intercept": False}
    Z = np.random.default_rng(1).normal(size=(200, 5))
    row = label_free_suite(Z, None, ["twonn_id"])[0]
    assert row["value"] == twonn_id(Z, **kwargs)
    assert {k: row["params"][k] for k in kwargs} == kwargs


def test_score_options_take_their_defaults_from_the_registry():
    defaults = ScoreOptions()
    for name, option in OPTIONS.items():
        assert getattr(defaults, name) == option.default, name
    # every option a metric reads is declared, and resolve_options fills it from any source
    for entry in registry.REGISTRY.values():
        assert set(entry.options) <= set(OPTIONS)
    resolved = resolve_options({"eps": 1e-3})
    assert resolved["eps"] == 1e-3 and resolved["mle_k"] == OPTIONS["mle_k"].default


def test_collapse_guard_is_the_same_in_score_and_tune():
    from zoorank.tune.objective import FLOOR, score_features

    # 64 identical rows: k-means puts every row in one of 8 clusters; CL would be a trivial 1.0
    collapsed = np.tile(np.arange(1.0, 5.0), (64, 1))
    row = label_free_suite(collapsed, None, ["cluster_learnability"])[0]
    assert math.isnan(row["value"]) and "collapsed representation" in row["params"]["error"]
    with pytest.warns(Warning):
        out = score_features(collapsed[:, None, :].repeat(2, 1), collapsed,
                             ["cluster_learnability"])
    assert out == {"cluster_learnability": FLOOR["cluster_learnability"]} == {
        "cluster_learnability": 0.0}


def test_at_means_a_view_and_a_label_budget_is_spelled_with_a_colon():
    from zoorank.oracle.budget import budget_metric_name, split_oracle

    assert registry.split_view("lidar@heavy") == ("lidar", "heavy")
    assert registry.info("lidar@heavy").name == "lidar"
    with pytest.raises(KeyError):
        registry.info("rankme@heavy")  # a clean-view metric has no view suffix
    name = budget_metric_name("logme", 5, 0)
    assert name == "logme:k5s0" and "@" not in name
    assert not registry.is_label_free(name)
    oracle = pd.DataFrame({"metric": [name, "knn_accuracy"], "value": [1.0, 0.5]})
    rows, cells = split_oracle(oracle)
    assert rows["metric"].tolist() == ["knn_accuracy"]
    assert cells[["score", "labels_per_class", "budget_seed"]].values.tolist() == [["logme", 5, 0]]
    with pytest.raises(ValueError, match="may not contain"):
        registry.register("bad@name", +1, "clean")


def test_oracle_and_few_label_directions_come_from_the_registry():
    from zoorank.oracle.measures import oracle_direction

    assert oracle_direction("knn_accuracy") == oracle_direction("r_auroc_nc") == 1
    assert oracle_direction("sdl_eps0.5") == oracle_direction("mdl") == -1
    assert registry.label_info("logme").direction == 1
    with pytest.raises(KeyError):
        oracle_direction("rankme")


def test_pool_and_ensemble_metrics_are_read_from_the_registry():
    assert registry.pool_metrics(["clid"]) == ["clid", "clid_family"]
    assert registry.info("clid").requires == ("cluster_learnability", "twonn_id")
    assert registry.info("clid_family").scope == "family"
    assert registry.ensemble_metrics(["nc", "rankme"]) == ["nc"]
    assert registry.needs("clid") == {"clean"}


def test_one_label_split_rule_for_rank_tune_and_zoorank_metrics():
    from sklearn.model_selection import train_test_split

    from zoorank.metrics.few_label.oracle_metrics import knn_accuracy, oracle_split
    from zoorank.oracle.label_oracle import oracle_split as rank_split
    from zoorank.score.embeddings_file import oracle_scores

    assert rank_split is oracle_split
    y = np.repeat(np.arange(4), 10)
    tr, te, note = oracle_split(np.arange(40), y, 0.5, 3)
    ref_tr, ref_te = train_test_split(np.arange(40), test_size=0.5, random_state=3, stratify=y)
    assert note == "stratified"
    np.testing.assert_array_equal(tr, np.sort(ref_tr))
    np.testing.assert_array_equal(te, np.sort(ref_te))
    Z = np.random.default_rng(0).normal(size=(40, 5)) + y[:, None]
    assert oracle_scores(Z, y, 3)["knn_accuracy"] == knn_accuracy(Z[tr], y[tr], Z[te], y[te])


def test_the_metrics_layer_imports_no_config():
    code = ("import sys, zoorank.metrics, zoorank.metrics.suite; "
            "print(sorted(m for m in sys.modules if m in ('zoorank.config', 'zoorank.store')))")
    out = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, check=True)
    assert out.stdout.strip() == "[]"


def test_the_ensemble_metric_is_nc_with_its_settings_and_function():
    from zoorank.metrics.suite import ensemble_reliability, nc_settings

    nc = registry.ensemble_metric()
    assert (nc.name, nc.inputs, nc.function) == ("nc", "ensemble", ensemble_reliability)
    assert nc.kwargs({"nc_k": 7}, 3) == nc_settings({"nc_k": 7}, 3)


def test_a_pool_metrics_one_model_value_is_its_solo_combination():
    # CLID's solo mode is raw_percent: 100·CL + ID
    assert registry.solo_value("clid", {"cluster_learnability": 0.25, "twonn_id": 7.5}) == 32.5
    assert math.isnan(registry.solo_value("clid", {"cluster_learnability": 0.25}))
    assert math.isnan(registry.solo_value("clid", {"cluster_learnability": 0.25,
                                                   "twonn_id": math.inf}))
    with pytest.raises(ValueError, match="rankme has no one-model value"):
        registry.solo_value("rankme", {"rankme": 3.0})


def test_what_orders_the_board_and_the_oracles_are_fields_of_the_registrations():
    from zoorank.metrics.primary import COLLAPSE_DEGENERATE, PRIMARY_PREFERENCE, WIDTH_SENSITIVE
    from zoorank.oracle.budget import REFERENCE_ORACLES
    from zoorank.rank.board import IN_DOMAIN_ACCURACY

    ranks = {n: m.default_rank for n, m in registry.REGISTRY.items() if m.default_rank is not None}
    assert sorted(ranks.values()) == list(range(1, len(ranks) + 1))  # one place each, no gap
    assert PRIMARY_PREFERENCE == tuple(sorted(ranks, key=ranks.get))
    assert all(registry.REGISTRY[n].primary for n in PRIMARY_PREFERENCE)
    assert WIDTH_SENSITIVE == {n for n, m in registry.REGISTRY.items() if m.width_sensitive}
    assert {"rankme_norm", "rankme_proj"}.isdisjoint(WIDTH_SENSITIVE)
    assert COLLAPSE_DEGENERATE == {"alignment", "uniformity"}
    assert registry.oracles() == REFERENCE_ORACLES == IN_DOMAIN_ACCURACY
    assert all(registry.REGISTRY[n].inputs == "labels" for n in registry.oracles())


def test_a_new_registration_joins_the_oracles_and_the_default_order():
    def probe_accuracy(Z, y):
        return 0.0

    def spread(Z):
        return 0.0

    try:
        registry.register("test_only_accuracy", +1, "labels", oracle=True)(probe_accuracy)
        registry.register("test_only_spread", +1, "clean", default_rank=99)(spread)
        assert registry.oracles()[-1] == "test_only_accuracy"
        from zoorank.metrics.primary import PRIMARY_PREFERENCE

        assert PRIMARY_PREFERENCE[-1] == "test_only_spread"
    finally:
        registry.unregister("test_only_accuracy")
        registry.unregister("test_only_spread")
    with pytest.raises(ValueError, match="default_rank= is for a metric that may order the board"):
        registry.register("test_only_bad", +1, "labels", default_rank=1)
    with pytest.raises(ValueError, match="an oracle reads labels"):
        registry.register("test_only_bad", +1, "clean", oracle=True)
