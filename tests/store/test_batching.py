"""Commits that scale (zoorank.store.batching, zoorank.store.tables): rows committed per K models or
T seconds, merges that read only the files their keys can touch, compaction and checkpoints."""

from __future__ import annotations

import os
import subprocess
import sys
import textwrap

import pandas as pd
import pytest
from deltalake import DeltaTable

from zoorank.store import Store, tables
from zoorank.store.schema import METRICS_KEY


def model_rows(model: str, metrics: int = 3) -> list[dict]:
    return [{"model_id": model, "dataset": "d", "metric": f"x{j}", "value": float(j),
             "fingerprint": "fp"} for j in range(metrics)]


def commits(store: Store, name: str) -> int:
    """Commits that wrote rows (MERGEs): not the one that created the table empty."""
    from deltalake import DeltaTable

    if store.table_version(name) is None:
        return 0
    history = DeltaTable(store.path(name)).history()
    return sum(h.get("operation") == "MERGE" for h in history)


def test_rows_are_committed_once_per_k_models(tmp_path):
    store = Store(tmp_path / "s")
    with store.batched("metrics", METRICS_KEY, models=4, seconds=3600) as out:
        for i in range(10):
            out.add(model_rows(f"m{i:02d}"))
            # committed after the 4th and 8th model only: K = 4
            assert commits(store, "metrics") == (i + 1) // 4
    assert commits(store, "metrics") == 3  # the last two models when the block ends
    assert len(store.read_metrics()) == 30


def test_rows_wait_at_most_t_seconds_for_the_next_result(tmp_path):
    store = Store(tmp_path / "s")
    now = [0.0]
    with store.batched("metrics", METRICS_KEY, models=100, seconds=10,
                       clock=lambda: now[0]) as out:
        out.add(model_rows("a"))
        now[0] = 9.9
        out.add(model_rows("b"))
        assert commits(store, "metrics") == 0
        now[0] = 10.0  # the first rows have waited T: this result commits both
        out.add(model_rows("c"))
        assert commits(store, "metrics") == 1 and len(store.read_metrics()) == 9
        now[0] = 15.0
        out.add(model_rows("d"))  # a new batch: its clock starts at 15
        assert commits(store, "metrics") == 1


def test_a_block_that_raises_still_commits_what_finished(tmp_path):
    store = Store(tmp_path / "s")
    with pytest.raises(RuntimeError, match="task 3 raised"):
        with store.batched("metrics", METRICS_KEY, models=8) as out:
            for i in range(5):
                if i == 3:
                    raise RuntimeError("task 3 raised")
                out.add(model_rows(f"m{i}"))
    assert sorted(store.read_metrics()["model_id"].unique()) == ["m0", "m1", "m2"]


def test_a_killed_writer_loses_at_most_the_batch_it_was_filling(tmp_path):
    """A writer killed mid-batch (no clean-up runs: ``os._exit``) keeps every committed batch and
    loses only the models of the batch it was filling (< K)."""
    store_path = tmp_path / "s"
    k, finished = 4, 11
    script = textwrap.dedent(f"""
        import os
        from zoorank.store import Store
        from zoorank.store.schema import METRICS_KEY
        store = Store({str(store_path)!r})
        out = store.batched("metrics", METRICS_KEY, models={k}, seconds=3600)
        for i in range({finished}):
            out.add([{{"model_id": f"m{{i:02d}}", "dataset": "d", "metric": "x",
                      "value": 1.0, "fingerprint": "fp"}}])
        os._exit(9)  # killed: the buffered models are never committed
    """)
    env = {**os.environ, "PYTHONPATH": os.getcwd()}
    done = subprocess.run([sys.executable, "-c", script], env=env, capture_output=True,
                          text=True, timeout=120)
    assert done.returncode == 9, done.stderr
    kept = sorted(Store(store_path).read_metrics()["model_id"])
    assert kept == [f"m{i:02d}" for i in range(finished // k * k)]  # 8 kept, 3 lost (< K)
    assert finished - len(kept) < k


def test_a_merge_reads_only_the_files_whose_keys_it_can_touch(tmp_path):
    loc = tables.TableLocation(str(tmp_path / "t"))
    for i in range(6):  # six files, each with its own model ids
        tables.merge(loc, pd.DataFrame(model_rows(f"m{i}a") + model_rows(f"m{i}b")), METRICS_KEY)
    assert tables.file_count(loc) == 6
    hit = tables.merge(loc, pd.DataFrame(model_rows("m2b")), METRICS_KEY)
    assert hit["num_target_files_scanned"] == 1 and hit["num_target_files_skipped_during_scan"] == 5
    new = tables.merge(loc, pd.DataFrame(model_rows("m9")), METRICS_KEY)
    assert new["num_target_files_scanned"] == 0 and new["num_target_files_removed"] == 0


def test_compaction_leaves_one_file_a_checkpoint_and_the_same_rows(tmp_path):
    store = Store(tmp_path / "s")
    for i in range(12):  # one commit (one small file) per model, as before batching
        store.upsert_rows("metrics", model_rows(f"m{i:02d}"), key=METRICS_KEY)
    before = store.read_metrics().sort_values(METRICS_KEY).reset_index(drop=True)
    loc = store.table("metrics")
    assert tables.file_count(loc) == 12
    assert store.compact_table("metrics", only_above=True) == {}  # 12 ≤ F: left alone
    done = store.compact_table("metrics")
    assert done["numFilesRemoved"] == 12 and done["numFilesAdded"] == 1
    assert tables.file_count(loc) == 1
    version = store.table_version("metrics")
    assert (tmp_path / "s" / "metrics" / "_delta_log"
            / f"{version:020d}.checkpoint.parquet").exists()
    after = DeltaTable(str(tmp_path / "s" / "metrics")).to_pandas()
    pd.testing.assert_frame_equal(after.sort_values(METRICS_KEY).reset_index(drop=True)[
        before.columns], before, check_dtype=False)
    assert store.compact_table("metrics") == {}  # one file: nothing to do, no commit
    assert store.table_version("metrics") == version


def test_a_batched_writer_compacts_a_table_that_passes_f_files(tmp_path, monkeypatch):
    monkeypatch.setattr(tables, "COMPACT_ABOVE_FILES", 5)
    store = Store(tmp_path / "s")
    with store.batched("metrics", METRICS_KEY, models=1) as out:
        for i in range(8):
            out.add(model_rows(f"m{i}"))
            assert tables.file_count(store.table("metrics")) <= 5
    assert len(store.read_metrics()) == 24


def test_a_superseding_batch_deletes_only_the_older_rows_of_its_own_owners(tmp_path):
    from zoorank.store.batching import superseding

    store = Store(tmp_path / "s")
    old = [{"model_id": m, "dataset": "d", "metric": f"x{j}", "value": 1.0, "fingerprint": "old"}
           for m in ("a", "b") for j in range(3)]
    store.upsert_rows("metrics", pd.DataFrame(old), key=list(METRICS_KEY))
    existing = store.read_metrics()
    write = superseding(store, "metrics", METRICS_KEY, existing, owner=["model_id", "dataset"])
    # model a is recomputed under a new spec that has metric x0 only: its x1, x2 rows are stale
    with store.batched("metrics", METRICS_KEY, write=write) as out:
        out.add([{"model_id": "a", "dataset": "d", "metric": "x0", "value": 2.0, "fingerprint": "new"}])
    got = store.read_metrics().sort_values(["model_id", "metric"])
    expected = [("a", "x0", "new", 2.0)] + [("b", f"x{j}", "old", 1.0) for j in range(3)]
    assert list(zip(got["model_id"], got["metric"], got["fingerprint"], got["value"])) == expected
