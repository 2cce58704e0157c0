"""The catalog: what the config should have in its store, with fingerprints, and every stage on it.

Stores are the hand-written digits store of ``rank_fixtures`` (quality known by construction); that
the catalog equals what the stages write on a real run is checked on the end-to-end run
(``tests/e2e/test_pipeline_e2e.py``).
"""

from __future__ import annotations

import io
import json
import shutil

import numpy as np
import pandas as pd
import pytest
from rank_fixtures import config_dict, embeddings, stamp_fingerprints

from zoorank.catalog import build_catalog, reliability_path, samples_path
from zoorank.config.loading import parse_config
from zoorank.rank import run_rank
from zoorank.store import Store

pytestmark = pytest.mark.timeout(600)


def _parquet_dataset(path) -> None:
    """The fixture's 300 digits as a Parquet dataset: PNG bytes, the true labels in ``label``, a
    seeded permutation of them in ``shuffled``."""
    from PIL import Image
    from sklearn.datasets import load_digits

    _, y, _ = embeddings()
    images = load_digits().images[: len(y)]
    png = []
    for img in images:
        buf = io.BytesIO()
        Image.fromarray(np.uint8(img * 15)).save(buf, format="PNG")
        png.append(buf.getvalue())
    shuffled = np.random.default_rng(5).permutation(y)
    pd.DataFrame({"image": png, "label": y, "shuffled": shuffled}).to_parquet(path)


def _parquet_config(root, data, label_column: str, **oracle):
    raw = config_dict(str(root), oracle={"knn": True, **oracle},
                      bootstrap=0)
    raw["datasets"] = [{"name": "digits", "source": "parquet", "path": str(data),
                        "image_column": "image", "label_column": label_column}]
    return parse_config(raw)


def _oracle(root) -> pd.DataFrame:
    frame = Store(str(root)).read_frame("oracle")
    return frame.set_index(["model_id", "metric"])["value"].sort_index()


def test_changing_label_column_recomputes_the_oracle_on_the_new_labels(store_root, tmp_path):
    data = tmp_path / "digits.parquet"
    _parquet_dataset(data)
    config = _parquet_config(store_root, data, "label")
    store = Store(str(store_root))
    stamp_fingerprints(config, store)  # the store's embeddings are those of this dataset
    fresh_copy = tmp_path / "fresh"
    shutil.copytree(store_root, fresh_copy)

    run_rank(config, show=False)
    before = _oracle(store_root)
    assert before.loc[("proj-a", "knn_accuracy")] > 0.8  # true labels: a good projection

    changed = _parquet_config(store_root, data, "shuffled")
    run_rank(changed, show=False)
    after = _oracle(store_root)
    samples = store.read_frame(samples_path("digits"))
    assert np.array_equal(samples["label"].to_numpy(np.int64),
                          pd.read_parquet(data)["shuffled"].to_numpy(np.int64))
    assert after.loc[("proj-a", "knn_accuracy")] < 0.5  # permuted labels: near chance
    assert not np.allclose(before.to_numpy(), after.reindex(before.index).to_numpy())

    # a store that never saw the old column gives the same oracle
    fresh_config = _parquet_config(fresh_copy, data, "shuffled")
    Store(str(fresh_copy)).delete(samples_path("digits"))
    run_rank(fresh_config, show=False)
    pd.testing.assert_series_equal(after, _oracle(fresh_copy))

    # nothing stale is left: a third rank recomputes nothing
    version = Store(str(store_root)).read_table_commit("oracle")[2]
    run_rank(changed, show=False)
    assert Store(str(store_root)).read_table_commit("oracle")[2] == version


def _reliability_raw(root) -> dict:
    return config_dict(str(root), oracle={"knn": True, "r_auroc": True}, bootstrap=0)


@pytest.fixture(scope="module")
def ranked_with_reliability(template, tmp_path_factory):
    """A copy of the template store ranked and reported with NC and R-AUROC (fresh reliability
    tables), once for the module; never written to: tests take a copy."""
    from zoorank.report import run_report

    root = tmp_path_factory.mktemp("reliability") / "store"
    shutil.copytree(template, root)
    config = parse_config(_reliability_raw(root))
    run_rank(config, show=False)
    run_report(config)
    return root


@pytest.mark.parametrize("change", ["nc removed", "older nc_k"])
def test_reliability_tables_that_are_not_fresh_plot_nowhere_and_feed_no_r_auroc(
        ranked_with_reliability, tmp_path, change):
    from zoorank.report import run_report

    store_root = tmp_path / "store"  # the ranked and reported store, before the change
    shutil.copytree(ranked_with_reliability, store_root)
    raw = _reliability_raw(store_root)
    page = (store_root / "report" / "index.html").read_text()
    assert "reliability-digits-rot.png" in page
    oracle = Store(str(store_root)).read_frame("oracle")
    assert set(oracle.query("model_id == 'rot-0'")["metric"]) >= {"r_auroc_nc"}

    if change == "nc removed":
        raw["metrics"] = ["rankme", "uniformity"]
    else:
        raw["score"] = {"nc_k": 7}  # the stored NC rows and table were made with k = 10
    config = parse_config(raw)
    assert build_catalog(config).fresh_reliability(
        build_catalog(config).fresh_manifest(Store(str(store_root)).read_manifest()),
        Store(str(store_root)).read_metrics()) == {}
    run_rank(config, show=False)
    run_report(config)
    page = (store_root / "report" / "index.html").read_text()
    assert "reliability-" not in page and "nc-digits.png" not in page
    assert not list((store_root / "report").glob("reliability-*.png"))
    oracle = Store(str(store_root)).read_frame("oracle")
    assert not oracle["metric"].str.startswith("r_auroc").any()
    assert set(oracle.query("model_id == 'rot-0'")["metric"]) == {"knn_accuracy"}
    assert store_root.joinpath(reliability_path("digits", "rot")).is_file()  # gc's to delete


def test_gc_deletes_exactly_what_the_store_has_and_the_catalog_does_not(store_root, monkeypatch):
    from zoorank.gc import run_gc

    monkeypatch.setenv("ZOORANK_GC_GRACE_SECONDS", "0")  # the junk below was written just now

    config = parse_config(config_dict(str(store_root), oracle={"knn": True}, bootstrap=0))
    store = Store(str(store_root))
    run_rank(config, show=False)
    # a pool metric's row names its pool by id (pools table: members stored once); a second pool
    # that no row names is what a dropped or recomputed pool metric leaves behind
    metrics = store.read_frame("metrics")
    metrics.loc[0, "params"] = json.dumps({**json.loads(metrics.loc[0, "params"] or "{}"),
                                           "pool_id": "pool-kept"})
    store.write_parquet("metrics", metrics)
    store.upsert_rows("pools", pd.DataFrame({"pool_id": ["pool-kept", "pool-gone"],
                                             "metric": "clid", "dataset": "digits",
                                             "members": '["a", "b"]'}), ["pool_id"])
    keys = {"manifest": ["dataset", "view", "model_id"], "metrics": ["model_id", "dataset", "metric"],
            "oracle": ["model_id", "dataset", "metric"]}

    def table(name):
        return store.read_frame(name).sort_values(keys[name]).reset_index(drop=True)

    kept = {name: table(name) for name in keys}
    # what the catalog does not have: a shard of a model gone, a stale entry with its shard,
    # rows of a metric and an oracle row of a model not configured, a reliability table of a
    # group gone, the sample table of a dataset gone, a decoded-view cache
    store.write_shard("digits", "clean", "old-model", 0, np.arange(3), np.zeros(3), np.ones((3, 4)))
    stale_entry = {"dataset": "digits", "view": "clean", "model_id": "gone", "fingerprint": "x",
                   "status": "done", "error": None, "rows": 3, "dim": 4, "seconds": 0.1,
                   "bad_images": 0}
    store.update_manifest([stale_entry])
    store.write_shard("digits", "clean", "gone", 0, np.arange(3), np.zeros(3), np.ones((3, 4)))
    junk_rows = kept["metrics"].head(2).assign(metric="lidar")
    store.write_parquet("metrics", pd.concat([kept["metrics"], junk_rows]))
    junk_oracle = kept["oracle"].head(1).assign(model_id="gone")
    store.write_parquet("oracle", pd.concat([kept["oracle"], junk_oracle]))
    store.write_parquet(reliability_path("digits", "gone-group"), pd.DataFrame({"nc": [1.0]}))
    store.replace_table(samples_path("old-dataset"), pd.DataFrame({"sample_id": [0]}))
    store.write_parquet("cache/views/digits-abc/part-0.parquet", pd.DataFrame({"x": [0]}))

    report = run_gc(config)
    assert sorted(report.removed) == sorted([
        Store.embedding_dir("digits", "clean", "gone"),
        Store.embedding_dir("digits", "clean", "old-model"),
        reliability_path("digits", "gone-group"), samples_path("old-dataset"),
        "cache/views/digits-abc"])
    assert (report.metric_rows, report.oracle_rows, report.manifest_rows) == (2, 1, 1)
    assert report.pool_rows == 1
    assert store.read_frame("pools")["pool_id"].tolist() == ["pool-kept"]
    for name, frame in kept.items():  # every row the catalog has is kept, unchanged
        pd.testing.assert_frame_equal(table(name), frame)
    assert store.exists(reliability_path("digits", "rot"))
    assert run_gc(config).removed == []


def test_a_command_computes_the_score_plan_once_per_manifest_snapshot(store_root, monkeypatch):
    import zoorank.catalog as catalog_module

    calls = []
    real = catalog_module.plan_score

    def counted(*args, **kwargs):
        calls.append(1)
        return real(*args, **kwargs)

    monkeypatch.setattr(catalog_module, "plan_score", counted)
    config = parse_config(config_dict(str(store_root), oracle={"knn": True, "r_auroc": True},
                                      bootstrap=0))
    catalog = build_catalog(config)
    run_rank(config, show=False, catalog=catalog)  # metrics, reliability and oracle freshness
    assert len(calls) == 1 == catalog.score_plans_computed
    # the derived plans equal the ones computed from scratch (what SCORE would run now)
    store = Store(str(store_root))
    manifest = catalog.fresh_manifest(store.read_manifest())
    metrics = store.read_metrics()
    for stored in (metrics, metrics.iloc[::2], metrics.iloc[:0]):
        assert catalog.plan_score(manifest, stored, lambda d, g: True) == real(
            config, catalog.models, manifest, stored, lambda d, g: True)
    assert len(calls) == 1


def test_an_unreadable_checkpoint_fails_its_rows_with_the_reason_and_gc_deletes_nothing(store_root):
    import dataclasses

    from zoorank.errors import InputError
    from zoorank.gc import run_gc

    config = parse_config(config_dict(str(store_root), bootstrap=0))
    readable = build_catalog(config)
    victim = readable.models[0].model_id
    reason = "checkpoint s3://***@bucket/m.safetensors cannot be read: AWS Error (HTTP status 500)"
    models = [dataclasses.replace(m, unreadable=reason) if m.model_id == victim else m
              for m in readable.models]
    store = Store(str(store_root))
    manifest = store.read_manifest()
    fresh = build_catalog(config, models).fresh_manifest(manifest)
    rows = fresh[fresh["model_id"] == victim]
    assert len(rows) and set(rows["status"]) == {"failed"} and set(rows["error"]) == {reason}
    expected = readable.fresh_manifest(manifest)
    pd.testing.assert_frame_equal(fresh[fresh["model_id"] != victim].reset_index(drop=True),
                                  expected[expected["model_id"] != victim].reset_index(drop=True))
    with pytest.raises(InputError, match="gc deletes nothing.*HTTP status 500"):
        run_gc(config, models=models)
    pd.testing.assert_frame_equal(store.read_manifest(), manifest)


def test_a_samples_table_without_a_fingerprint_column_is_stale_not_an_error(tmp_path):
    data = tmp_path / "digits.parquet"
    _parquet_dataset(data)
    config = _parquet_config(tmp_path / "store", data, "label")
    store = Store(str(tmp_path / "store"))
    catalog = build_catalog(config)
    # an older zoorank's samples table: the sample list and labels, no fingerprint column
    store.replace_table(samples_path("digits"), pd.DataFrame({"sample_id": np.arange(3, dtype=np.int64),
                                                               "label": ["0", "1", "2"]}))
    assert catalog.stale_samples(store) == ["digits"]
