"""Priors and confounds (issue 24 item 4): ``prior:`` values validated, parameter count and width
recorded by EMBED, the priors' agreement rows beside the metrics', and the confound warning."""

from __future__ import annotations

import numpy as np
import pandas as pd
import pytest
from scipy import stats

from zoorank.config.loading import parse_config
from zoorank.decide.board_priors import confound_warnings
from zoorank.errors import ConfigError
from zoorank.stats.priors import CONFOUND_MIN_MODELS, CONFOUND_TAU, confounds, prior_tau

# -- config ------------------------------------------------------------------------------------


def _config(prior) -> dict:
    return {"datasets": [{"name": "d", "source": "sklearn_digits"}],
            "models": [{"id": "a", "source": "timm", "name": "test_resnet", "prior": prior}]}


def test_prior_values_are_numbers_and_enter_no_fingerprint():
    from zoorank.zoo import resolve_models

    cfg = parse_config(_config({"imagenet_top1": 76.1, "gflops": 4}))
    assert cfg.models[0].prior == {"imagenet_top1": 76.1, "gflops": 4.0}
    plain = _config({})
    del plain["models"][0]["prior"]
    (with_prior,), (without,) = resolve_models(cfg), resolve_models(parse_config(plain))
    # a prior is a fact about the model, not an input of its embeddings
    assert with_prior.fingerprint == without.fingerprint


@pytest.mark.parametrize("value, words", [("76.1", "valid number"), (True, "valid number"),
                                          (None, "valid number"), (float("nan"), "finite")])
def test_a_bad_prior_value_is_a_config_error_naming_the_field(value, words):
    with pytest.raises(ConfigError) as err:
        parse_config(_config({"imagenet_top1": value}))
    assert "models[0](a).prior.imagenet_top1" in str(err.value)
    assert words in str(err.value)


def test_a_dataset_named_prior_is_a_config_error():
    cfg = _config({})
    cfg["datasets"][0]["name"] = "prior"
    with pytest.raises(ConfigError, match=r"datasets\[0\]\(prior\)\.name: .*reserved"):
        parse_config(cfg)


def test_a_bad_prior_name_is_a_config_error():
    with pytest.raises(ConfigError, match=r"prior\.1x"):
        parse_config(_config({"1x": 3.0}))


# -- parameter count and width, recorded where the model is built --------------------------------


def test_parameter_count_and_width_of_a_real_timm_model(tmp_path):
    import timm
    import torch

    from zoorank.embed.embedder import ChunkEmbedder
    from zoorank.rank.prior_columns import model_priors
    from zoorank.store import Store
    from zoorank.zoo import resolve_models

    cfg = parse_config({"datasets": [{"name": "d", "source": "sklearn_digits"}],
                        "models": [{"id": "tiny", "source": "timm", "name": "test_resnet",
                                    "input_size": 32, "prior": {"gflops": 0.5}}]})
    (model,) = resolve_models(cfg)
    embedder = ChunkEmbedder([model])
    reference = timm.create_model("test_resnet", pretrained=False, num_classes=0).eval()
    expected = sum(p.numel() for p in reference.parameters())
    assert embedder.param_counts["tiny"] == expected
    rng = np.random.default_rng(0)
    batch = {"image": rng.integers(0, 256, (4, 32, 32, 3), dtype=np.uint8),
             "view": np.array(["clean"] * 4), "bad": np.zeros(4, bool)}
    ((_, (feats, _, _)),) = embedder.embed(batch, {"tiny": {"clean"}}).items()
    with torch.inference_mode():
        width = reference(torch.zeros(1, 3, 32, 32)).shape[1]
    assert feats.shape[1] == width == reference.num_features
    # the manifest keeps the count (a column added beside the existing ones) and RANK reads it
    store = Store(str(tmp_path))
    store.update_manifest([{"dataset": "d", "view": "clean", "model_id": "tiny",
                            "fingerprint": "f", "status": "done", "rows": 4,
                            "dim": int(feats.shape[1]), "seconds": 0.1, "bad_images": 0,
                            "param_count": embedder.param_counts["tiny"]}])
    got = model_priors([model], store.read_manifest()).set_index("model_id").loc["tiny"]
    assert got["param_count"] == expected and got["width"] == width
    assert got["prior/gflops"] == 0.5


def test_a_manifest_row_written_before_param_counts_has_none(tmp_path):
    from types import SimpleNamespace

    from zoorank.rank.prior_columns import model_priors
    from zoorank.store import Store

    store = Store(str(tmp_path))
    store.update_manifest([{"dataset": "d", "view": "clean", "model_id": "old",
                            "fingerprint": "f", "status": "done", "rows": 4, "dim": 8,
                            "seconds": 0.1, "bad_images": 0}])
    manifest = store.read_manifest()
    assert manifest["param_count"].isna().all()
    store.update_manifest(manifest.to_dict("records"))  # rewriting such a row keeps it missing
    got = model_priors([SimpleNamespace(model_id="old")], store.read_manifest()).iloc[0]
    assert np.isnan(got["param_count"]) and got["width"] == 8


# -- pure maths --------------------------------------------------------------------------------


def test_prior_tau_is_scipy_kendall_on_the_oriented_finite_pairs():
    rng = np.random.default_rng(0)
    m, p = rng.normal(size=30), rng.normal(size=30)
    m[3], p[7] = np.nan, np.nan
    keep = np.isfinite(m) & np.isfinite(p)
    tau, n = prior_tau(m, p, direction=-1)
    assert n == 28
    assert tau == pytest.approx(stats.kendalltau(-m[keep], p[keep]).statistic)
    assert np.isnan(prior_tau(np.ones(5), np.arange(5.0))[0])  # a constant metric: undefined


def test_confound_fires_when_a_metric_follows_a_prior_and_not_on_an_independent_one():
    n = 12
    width = np.array([64, 128, 256, 512, 768, 1024, 96, 192, 384, 640, 896, 2048], float)
    rng = np.random.default_rng(0)
    follows = np.log(width) * 3 + 1  # a monotone function of the width: τ = 1
    against = -width  # lower is better, oriented: exactly the width's order
    perm = rng.permutation(n)
    independent = width[perm] + 0.0
    # the independent metric's τ with width, computed here: below the threshold for this seed
    tau_ind = stats.kendalltau(independent, width).statistic
    assert abs(tau_ind) < CONFOUND_TAU
    hits = confounds({"follows": (follows, 1), "against": (against, -1),
                      "independent": (independent, 1)}, {"width": width})
    assert [(h["metric"], h["prior"]) for h in hits] == [("follows", "width"),
                                                         ("against", "width")]
    assert all(h["tau"] == pytest.approx(1.0) and h["n"] == n for h in hits)
    # a perfect order over fewer than CONFOUND_MIN_MODELS models is no evidence
    k = CONFOUND_MIN_MODELS - 1
    assert confounds({"follows": (follows[:k], 1)}, {"width": width[:k]}) == []


def test_confound_warnings_name_the_metric_the_prior_and_tau_on_a_board():
    n = 8
    params = np.arange(1, n + 1) * 1e6
    board = pd.DataFrame({
        "model_id": [f"m{i}" for i in range(n)],
        "rank": stats.rankdata(-params),  # the leaderboard is ordered by size
        "d/rankme": params / 1e5 + 0.5,
        "d/uniformity": -np.arange(n)[::-1] * 0.1,  # lower is better: best = largest model
        "d/cluster_learnability": np.random.default_rng(1).permutation(n) / n,
        "param_count": params,
        "width": np.full(n, 512.0),  # one width: τ undefined, never a confound
        "prior/gflops": np.full(n, np.nan),  # no values: not a prior column
    })
    cl_tau = stats.kendalltau(board["d/cluster_learnability"], params).statistic
    hits = confound_warnings(board, ["d"])
    got = {(h["dataset"], h["metric"], h["prior"]) for h in hits}
    expected = {("all", "leaderboard_rank", "param_count"), ("d", "rankme", "param_count")}
    expected.add(("d", "uniformity", "param_count"))
    if abs(cl_tau) >= CONFOUND_TAU:
        expected.add(("d", "cluster_learnability", "param_count"))
    assert got == expected
    rankme = next(h for h in hits if h["metric"] == "rankme")
    assert rankme["tau"] == pytest.approx(1.0)
    assert "rankme on d follows the parameter count" in rankme["sentence"]
    lead = next(h for h in hits if h["metric"] == "leaderboard_rank")
    assert lead["sentence"].startswith("Confound: the leaderboard's order follows")


# -- RANK: the priors' rows in the agreement table, the columns and the settings ----------------


@pytest.mark.timeout(300)
def test_rank_writes_prior_columns_agreement_rows_and_confounds(tmp_path):
    from deltalake import DeltaTable
    from rank_fixtures import DATASET, config_dict, write_store

    from zoorank.catalog import build_catalog
    from zoorank.decide.leaderboard import read_leaderboard
    from zoorank.rank import write_rank_outputs
    from zoorank.store import Store

    root = str(tmp_path / "store")
    models = write_store(root)
    cfg = config_dict(root)
    # a published figure per model; "noise" has none (missing, not zero)
    top1 = {"proj-a": 70.0, "proj-b": 71.0, "rot-0": 72.5, "rot-1": 69.0, "lowrank": 60.0,
            "collapsed": 40.0}
    for m in cfg["models"]:
        if m["id"] in top1:
            m["prior"] = {"imagenet_top1": top1[m["id"]]}
    config = parse_config(cfg)
    store = Store(root)
    # parameter counts in RankMe's order of these embeddings (collapsed: the smallest), so RankMe
    # follows the parameter count exactly: a confound by construction
    from zoorank.metrics.label_free.rankme import rankme

    def rm(z):
        try:
            return rankme(z)
        except ValueError:
            return -1.0

    order = sorted(models, key=lambda m: rm(models[m]))
    counts = {m: 1000 * (i + 1) for i, m in enumerate(order)}
    manifest = store.read_manifest()
    manifest["param_count"] = manifest["model_id"].map(counts).astype("Int64")
    # a done row of the same fingerprint is never merged over: rewrite the table as EMBED would
    # have written it
    store.write_parquet("manifest", manifest)
    catalog = build_catalog(config)
    manifest = catalog.fresh_manifest(store.read_manifest())
    metrics = catalog.fresh_metrics(store, manifest)
    # the oracle: a hand-set accuracy per model (RANK takes the oracle table as given)
    acc = {"proj-a": 0.9, "proj-b": 0.85, "rot-0": 0.88, "rot-1": 0.87, "lowrank": 0.5,
           "noise": 0.1, "collapsed": 0.1}
    oracle = pd.DataFrame([{"model_id": m, "dataset": DATASET, "metric": "knn_accuracy",
                            "value": v, "params": "{}", "n": 150, "dim": 24, "seed": 0,
                            "zoorank_version": "test", "fingerprint": f"o-{m}"}
                           for m, v in acc.items()])
    board = write_rank_outputs(config, store, catalog.models, metrics, oracle, show=False,
                               manifest=manifest)
    b = board.set_index("model_id")
    for m in models:
        assert b.loc[m, "param_count"] == counts[m]
        assert b.loc[m, "width"] == models[m].shape[1]
    assert np.isnan(b.loc["noise", "prior/imagenet_top1"])
    assert b.loc["rot-0", "prior/imagenet_top1"] == 72.5

    agree = DeltaTable(f"{root}/agreement").to_pandas()
    assert set(agree.loc[agree["kind"] == "prior", "metric"]) == {
        "param_count", "width", "prior/imagenet_top1"}
    assert set(agree.loc[agree["kind"] == "metric", "metric"]) >= {"rankme", "leaderboard_rank"}
    row = agree[(agree.metric == "prior/imagenet_top1") & (agree.family == "all")].iloc[0]
    have = [m for m in top1]
    x = np.array([top1[m] for m in have])
    y = np.array([acc[m] for m in have])
    assert row["n_models"] == len(have) and row["n_metric_nan"] == 1
    assert row["kendall_tau"] == pytest.approx(stats.kendalltau(x, y).statistic)
    assert row["spearman"] == pytest.approx(stats.spearmanr(x, y).statistic)
    assert row["top1_model"] == "rot-0"  # the highest prior
    # width: 24 for every model but lowrank (2), recorded from the manifest's dim
    w = agree[(agree.metric == "width") & (agree.family == "all")].iloc[0]
    widths = [models[m].shape[1] for m in acc]
    assert w["kendall_tau"] == pytest.approx(stats.kendalltau(widths, list(acc.values())).statistic)

    _, settings = read_leaderboard(store)
    decision = settings["decision"]
    assert decision["confound_rule"] == {"tau": CONFOUND_TAU, "min_models": CONFOUND_MIN_MODELS}
    expected = []
    for prior in ("param_count", "prior/imagenet_top1"):
        p = board[prior].to_numpy(dtype=float)
        for metric in ("rankme", "uniformity"):
            v = board[f"{DATASET}/{metric}"].to_numpy(dtype=float)
            v = v if metric == "rankme" else -v
            keep = np.isfinite(v) & np.isfinite(p)
            tau = stats.kendalltau(v[keep], p[keep]).statistic
            if keep.sum() >= CONFOUND_MIN_MODELS and abs(tau) >= CONFOUND_TAU:
                expected.append((metric, prior, round(tau, 6)))
    got = [(c["metric"], c["prior"], round(c["tau"], 6)) for c in decision["confounds"]
           if c["dataset"] == DATASET]
    assert sorted(got) == sorted(expected)
    assert ("rankme", "param_count", 1.0) in expected

    # what the report shows, as plain data
    from zoorank.decide.board_priors import prior_summary

    summary = prior_summary(board, settings, agree)
    assert [r["model_id"] for r in summary["rows"]] == list(board["model_id"])
    assert summary["rows"][0].keys() == {"model_id", "param_count", "width", "prior/imagenet_top1"}
    line = next(t for t in summary["sentences"] if t.startswith("Priors against knn_accuracy"))
    assert f"prior/imagenet_top1 τ {stats.kendalltau(x, y).statistic:+.2f}" in line
    assert all(c["sentence"] in summary["sentences"] for c in decision["confounds"])


def test_every_confound_warning_is_a_caveat_of_the_decision():
    from zoorank.decide.verdict import caveat_lines

    confounds = [{"sentence": f"Confound: m{i} follows the parameter count."} for i in range(5)]
    lines = caveat_lines(pd.DataFrame({"model_id": ["a"]}),
                         {"decision": {"top_set": ["a"], "confounds": confounds}})
    assert lines[1:] == [c["sentence"] for c in confounds]


def test_the_demo_agreement_table_names_the_priors_rows(tmp_path):
    from zoorank.demo import agreement_table
    from zoorank.store import Store

    rows = pd.DataFrame({"metric": ["nc", "param_count"], "kind": ["metric", "prior"],
                         "oracle_metric": "knn_accuracy", "dataset": "d", "family": "all",
                         "n_models": 6, "kendall_tau": [0.6, 0.2], "kendall_ci_low": 0.0,
                         "kendall_ci_high": 1.0, "top1_regret": 0.0})
    Store(str(tmp_path)).replace_table("agreement", rows)
    assert list(agreement_table(str(tmp_path))["metric"]) == ["nc", "param_count (prior)"]
