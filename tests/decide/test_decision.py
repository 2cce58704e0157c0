"""The decision columns of the leaderboard (zoorank.decide.decision) on a real SCORE + RANK run: rank
intervals, top set, health flags, consensus and the width warning."""

from __future__ import annotations

import numpy as np
import pandas as pd
import pytest
from scipy import stats

from zoorank.metrics import registry

pytestmark = pytest.mark.timeout(600)


@pytest.fixture(scope="module")
def decided(tmp_path_factory, ray_session):
    from rank_fixtures import DATASET, config_dict, entry_fingerprints, write_store

    from zoorank.config.loading import parse_config
    from zoorank.decide.leaderboard import read_leaderboard_settings
    from zoorank.rank import run_rank
    from zoorank.score import run_score
    from zoorank.store import Store

    root = tmp_path_factory.mktemp("decision-store")
    models = write_store(str(root))
    store = Store(str(root))
    cfg = config_dict(str(root), oracle={"knn": True})
    # the same checkpoint under a second id, and a model of another width
    cfg["models"].append({"id": "proj-a-twin", "source": "python", "name": "fixtures:unused"})
    cfg["models"].append({"id": "wide", "source": "python", "name": "fixtures:unused"})
    cfg["metrics"] = ["rankme", "uniformity", "nc", "twonn_id"]
    config = parse_config(cfg)
    fps = entry_fingerprints(config)
    ids = np.arange(300, dtype=np.int64)
    wide = np.hstack([models["proj-b"], models["proj-b"] @ np.random.default_rng(5).normal(
        size=(24, 40))]).astype(np.float32)
    for mid, Z in (("proj-a-twin", models["proj-a"]), ("wide", wide)):
        store.write_shard(DATASET, "clean", mid, 0, ids, np.zeros(300, np.int32), Z)
        store.update_manifest([{"dataset": DATASET, "view": "clean", "model_id": mid,
                                "fingerprint": fps[(DATASET, "clean", mid)], "status": "done",
                                "error": None, "rows": 300, "dim": Z.shape[1], "seconds": 0.1,
                                "bad_images": 0}])
    run_score(config)
    board = run_rank(config, show=False)
    return store, config, board.set_index("model_id"), read_leaderboard_settings(store)


def test_leaderboard_has_the_decision_columns_after_rank(decided):
    _, _, board, settings = decided
    cols = list(board.reset_index().columns)
    assert cols[cols.index("rank") + 1: cols.index("rank") + 7] == [
        "rank_low", "rank_high", "p_best", "in_top_set", "flags", "disagreement"]
    ranked = board[board["rank"].notna()]
    assert (ranked["rank_low"] <= ranked["rank"]).all()
    assert ((ranked["p_best"] >= 0) & (ranked["p_best"] <= 1)).all()
    assert settings["decision"]["top_set_rule"] == "mcs"
    assert 1 <= len(settings["decision"]["top_set"]) < len(board)


def test_the_same_checkpoint_under_two_ids_gets_the_same_interval_and_top_set_membership(decided):
    _, _, board, _ = decided
    a, b = board.loc["proj-a"], board.loc["proj-a-twin"]
    for col in ("rank", "rank_low", "rank_high", "p_best", "in_top_set"):
        assert a[col] == b[col], col


def test_a_constant_model_is_flagged_collapsed_and_not_in_the_top_set(decided):
    _, _, board, settings = decided
    assert "collapsed" in board.loc["collapsed", "flags"].split(",")
    assert not board.loc["collapsed", "in_top_set"]
    assert "collapsed" in settings["decision"]["flagged"]
    healthy = board.drop(index="collapsed")
    assert not healthy["flags"].str.contains("collapsed").any()


def test_every_top_set_model_is_unflagged_or_only_softly_flagged(decided):
    from zoorank.stats.health import BLOCKING

    _, _, board, settings = decided
    for m in settings["decision"]["top_set"]:
        flags = {f for f in board.loc[m, "flags"].split(",") if f}
        assert not flags & BLOCKING


def test_per_metric_uncertainty_table_covers_each_resampled_metric(decided):
    store, _, board, _ = decided
    table = store.read_frame("uncertainty")
    assert {"rankme", "uniformity", "twonn_id", "nc"} <= set(table["metric"])
    rankme = table[table["metric"] == "rankme"].set_index("model_id")
    # one dataset: the leaderboard's intervals are those of its primary metric
    np.testing.assert_array_equal(rankme.loc[board.index, "rank_low"], board["rank_low"])
    assert rankme["in_top_set"].sum() >= 1


def test_consensus_reports_kendalls_w_and_a_sentence(decided):
    from zoorank.stats.consensus import kendall_w

    _, _, board, settings = decided
    c = settings["decision"]["consensus"]["digits"]
    assert set(c["metrics"]) >= {"rankme", "uniformity", "twonn_id"}
    assert "nc" in c["partial"]  # NC ranks only the two members of the one ensemble
    values = board[[f"digits/{m}" for m in c["metrics"]]].dropna()
    ranks = [stats.rankdata([registry.info(m).oriented(v) for v in values[f"digits/{m}"]])
             for m in c["metrics"]]
    assert c["kendall_w"] == pytest.approx(kendall_w(np.vstack(ranks)))
    assert settings["decision"]["consensus_sentence"].startswith("The label-free metrics")
    assert board["disagreement"].between(0, 1).all()


def test_a_zoo_mixing_widths_shows_the_width_warning(decided):
    _, _, _, settings = decided
    warning = settings["decision"]["width_warning"]
    assert warning and "24" in warning and "64" in warning and "rankme" in warning


def test_uncertainty_table_is_readable_by_pandas(decided):
    """Read as the README shows (deltalake → pandas), not through the store: one row per model
    and resampled metric, the same rows zoorank reads."""
    from deltalake import DeltaTable

    store, _, board, _ = decided
    table = DeltaTable(f"{store.uri}/uncertainty").to_pandas()
    assert {"model_id", "dataset", "metric", "rank", "rank_low", "rank_high"} <= set(table.columns)
    assert set(table["model_id"]) == set(board.index)
    assert not table.duplicated(["model_id", "dataset", "metric"]).any()
    ours = store.read_frame("uncertainty")
    key = ["model_id", "dataset", "metric"]
    pd.testing.assert_frame_equal(
        table.sort_values(key).reset_index(drop=True)[list(ours.columns)],
        ours.sort_values(key).reset_index(drop=True), check_dtype=False)


# -- two datasets, no Ray: the aggregate's intervals over replicates of both datasets -----------


@pytest.fixture(scope="module")
def two_datasets(tmp_path_factory):
    from decision_fixtures import ranked_board

    root = tmp_path_factory.mktemp("decision-two-datasets")
    board, settings = ranked_board(root, ("digits", "digits-b"))
    return board.set_index("model_id"), settings


def test_aggregate_intervals_cover_the_aggregate_rank_over_two_datasets(two_datasets):
    board, settings = two_datasets
    assert settings["decision"]["top_set_rule"] == "mcs"
    ranked = board[board["rank"].notna()]
    assert ranked["rank_low"].notna().all() and ranked["rank_high"].notna().all()
    assert (ranked["rank_low"] <= ranked["rank_high"]).all()
    # the aggregate's point-best model is in the top set and ranks 1 in its interval
    best = ranked["rank"].idxmin()
    assert ranked.loc[best, "in_top_set"] and ranked.loc[best, "rank_low"] == 1
    assert ranked["p_best"].max() <= 1 and ranked.loc[best, "p_best"] > 0


def test_flags_name_their_dataset_when_there_are_several(two_datasets):
    board, _ = two_datasets
    flags = board.loc["collapsed", "flags"].split(",")
    assert {"digits:collapsed", "digits-b:collapsed"} <= set(flags)
    assert not board.loc["collapsed", "in_top_set"]


# -- the top set's guarantee, ties, and the oracle's own top set ---------------------------------


def test_top_set_is_rank_consistent_and_states_its_guarantee(decided):
    _, config, board, settings = decided
    ranked = board[board["rank"].notna()]
    top = ranked[ranked["in_top_set"].astype(bool)]
    blocked = ranked["flags"].fillna("").str.contains("collapsed|non_finite|constant")
    above = ranked[(ranked["rank"] <= top["rank"].max()) & ~blocked]
    assert above["in_top_set"].astype(bool).all()
    guarantee = settings["decision"]["top_set_guarantee"]
    assert f"{config.rank.confidence:.0%}" in guarantee and "Model Confidence Set" in guarantee


def test_a_checkpoint_under_two_ids_is_a_tie_that_shares_p_best(decided):
    _, _, board, _ = decided
    assert "proj-a-twin" in board.loc["proj-a", "tied_with"].split(", ")
    assert "proj-a" in board.loc["proj-a-twin", "tied_with"].split(", ")
    assert board.loc["proj-a", "p_best"] == board.loc["proj-a-twin", "p_best"]
    assert board["p_best"].sum() == pytest.approx(1.0)
    untied = board[board["tied_with"] == ""]
    assert len(untied) and (untied["rank"].value_counts() == 1).all()


def test_oracle_top_set_is_on_the_leaderboard_and_in_the_settings(decided):
    _, _, board, settings = decided
    d = settings["decision"]
    entry = d["oracle_top_sets"]["digits/knn_accuracy"]
    assert d["oracle_top_set_metric"] == "knn_accuracy"
    assert set(board.index[board["in_oracle_top_set"].astype(bool)]) == set(entry["top_set"])
    # the oracle's point-best model is always in its own top set
    assert board["digits/knn_accuracy"].idxmax() in entry["top_set"]
    assert entry["sentence"] == d["oracle_comparison"] and entry["sentence"].startswith("On digits")
    assert (entry["overlap"] != []) == ("share" in entry["sentence"])


def _oracle_rows(values: dict[str, list[float]]) -> pd.DataFrame:
    import json

    return pd.DataFrame([{"model_id": m, "dataset": "digits", "metric": "knn_accuracy",
                          "value": float(np.mean(v)), "params": json.dumps({"fold_values": v})}
                         for m, v in values.items()])


def test_oracle_top_set_of_a_known_case():
    from rank_fixtures import config_dict

    from zoorank.config.loading import parse_config
    from zoorank.decide.oracle_top_sets import oracle_top_sets

    config = parse_config(config_dict("/tmp/unused-store"))
    folds = {"a": [0.90, 0.92, 0.88, 0.91, 0.89, 0.90, 0.93, 0.87],
             "c": [0.50, 0.52, 0.48, 0.51, 0.49, 0.50, 0.53, 0.47],
             "d": [0.70, 0.72, 0.68, 0.71, 0.69, 0.70, 0.73, 0.67]}
    folds["b"] = list(folds["a"])  # a twin of the oracle's best: one top set of two
    board = pd.DataFrame({"model_id": ["a", "b", "c", "d"]})
    got = oracle_top_sets(config, board, _oracle_rows(folds), ["b", "c"])["digits/knn_accuracy"]
    assert got["top_set"] == ["a", "b"] and got["overlap"] == ["b"] and got["regret"] == 0.0
    assert got["within_noise"]
    apart = oracle_top_sets(config, board, _oracle_rows(folds), ["c"])["digits/knn_accuracy"]
    # every fold of a is 0.40 above c's: the paired difference has no spread, regret 40 pp
    assert apart["overlap"] == [] and apart["regret"] == pytest.approx(0.40)
    assert apart["noise"] == pytest.approx(0.0, abs=1e-12) and not apart["within_noise"]
    assert "do not overlap" in apart["sentence"] and "40.0 pp" in apart["sentence"]
    # one model is "1 model" in the sentence, two are "2 models"
    assert apart["sentence"].startswith("On digits, the label-free top set of 1 model and the "
                                        "oracle's own 95% top set by knn accuracy, 2 models, do")
    # rows of an oracle run before fold values: no oracle top set
    old = _oracle_rows(folds).assign(params="{}")
    assert oracle_top_sets(config, board, old, ["a"]) == {}
