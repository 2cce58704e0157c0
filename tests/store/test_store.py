"""The store (contract 2) on local disk and on a real S3 API served on loopback."""

from __future__ import annotations

import json
import pickle
import subprocess
import sys
import textwrap
import threading

import duckdb
import numpy as np
import pandas as pd
import pyarrow.parquet as pq
import pytest

from zoorank.store import Store, layout
from zoorank.store.schema import MANIFEST_COLUMNS, METRICS_KEY


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
    name = store.write_shard("d", "clean", "m", 0, np.arange(3), np.zeros(3), np.eye(3))
    assert name.startswith("part-000000-") and name.endswith(".parquet")
    path = tmp_path / "embeddings/d/clean/m" / name
    schema = pq.read_schema(path)
    assert str(schema.field("embedding").type) == "fixed_size_list<element: float>[3]"
    assert str(schema.field("sample_id").type) == "int64"
    assert str(schema.field("view_index").type) == "int32"
    assert pd.read_parquet(path)["sample_id"].tolist() == [0, 1, 2]
    n = duckdb.sql(f"select count(*) from read_parquet('{tmp_path}/embeddings/*/*/*/*.parquet')")
    assert n.fetchall()[0][0] == 3
    assert not [p for p in path.parent.iterdir() if p.name.startswith(".tmp")]


def test_shards_are_never_overwritten_and_readers_read_only_referenced_files(store):
    a = store.write_shard("d", "clean", "m", 0, np.arange(2), np.zeros(2), np.ones((2, 2)))
    b = store.write_shard("d", "clean", "m", 0, np.arange(2), np.zeros(2), 2 * np.ones((2, 2)))
    assert a != b  # the same part number twice: two files, neither rewritten
    row = dict(dataset="d", view="clean", model_id="m", fingerprint="f", status="done", rows=2)
    store.update_manifest([{**row, "shards": [a]}])
    assert store.read_embeddings("d", "clean", "m").embedding.tolist() == [[1, 1], [1, 1]]
    store.update_manifest([{**row, "shards": [b]}])  # same inputs: the first result stays
    assert json.loads(store.read_manifest()["shards"].iloc[0]) == [a]
    store.update_manifest([{**row, "status": "broken", "shards": [b]}])  # names other shards
    assert store.done_entries() == {("d", "clean", "m"): "f"}
    store.update_manifest([{**row, "status": "broken", "shards": [a]}])  # compare-and-swap
    assert store.done_entries() == {} and store.shard_names("d", "clean", "m") == []
    store.update_manifest([{**row, "shards": [b]}])  # the re-embed's commit swaps the reference
    assert store.read_embeddings("d", "clean", "m").embedding.tolist() == [[2, 2], [2, 2]]
    assert json.loads(store.read_manifest()["shards"].iloc[0]) == [b]


def test_a_metric_row_of_the_same_fingerprint_is_replaced_only_when_its_value_is_missing(store):
    row = {"model_id": "m", "dataset": "d", "metric": "x", "fingerprint": "f", "value": None}
    store.upsert_rows("metrics", [row], METRICS_KEY)
    store.upsert_rows("metrics", [{**row, "value": 1.0}], METRICS_KEY)  # a crash retried
    store.upsert_rows("metrics", [{**row, "value": 2.0}], METRICS_KEY)  # a late duplicate
    assert store.read_metrics()["value"].tolist() == [1.0]
    store.upsert_rows("metrics", [{**row, "fingerprint": "g", "value": 3.0}], METRICS_KEY)
    assert store.read_metrics()["value"].tolist() == [3.0]


def test_a_pending_row_never_replaces_a_done_row_of_the_same_fingerprint(store):
    row = dict(dataset="d", view="clean", model_id="m", fingerprint="f", rows=2, shards=["x"])
    store.update_manifest([{**row, "status": "done"}])
    store.update_manifest([{**row, "status": "pending", "rows": None, "shards": None}])
    assert store.done_entries() == {("d", "clean", "m"): "f"}
    store.update_manifest([{**row, "fingerprint": "g", "status": "pending"}])  # a new fingerprint
    assert store.read_manifest()["status"].tolist() == ["pending"]


def test_tables_are_delta_tables_that_pandas_and_duckdb_read(tmp_path):
    from deltalake import DeltaTable

    store = Store(tmp_path / "store")
    rows = [{"model_id": f"m{i}", "dataset": "d", "metric": "rankme", "value": float(i),
             "fingerprint": "a"} for i in range(3)]
    store.upsert_rows(layout.METRICS, rows, METRICS_KEY)
    store.upsert_rows(layout.METRICS, [{**rows[0], "value": 9.0, "fingerprint": "b"}], METRICS_KEY)
    path = tmp_path / "store" / "metrics"
    assert (path / "_delta_log").is_dir() and not (tmp_path / "store" / "metrics.parquet").exists()
    frame = DeltaTable(str(path)).to_pandas().sort_values("model_id")
    assert frame["value"].tolist() == [9.0, 1.0, 2.0]
    dataset = DeltaTable(str(path)).to_pyarrow_dataset()  # noqa: F841 (DuckDB scans it by name)
    got = duckdb.sql("select model_id, value from dataset order by model_id").fetchall()
    assert got == [("m0", 9.0), ("m1", 1.0), ("m2", 2.0)]
    # three commits: the empty table (version 0), then one MERGE per upsert (1, 2)
    assert store.table_version(layout.METRICS) == 2


WRITER = textwrap.dedent("""
    import sys
    from zoorank.store import Store
    from zoorank.store.schema import METRICS_KEY
    store, who, n = Store(sys.argv[1]), sys.argv[2], int(sys.argv[3])
    for i in range(n):
        store.upsert_rows("metrics", [{"model_id": f"{who}-{i}", "dataset": "d", "metric": "x",
                                       "value": float(i), "fingerprint": "f"}], METRICS_KEY)
        store.update_manifest([{"dataset": "d", "view": "clean", "model_id": f"{who}-{i}",
                                "fingerprint": "f", "status": "done", "rows": i}])
""")


@pytest.mark.timeout(300)
def test_concurrent_writers_lose_no_row(store):
    """Three processes commit one row at a time into the same two tables: every row lands once."""
    n = 6
    procs = [subprocess.Popen([sys.executable, "-c", WRITER, store.uri, who, str(n)],
                              stderr=subprocess.PIPE, text=True) for who in ("a", "b", "c")]
    for p in procs:
        assert p.wait(timeout=240) == 0, p.stderr.read()[-2000:]
    metrics = store.read_metrics()
    expected = sorted(f"{w}-{i}" for w in "abc" for i in range(n))
    assert sorted(metrics["model_id"]) == expected
    assert sorted(store.read_manifest()["model_id"]) == expected


@pytest.mark.parametrize("write", ["merge", "replace"])
def test_writers_creating_a_table_together_leave_one_row(tmp_path, write):
    """Four threads upsert the same key into (or replace) a table none of them found: one row,
    every time (a create that carried rows would be retried by delta-rs as a blind append)."""
    from zoorank.store import tables

    for trial in range(8):
        loc = tables.TableLocation(str(tmp_path / f"t{trial}"))
        start = threading.Barrier(4)
        errors: list[BaseException] = []

        def write_row(who: str, loc=loc, start=start, errors=errors) -> None:
            row = pd.DataFrame([{"model_id": "m", "dataset": "d", "metric": "x", "value": 1.0,
                                 "who": who}])
            start.wait()
            try:
                if write == "merge":
                    tables.merge(loc, row, METRICS_KEY)
                else:
                    tables.replace(loc, row)
            except BaseException as err:  # noqa: BLE001 - reported below
                errors.append(err)

        threads = [threading.Thread(target=write_row, args=(w,)) for w in "abcd"]
        for t in threads:
            t.start()
        for t in threads:
            t.join()
        assert not errors, errors
        assert len(tables.read(loc)) == 1, trial


def test_a_table_created_empty_reads_as_no_table_until_its_first_write(store):
    """What a reader sees between a writer's empty create and its first MERGE or overwrite:
    no table, as before the create (a report during a first run says 'run rank first')."""
    import pyarrow as pa

    from zoorank.store import tables

    loc = store.table(layout.LEADERBOARD)
    tables._create_empty(loc, pa.schema([("model_id", pa.string()), ("rank", pa.int64())]))
    assert tables._open(loc) is not None  # the create is committed ...
    assert not store.table_exists(layout.LEADERBOARD)  # ... yet readers find no table
    assert store.table_version(layout.LEADERBOARD) is None
    assert store.read_table_commit(layout.LEADERBOARD) == (None, {}, None)
    store.replace_table(layout.LEADERBOARD, pd.DataFrame({"model_id": ["m"], "rank": [1]}),
                        metadata={"zoorank": "{}"})
    board, meta = store.read_table_metadata(layout.LEADERBOARD, "zoorank")
    assert board["model_id"].tolist() == ["m"] and meta == "{}"
    assert store.table_version(layout.LEADERBOARD) == 1


def test_long_rows_replace_every_row_of_their_key(store):
    """Oracle-style upserts on (model_id, dataset): a new set of metrics replaces the old set."""
    old = [{"model_id": "m", "dataset": "d", "metric": k, "value": 1.0, "fingerprint": "a"}
           for k in ("knn", "probe")]
    other = [{"model_id": "n", "dataset": "d", "metric": "knn", "value": 5.0, "fingerprint": "a"}]
    store.upsert_rows(layout.ORACLE, old + other, ["model_id", "dataset"])
    new = [{"model_id": "m", "dataset": "d", "metric": k, "value": 2.0, "fingerprint": "b"}
           for k in ("knn", "recall")]
    store.upsert_rows(layout.ORACLE, new, ["model_id", "dataset"])
    got = store.read_frame(layout.ORACLE).sort_values(["model_id", "metric"])
    assert list(zip(got["model_id"], got["metric"], got["value"])) == [
        ("m", "knn", 2.0), ("m", "recall", 2.0), ("n", "knn", 5.0)]


def test_s3_commits_are_conditional_puts_that_never_overwrite_a_commit(s3_server):
    """delta-rs 1.x commits on S3 with If-None-Match (no lock service); moto's server honours it.

    A foreign commit file is put at the next version first: the store's commit must not replace
    it, and lands at the version after."""
    store = Store(s3_server("condput/store"))
    row = {"model_id": "m", "dataset": "d", "metric": "x", "value": 1.0, "fingerprint": "a"}
    store.upsert_rows(layout.METRICS, [row], METRICS_KEY)
    now = store.table_version(layout.METRICS)
    key = f"store/metrics/_delta_log/{now + 1:020d}.json"
    marker = json.dumps({"commitInfo": {"operation": "FOREIGN", "timestamp": 0}}) + "\n"
    s3_server.client.put_object(Bucket="condput", Key=key, Body=marker.encode())
    store.upsert_rows(layout.METRICS, [{**row, "model_id": "n"}], METRICS_KEY)
    body = s3_server.client.get_object(Bucket="condput", Key=key)["Body"].read().decode()
    assert "FOREIGN" in body
    assert store.table_version(layout.METRICS) == now + 2
    assert sorted(store.read_metrics()["model_id"]) == ["m", "n"]


def test_a_plain_s3_uri_reaches_the_endpoint_of_the_environment(s3_server, s3_env):
    from zoorank.store.uris import delta_location

    store = Store(s3_server.bucket("envstore") + "/run")
    store.update_manifest([{"dataset": "d", "view": "clean", "model_id": "m", "fingerprint": "f",
                            "status": "done", "rows": 1}])
    assert store.done_entries() == {("d", "clean", "m"): "f"}
    uri, options = delta_location("s3://k:s%2F1@b/p?endpoint_override=h:9&scheme=http", "b/p/t")
    assert uri == "s3://b/p/t" and options["AWS_ENDPOINT_URL"] == "http://h:9"
    assert (options["AWS_ACCESS_KEY_ID"], options["AWS_SECRET_ACCESS_KEY"]) == ("k", "s/1")
    assert options["AWS_ALLOW_HTTP"] == "true"


def test_the_readme_store_example_runs_on_a_store(tmp_path):
    """The pandas / DuckDB snippet of the docs' store how-to, run as written on a real store."""
    import re
    from pathlib import Path

    page = Path(__file__).resolve().parents[2] / "docs" / "how-to" / "read-the-store.md"
    code = re.search(r"```python\n(.*?)```", page.read_text(), re.S).group(1)
    store = Store(tmp_path / "zoo")
    store.upsert_rows(layout.METRICS, [{"model_id": "m", "dataset": "d", "metric": "rankme",
                                        "value": 1.0, "fingerprint": "f"}], METRICS_KEY)
    board = pd.DataFrame({"model_id": ["a", "b", "c", "d"], "rank": [2.0, 1.0, 4.0, 3.0]})
    store.replace_table(layout.LEADERBOARD, board, {"zoorank": "{}"})
    scope: dict = {}
    exec(code.replace("runs/zoo", str(tmp_path / "zoo")), scope)  # noqa: S102
    assert scope["metrics"]["value"].tolist() == [1.0]
    assert scope["top"]["model_id"].tolist() == ["b", "a", "d"]
