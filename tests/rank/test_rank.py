"""Ranks, aggregation and agreement (zoorank.stats.agreement) against scipy and hand cases."""

from __future__ import annotations

import json

import numpy as np
import pandas as pd
import pytest
from deltalake import DeltaTable
from scipy import stats

from zoorank.metrics import registry
from zoorank.stats.agreement import (
    agreement,
    bootstrap_indices,
    kendall_tau_b_rows,
    top1_regret,
    topk_recall,
)
from zoorank.stats.consensus import rank_agreement_matrix
from zoorank.stats.ranks import aggregate_ranks, joint_rank, rank_within


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


# -- the RANK stage on a store written directly (tests/rank_fixtures.py) ------------------------


@pytest.fixture(scope="module")
def ranked_store(tmp_path_factory, ray_session):
    from rank_fixtures import config_dict, entry_fingerprints, write_store

    from zoorank.config.loading import parse_config
    from zoorank.rank import run_rank
    from zoorank.store import Store

    root = tmp_path_factory.mktemp("rank-store")
    models = write_store(str(root))
    oracle = {"knn": True, "linear_probe": True, "recall_at_1": True, "r_auroc": True,
              "loss_data_curve": True, "loss_data_points": 4, "loss_data_seeds": 2,
              "loss_data_steps": 100, "sdl_eps": [0.5]}
    cfg = config_dict(str(root), oracle=oracle)
    cfg["models"].append({"id": "ghost", "source": "python", "name": "fixtures:unused"})
    config = parse_config(cfg)
    # "ghost": the manifest says done (with the right fingerprint) but its shards are gone, so
    # its oracle task fails
    Store(str(root)).update_manifest([{
        "dataset": "digits", "view": "clean", "model_id": "ghost",
        "fingerprint": entry_fingerprints(config)[("digits", "clean", "ghost")],
        "status": "done", "error": None, "rows": 300, "dim": 24, "seconds": 0.1,
        "bad_images": 0}])
    board = run_rank(config)
    return root, config, models, board


def _split(n: int = 300):
    from sklearn.datasets import load_digits
    from sklearn.model_selection import train_test_split

    y = load_digits().target[:n]
    ids = np.arange(n)
    tr, te = train_test_split(ids, test_size=0.5, random_state=0, stratify=y)
    return np.sort(tr), np.sort(te), y


@pytest.mark.timeout(300)
def test_oracle_rows_equal_the_oracle_functions_on_the_seeded_stratified_split(ranked_store):
    from zoorank.metrics.few_label.oracle_metrics import knn_accuracy, recall_at_1
    from zoorank.store.schema import METRICS_COLUMNS

    root, _, models, _ = ranked_store
    oracle = DeltaTable(str(root / "oracle")).to_pandas()
    assert list(oracle.columns) == METRICS_COLUMNS
    tr, te, y = _split()
    for model_id in ("proj-a", "lowrank"):
        Z = models[model_id]
        got = oracle[(oracle.model_id == model_id)].set_index("metric")["value"]
        assert got["knn_accuracy"] == pytest.approx(
            knn_accuracy(Z[tr], y[tr], Z[te], y[te], k=20, temperature=0.07))
        assert got["recall_at_1"] == pytest.approx(recall_at_1(Z[te], y[te]))


@pytest.mark.timeout(300)
def test_oracle_fold_values_are_the_accuracy_on_each_fold_of_the_test_split(ranked_store):
    import json

    from zoorank.metrics.few_label.oracle_metrics import knn_accuracy
    from zoorank.stats.uncertainty import fold_assignment

    root, config, models, _ = ranked_store
    oracle = DeltaTable(str(root / "oracle")).to_pandas()
    tr, te, y = _split()
    folds = fold_assignment(te, config.score.resample_folds, 1.0, config.seed)
    for model_id in ("proj-a", "lowrank"):
        Z = models[model_id]
        row = oracle[(oracle.model_id == model_id) & (oracle.metric == "knn_accuracy")].iloc[0]
        params = json.loads(row["params"])
        assert params["n_folds"] == config.score.resample_folds
        want = [knn_accuracy(Z[tr], y[tr], Z[te[folds == k]], y[te[folds == k]], k=20,
                             temperature=0.07) for k in range(params["n_folds"])]
        assert params["fold_values"] == pytest.approx(want, abs=1e-8)
        probe = oracle[(oracle.model_id == model_id)
                       & (oracle.metric == "linear_probe_accuracy")].iloc[0]
        sizes = np.bincount(folds, minlength=params["n_folds"])
        fold_acc = np.asarray(json.loads(probe["params"])["fold_values"])
        # the fold accuracies, weighted by fold size, give back the whole-split accuracy
        assert float(fold_acc @ sizes / sizes.sum()) == pytest.approx(probe["value"], abs=1e-7)


@pytest.mark.timeout(300)
def test_oracle_ranks_informative_embeddings_above_noise_and_collapse(ranked_store):
    _, _, _, board = ranked_store
    acc = board.set_index("model_id")["digits/knn_accuracy"]
    for good in ("proj-a", "proj-b"):
        assert acc[good] > acc["noise"] + 0.3
        assert acc[good] > acc["collapsed"] + 0.3
    lp = board.set_index("model_id")["digits/linear_probe_accuracy"]
    assert lp["proj-a"] > lp["noise"] + 0.3


@pytest.mark.timeout(300)
def test_r_auroc_of_a_constant_nc_is_one_half(ranked_store):
    # rotated copies: NC = 1 for every point, so NC carries no information on R@1 errors.
    root, _, _, board = ranked_store
    rel = pd.read_parquet(root / "reliability" / "digits" / "rot.parquet")
    np.testing.assert_allclose(rel["nc"], 1.0)
    values = board.set_index("model_id")
    assert values.loc["rot-0", "digits/r_auroc_nc"] == pytest.approx(0.5)
    assert np.isnan(values.loc["proj-a", "digits/r_auroc_nc"])  # no ensemble, no NC


@pytest.mark.timeout(300)
def test_sdl_equals_mdl_minus_n_eps_when_the_curve_stays_above_eps(ranked_store):
    root, _, _, _ = ranked_store
    oracle = DeltaTable(str(root / "oracle")).to_pandas()
    checked = 0
    for _, rows in oracle.groupby("model_id"):
        v = rows.set_index("metric")["value"]
        params = json.loads(rows.set_index("metric").loc["mdl", "params"])
        losses, sizes = np.array(params["losses"]), params["sizes"]
        if np.all(losses > 0.5):
            assert v["sdl_eps0.5"] == pytest.approx(v["mdl"] - sizes[-1] * 0.5, rel=1e-6)
            assert np.isinf(v["esc_eps0.5"])
            checked += 1
        assert v["sdl_eps0.5"] <= v["mdl"]
    assert checked >= 1  # noise and collapsed never reach 0.5 nats


@pytest.mark.timeout(300)
def test_leaderboard_ranks_follow_the_primary_metric_and_collapse_ranks_last(ranked_store):
    root, _, models, board = ranked_store
    assert sorted(board["model_id"]) == sorted(models)
    assert "broken" not in set(board["model_id"])
    assert board["rank"].is_monotonic_increasing
    rankme = board["digits/rankme"].to_numpy()
    np.testing.assert_allclose(board["digits/rankme/rank"], stats.rankdata(-rankme))
    # one dataset: the rank product of one rank is that rank
    np.testing.assert_allclose(board["rank"], stats.rankdata(-rankme))
    assert board.iloc[-1]["model_id"] == "collapsed"
    on_disk = DeltaTable(str(root / "leaderboard")).to_pandas()
    pd.testing.assert_frame_equal(on_disk, board)
    csv = pd.read_csv(root / "leaderboard.csv")
    assert list(csv["model_id"]) == list(board["model_id"])


@pytest.mark.timeout(300)
def test_agreement_table_equals_scipy_on_the_leaderboard_vectors(ranked_store):
    root, _, _, board = ranked_store
    agree = DeltaTable(str(root / "agreement")).to_pandas()
    row = agree[(agree.metric == "rankme") & (agree.oracle_metric == "knn_accuracy")
                & (agree.family == "all")].iloc[0]
    x, y = board["digits/rankme"], board["digits/knn_accuracy"]
    assert row["n_models"] == len(board)
    assert row["kendall_tau"] == pytest.approx(stats.kendalltau(x, y).statistic)
    assert row["spearman"] == pytest.approx(stats.spearmanr(x, y).statistic)
    assert row["pearson"] == pytest.approx(stats.pearsonr(x, y).statistic)
    assert row["kendall_ci_low"] <= row["kendall_tau"] <= row["kendall_ci_high"]
    # uniformity is lower-is-better: its τ is computed on the negated values
    u = agree[(agree.metric == "uniformity") & (agree.oracle_metric == "knn_accuracy")
              & (agree.family == "all")].iloc[0]
    assert u["kendall_tau"] == pytest.approx(
        stats.kendalltau(-board["digits/uniformity"], y).statistic)
    # family 'proj' has 3 models; 'rot' has 2 (too few for a correlation)
    assert set(agree["family"]) == {"all", "proj"}


@pytest.mark.timeout(300)
def test_failed_models_are_listed_with_their_reason(ranked_store):
    root, _, _, _ = ranked_store
    failed = DeltaTable(str(root / "failed")).to_pandas()
    assert failed.set_index("model_id").loc["broken", "error"].startswith("CheckpointError")
    # a crashed oracle task is that model's failure, with the reason; the run goes on
    ghost = failed[failed.model_id == "ghost"].set_index("stage")
    assert "no embeddings" in ghost.loc["oracle", "error"]
    assert "no metrics" in ghost.loc["score", "error"]
    md = (root / "leaderboard.md").read_text()
    assert "## Failed models" in md and "corrupt checkpoint" in md


@pytest.mark.timeout(300)
def test_a_rerun_of_rank_is_a_no_op(ranked_store, capsys):
    from zoorank.rank import run_rank

    root, config, _, board = ranked_store
    from zoorank.store import Store

    store = Store(root)
    tables = ["oracle", "leaderboard", "agreement", "failed"]  # Delta tables: no new commit
    names = ["leaderboard.csv", "leaderboard.md"]
    before = ({n: store.table_version(n) for n in tables},
              {n: ((root / n).stat().st_mtime_ns, (root / n).read_bytes()) for n in names})
    capsys.readouterr()
    again = run_rank(config)
    pd.testing.assert_frame_equal(again, board)
    after = ({n: store.table_version(n) for n in tables},
             {n: ((root / n).stat().st_mtime_ns, (root / n).read_bytes()) for n in names})
    assert after == before
    # nothing was recomputed: the console says so, naming the leaderboard version it kept
    assert (f"rank: inputs unchanged since leaderboard version {before[0]['leaderboard']}: "
            "skipped") in capsys.readouterr().out


@pytest.mark.timeout(300)
def test_a_changed_metric_row_or_rank_setting_recomputes_rank(ranked_store, capsys):
    """The leaderboard's commit records the fingerprint of RANK's inputs: a metric value changed
    in the store, or another rank setting, moves the leaderboard; restoring both skips again."""
    from zoorank.catalog.stage_inputs import INPUTS_KEY, leaderboard_commit
    from zoorank.rank import run_rank
    from zoorank.store import Store

    root, config, _, board = ranked_store
    store = Store(root)
    version, info = leaderboard_commit(store)
    metrics = store.read_metrics()
    row = metrics[(metrics.model_id == "noise") & (metrics.metric == "rankme")]
    original = row.copy()
    changed = row.assign(value=row["value"] + 1000.0)  # noise becomes the best by RankMe
    key = ["model_id", "dataset", "metric"]
    same_row = "t.fingerprint = s.fingerprint"  # the same fresh row with another value
    try:
        store.upsert_rows("metrics", changed, key=key, update_if=same_row)
        capsys.readouterr()
        moved = run_rank(config, show=False)
        assert "skipped" not in capsys.readouterr().out
        assert moved.set_index("model_id").loc["noise", "digits/rankme"] == pytest.approx(
            float(changed["value"].iloc[0]))
        assert moved["model_id"].iloc[0] == "noise"
        v1, info1 = leaderboard_commit(store)
        assert v1 > version and info1[INPUTS_KEY] != info[INPUTS_KEY]
    finally:
        store.upsert_rows("metrics", original, key=key, update_if=same_row)
    # a rank setting: top-k recall of the agreement table is computed with the new k
    other = config.model_copy(update={"rank": config.rank.model_copy(update={"top_k": 2})})
    run_rank(other, show=False)
    v2, info2 = leaderboard_commit(store)
    assert v2 > v1 and info2[INPUTS_KEY] not in (info[INPUTS_KEY], info1[INPUTS_KEY])
    agree = store.read_frame("agreement")
    assert set(agree["top_k"]) == {2}
    # back to the original inputs: recomputed once (the leaderboard of v2 has other inputs) ...
    restored = run_rank(config, show=False)
    pd.testing.assert_frame_equal(restored, board)
    v3, info3 = leaderboard_commit(store)
    assert info3[INPUTS_KEY] == info[INPUTS_KEY]
    # ... then skipped
    capsys.readouterr()
    run_rank(config, show=False)
    assert leaderboard_commit(store)[0] == v3
    assert "skipped" in capsys.readouterr().out


def test_the_default_primary_metric_is_chosen_per_dataset_by_how_many_models_it_ranks(tmp_path):
    """Unset ``rank.primary_metric``: NC orders the board only when it ranks nearly every model;
    in the fixture only the seed ensemble ``rot`` (2 of 7 scored models) has NC, so the next
    preference the config computes orders it; restricted to the ensemble, NC does (issue 17).
    The metrics ahead of NC in the preference (chosen out of sample, issue 30) are left out, so
    NC is the first preference the rows have."""
    from types import SimpleNamespace

    from rank_fixtures import config_dict, write_store

    from zoorank.config.loading import parse_config
    from zoorank.metrics.primary import PRIMARY_PREFERENCE
    from zoorank.rank.board import build_leaderboard
    from zoorank.store import Store

    write_store(str(tmp_path))
    raw = config_dict(str(tmp_path))
    raw["rank"].pop("primary_metric")
    config = parse_config(raw)
    ahead = set(PRIMARY_PREFERENCE[:PRIMARY_PREFERENCE.index("nc")])
    raw["metrics"] = [m for m in raw["metrics"] if m not in ahead]
    config = parse_config(raw)
    metrics = Store(str(tmp_path)).read_metrics()
    metrics = metrics[~metrics["metric"].isin(ahead)]
    infos = [SimpleNamespace(model_id=m["id"], family=m.get("family"), group=m.get("group"))
             for m in raw["models"]]
    no_oracle = pd.DataFrame(columns=metrics.columns)
    computed = set(metrics["metric"])
    # the next preference after NC that the fixture computes (uniformity)
    nxt = next(m for m in PRIMARY_PREFERENCE if m != "nc" and m in computed)
    assert PRIMARY_PREFERENCE.index("nc") < PRIMARY_PREFERENCE.index(nxt)
    board, settings = build_leaderboard(config, infos, metrics, no_oracle)
    assert settings["primary_metric"] == {"digits": nxt}
    assert settings["ordered_by"] == nxt
    oriented = registry.info(nxt).oriented(board[f"digits/{nxt}"].to_numpy(float))
    np.testing.assert_allclose(board["rank"], stats.rankdata(-np.asarray(oriented)))

    ensemble = metrics[metrics["model_id"].isin(["rot-0", "rot-1"])]
    _, settings = build_leaderboard(config, [i for i in infos if i.group == "rot"], ensemble,
                                    no_oracle)
    assert settings["primary_metric"] == {"digits": "nc"}


@pytest.mark.slow
@pytest.mark.timeout(300)
def test_rank_combines_zoo_relative_few_label_terms_before_their_budget_agreement(
        tmp_path, ray_session):
    """ETran's and NCTI's per-model raw terms (oracle cells ``<score>.<term>:k5s0``) become one
    zoo-relative cell per model in RANK, whose τ against the kNN oracle is the budget row."""
    from rank_fixtures import config_dict, write_store

    from zoorank.config.loading import parse_config
    from zoorank.metrics import etran_combine, ncti_combine
    from zoorank.oracle.budget import split_oracle, zoo_relative_cells
    from zoorank.rank import run_rank

    write_store(str(tmp_path))
    oracle = {"knn": True, "transferability": ["ncti", "etran", "sfda"],
              "labels_per_class": [5], "label_budget_seeds": 1}
    config = parse_config(config_dict(str(tmp_path), oracle=oracle))
    board = run_rank(config, show=False)
    cells = DeltaTable(str(tmp_path / "oracle")).to_pandas()
    terms = cells[cells["metric"].str.startswith("ncti.")]
    assert sorted(terms["metric"].unique()) == ["ncti.ncc:k5s0", "ncti.seli:k5s0", "ncti.vc:k5s0"]

    wide = terms.pivot_table(index="model_id", columns="metric", values="value")
    wide = wide.dropna()
    expected = pd.Series(ncti_combine(wide["ncti.seli:k5s0"], wide["ncti.ncc:k5s0"],
                                      wide["ncti.vc:k5s0"]), index=wide.index)
    _, split = split_oracle(cells)
    combined = zoo_relative_cells(split)
    got = combined[combined["metric"] == "ncti:k5s0"].set_index("model_id")["value"]
    np.testing.assert_allclose(got[expected.index], expected)
    e = cells[cells["metric"].str.startswith("etran.")].pivot_table(
        index="model_id", columns="metric", values="value").dropna()
    got_e = combined[combined["metric"] == "etran:k5s0"].set_index("model_id")["value"]
    np.testing.assert_allclose(got_e[e.index], etran_combine(e["etran.lda:k5s0"],
                                                            e["etran.energy:k5s0"]))

    agree = DeltaTable(str(tmp_path / "agreement")).to_pandas()
    row = agree[(agree["metric"] == "ncti") & (agree["oracle_metric"] == "knn_accuracy")
                & (agree["budget_seed"] == "0")]
    assert len(row) == 1 and row["labels_per_class"].iloc[0] == 5
    assert not (agree["metric"].astype(str).str.contains(r"\.")).any()  # no raw term is ranked
    knn = board.set_index("model_id")["digits/knn_accuracy"]
    ids = [m for m in knn.dropna().index if m in got.index]
    # a model NCTI could not score (NaN) ranks last, as every metric's NaN does
    tau = stats.kendalltau(np.nan_to_num(got[ids].to_numpy(), nan=-np.inf), knn[ids]).statistic
    assert row["kendall_tau"].iloc[0] == pytest.approx(tau)
