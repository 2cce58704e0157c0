"""Never a stale or silent number: freshness in every reader, honest fingerprints, missing is missing.

A store written directly (``rank_fixtures``: digits embeddings whose quality is known by
construction) with the fingerprints EMBED and SCORE would give it; then the config or the store
changes the way a user changes them, and RANK / REPORT must follow.
"""

from __future__ import annotations

import json
import math
from dataclasses import replace

import numpy as np
import pandas as pd
import pytest
from deltalake import DeltaTable
from rank_fixtures import config_dict, write_store
from scipy import stats

from zoorank.catalog import build_catalog
from zoorank.config.loading import parse_config
from zoorank.rank import run_rank
from zoorank.store import Store


def fresh_metrics(config, store):
    return build_catalog(config).fresh_metrics(store)

pytestmark = pytest.mark.timeout(300)


def _config(root, **changes):
    raw = config_dict(str(root))
    for key, value in changes.items():
        raw[key] = value
    return parse_config(raw)


def test_dropping_a_metric_removes_it_from_the_leaderboard(store_root):
    board = run_rank(_config(store_root), show=False)
    assert "digits/nc" in board
    board = run_rank(_config(store_root, metrics=["rankme", "uniformity"]), show=False)
    assert not [c for c in board.columns if "/nc" in c]
    assert "digits/rankme" in board and "digits/uniformity" in board


def test_rows_made_under_other_settings_are_not_read(store_root):
    config = _config(store_root)
    raw = config.model_dump(mode="json")
    raw["score"]["nc_k"] = 7  # the stored nc rows were made with k = 100
    changed = parse_config(raw)
    fresh = fresh_metrics(changed, Store(str(store_root)))
    assert "nc" not in set(fresh["metric"])
    assert set(fresh["metric"]) == {"rankme", "uniformity"}
    assert len(fresh_metrics(config, Store(str(store_root)))) == len(Store(str(store_root))
                                                                     .read_metrics())


def test_a_metric_version_bump_invalidates_that_metric_only_and_a_release_nothing(
        store_root, monkeypatch):
    import zoorank
    from zoorank.metrics import registry

    config = _config(store_root)
    catalog = build_catalog(config)
    manifest = catalog.fresh_manifest(Store(str(store_root)).read_manifest())
    before = catalog.metric_fingerprints(manifest)
    monkeypatch.setattr(zoorank, "__version__", "99.0.0")
    assert catalog.metric_fingerprints(manifest) == before
    monkeypatch.setitem(registry.REGISTRY, "uniformity",
                        replace(registry.REGISTRY["uniformity"], version=2))
    after = catalog.metric_fingerprints(manifest)
    changed = {k for k in before if before[k] != after[k]}
    assert changed and {metric for _, _, metric in changed} == {"uniformity"}


@pytest.mark.parametrize("status", ["pending", "stale"])
def test_an_entry_that_is_not_done_under_this_config_is_missing(store_root, status):
    store = Store(str(store_root))
    manifest = store.read_manifest()
    row = (manifest["model_id"] == "proj-a")
    if status == "pending":
        manifest.loc[row, "status"] = "pending"
    else:
        manifest.loc[row, "fingerprint"] = "made-by-another-config"
    store.write_parquet("manifest", manifest)
    board = run_rank(_config(store_root), show=False).set_index("model_id")
    assert "proj-a" not in board.index or math.isnan(board.loc["proj-a", "rank"])
    failed = DeltaTable(str(store_root / "failed")).to_pandas()
    reason = failed[failed.model_id == "proj-a"]["error"].iloc[0]
    assert status in reason
    assert not store.read_metrics().query("model_id == 'proj-a'").empty  # nothing was deleted


def test_a_missing_value_is_unranked_and_left_out_of_tau(store_root):
    from zoorank.metrics import knn_accuracy

    store = Store(str(store_root))
    metrics = store.read_metrics()
    broken = (metrics["model_id"] == "noise") & (metrics["metric"] == "uniformity")
    metrics.loc[broken, "value"] = np.nan
    metrics.loc[broken, "params"] = json.dumps({"error": "FloatingPointError: overflow"})
    store.write_parquet("metrics", metrics)
    config = _config(store_root, oracle={"knn": True},
                     rank={"primary_metric": "uniformity", "bootstrap": 0})
    models = build_catalog(config).models
    from rank_fixtures import embeddings

    from zoorank.rank import write_rank_outputs

    _, y, arrays = embeddings()
    oracle = pd.DataFrame([  # a real kNN accuracy per model (half the samples train the other)
        {"model_id": m, "dataset": "digits", "metric": "knn_accuracy",
         "value": knn_accuracy(Z[::2], y[::2], Z[1::2], y[1::2]), "params": "{}", "n": 150,
         "dim": 24, "seed": 0, "zoorank_version": "test", "fingerprint": f"o-{m}"}
        for m, Z in arrays.items()])
    board = write_rank_outputs(config, store, models, fresh_metrics(config, store), oracle,
                               show=False).set_index("model_id")
    assert math.isnan(board.loc["noise", "rank"])
    assert board["rank"].notna().sum() == len(board) - 1
    assert "FloatingPointError" in board.loc["noise", "missing"]
    agree = DeltaTable(str(store_root / "agreement")).to_pandas()
    row = agree[(agree.metric == "uniformity") & (agree.family == "all")].iloc[0]
    keep = board.index[board["digits/uniformity"].notna()]
    expected = stats.kendalltau(-board.loc[keep, "digits/uniformity"],
                                board.loc[keep, "digits/knn_accuracy"]).statistic
    assert row["n_metric_nan"] == 1 and row["n_models"] == len(keep)
    assert row["kendall_tau"] == pytest.approx(expected)


def test_every_model_failing_exits_3_and_a_primary_typo_exits_2(store_root, capsys):
    import yaml

    from zoorank.cli import main

    raw = config_dict(str(store_root))
    raw["models"] = [m for m in raw["models"] if m["id"] == "broken"]
    path = store_root.parent / "broken.yaml"
    path.write_text(yaml.safe_dump(raw))
    assert main(["rank", str(path)]) == 3
    assert "nothing could be ranked" in capsys.readouterr().err

    raw = config_dict(str(store_root), primary_metric="rankmee")
    path.write_text(yaml.safe_dump(raw))
    assert main(["rank", str(path)]) == 2
    err = capsys.readouterr().err
    assert "rank.primary_metric" in err and "rankmee" in err


def test_gc_removes_stale_rows_and_orphans_and_keeps_what_is_fresh(store_root, monkeypatch):
    from zoorank.gc import run_gc

    store = Store(str(store_root))
    store.write_shard("digits", "clean", "old-model", 0, np.arange(3), np.zeros(3),
                      np.ones((3, 4)))
    config = _config(store_root, metrics=["rankme", "uniformity"])
    run_rank(config, show=False)
    # files just written may belong to a concurrent writer: gc leaves them for the grace period
    assert run_gc(config, dry_run=True).shard_dirs == 0
    monkeypatch.setenv("ZOORANK_GC_GRACE_SECONDS", "0")
    config = _config(store_root, metrics=["rankme", "uniformity"])
    board = run_rank(config, show=False)
    before = store.read_metrics()
    dry = run_gc(config, dry_run=True)
    assert store.read_metrics().equals(before) and store.exists("reliability/digits/rot.parquet")
    report = run_gc(config)
    assert report.metric_rows == dry.metric_rows == int((before["metric"] == "nc").sum()) == 2
    assert report.shard_dirs == 1 and not store.exists("embeddings/digits/clean/old-model")
    assert report.reliability_tables == 1 and not store.exists("reliability/digits/rot.parquet")
    assert report.bytes_freed > 0
    assert set(store.read_metrics()["metric"]) == {"rankme", "uniformity"}
    pd.testing.assert_frame_equal(run_rank(config, show=False), board)
    assert run_gc(config).metric_rows == 0


def test_store_uri_credentials_never_reach_the_console_or_the_report(tmp_path, s3_server, capsys):
    from zoorank.report import run_report

    uri = s3_server("fresh-redact/store")
    assert "testing:testing@" in uri  # the fixture's URI carries credentials
    write_store(uri)
    config = parse_config(config_dict(uri))
    run_rank(config, show=True)
    run_report(config)
    store = Store(uri)
    page = store.read_text("report/index.html")
    out = capsys.readouterr()
    for text in (page, out.out, out.err, repr(store), store.read_text("leaderboard.md")):
        assert "testing:testing" not in text
    assert "***@fresh-redact/store" in page
