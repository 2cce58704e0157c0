"""The store (contract 2) on local disk and on a real S3 API served on loopback."""

from __future__ import annotations

import pickle

import duckdb
import numpy as np
import pandas as pd
import pyarrow.parquet as pq
import pytest

from zoorank.store import MANIFEST_COLUMNS, Store


@pytest.fixture(params=["local", "s3"])
def store(request, tmp_path):
    if request.param == "local":
        return Store(tmp_path / "store")
    return Store(request.getfixturevalue("s3_server")(f"zoo-{tmp_path.name.lower()[:40]}/run"))


def test_shards_round_trip_sorted_and_grouped(store):
    rng = np.random.default_rng(0)
    sample_id = np.array([5, 5, 5, 2, 2, 2])
    view_index = np.array([2, 0, 1, 1, 2, 0])
    emb = rng.normal(size=(6, 4)).astype(np.float32)
    store.write_shard("cifar", "simclr", "m1", 1, sample_id[:3], view_index[:3], emb[:3])
    store.write_shard("cifar", "simclr", "m1", 0, sample_id[3:], view_index[3:], emb[3:])
    got = store.read_embeddings("cifar", "simclr", "m1")
    order = np.lexsort((view_index, sample_id))
    np.testing.assert_array_equal(got.sample_id, sample_id[order])
    np.testing.assert_array_equal(got.view_index, view_index[order])
    np.testing.assert_array_equal(got.embedding, emb[order])
    ids, views = got.grouped()
    assert ids.tolist() == [2, 5] and views.shape == (2, 3, 4)
    np.testing.assert_array_equal(views[1, 0], emb[1])  # sample 5, view 0


def test_manifest_upsert_replaces_rows_by_key(store):
    row = dict(dataset="d", view="clean", model_id="m", fingerprint="a", status="failed", error="x")
    store.update_manifest([row])
    store.update_manifest([{**row, "fingerprint": "b", "status": "done", "error": None, "rows": 3},
                           {**row, "model_id": "n"}])
    m = store.read_manifest()
    assert list(m.columns) == MANIFEST_COLUMNS
    assert len(m) == 2
    assert store.done_entries() == {("d", "clean", "m"): "b"}


def test_store_pickles_to_the_same_location(store):
    store.write_text("report/x.txt", "hello")
    clone = pickle.loads(pickle.dumps(store))
    assert clone.read_text("report/x.txt") == "hello"


def test_missing_embeddings_raise_a_clear_error(store):
    with pytest.raises(FileNotFoundError, match="model=nope"):
        store.read_embeddings("d", "clean", "nope")


def test_local_shards_are_plain_parquet_for_pandas_and_duckdb(tmp_path):
    store = Store(tmp_path)
    store.write_shard("d", "clean", "m", 0, np.arange(3), np.zeros(3), np.eye(3))
    path = tmp_path / "embeddings/d/clean/m/part-000000.parquet"
    schema = pq.read_schema(path)
    assert str(schema.field("embedding").type) == "fixed_size_list<element: float>[3]"
    assert str(schema.field("sample_id").type) == "int64"
    assert str(schema.field("view_index").type) == "int32"
    assert pd.read_parquet(path)["sample_id"].tolist() == [0, 1, 2]
    n = duckdb.sql(f"select count(*) from read_parquet('{tmp_path}/embeddings/*/*/*/*.parquet')")
    assert n.fetchall()[0][0] == 3
    assert not [p for p in path.parent.iterdir() if p.name.startswith(".tmp")]
