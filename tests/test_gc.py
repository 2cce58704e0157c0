"""zoorank.gc: the Delta tables' data files that no commit references any more are vacuumed.

The store is the hand-written digits store of ``rank_fixtures``; a "rerun" replaces metric rows
through the store's own commits (a delete, then the same rows upserted back), which leaves the
superseded Parquet files behind in the table's folder until gc vacuums them.
"""

from __future__ import annotations

from pathlib import Path

import deltalake
import pandas as pd
import pytest
from rank_fixtures import config_dict, write_store

from zoorank.config.loading import parse_config
from zoorank.gc import run_gc
from zoorank.store import METRICS, Store
from zoorank.store.schema import METRICS_KEY

pytestmark = pytest.mark.timeout(600)


def _files(table: Path) -> set[str]:
    """Every data file in a table's folder (the log left out)."""
    return {p.relative_to(table).as_posix() for p in table.rglob("*.parquet")
            if "_delta_log" not in p.parts}


def _referenced(table: Path) -> set[str]:
    """The data files the table's current version references."""
    return {Path(uri.removeprefix("file://")).relative_to(table).as_posix()
            for uri in deltalake.DeltaTable(str(table)).file_uris()}


def _sorted(frame: pd.DataFrame) -> pd.DataFrame:
    return frame.sort_values(METRICS_KEY).reset_index(drop=True)


def test_gc_vacuums_the_table_files_a_rerun_superseded_and_the_table_reads_the_same_rows(
        tmp_path, monkeypatch):
    monkeypatch.setenv("ZOORANK_GC_GRACE_SECONDS", "0")  # the rows were replaced just now
    root = tmp_path / "store"
    write_store(str(root))
    config = parse_config(config_dict(str(root), bootstrap=0))
    store = Store(str(root))
    table = root / METRICS
    before = _sorted(store.read_metrics())
    # a rerun that replaces rows: two commits, each rewriting the file that held them
    for part in (before.head(3), before.tail(2)):
        store.delete_rows(METRICS, part, METRICS_KEY)
        store.upsert_rows(METRICS, part, key=METRICS_KEY)
    pd.testing.assert_frame_equal(_sorted(store.read_metrics()), before)
    referenced = _referenced(table)
    superseded = _files(table) - referenced
    assert superseded, "the rerun left no superseded file: the test does not test anything"
    sizes = sum((table / f).stat().st_size for f in superseded)

    dry = run_gc(config, dry_run=True)
    assert {f"{METRICS}/{f}" for f in superseded} <= set(dry.vacuumed)
    assert dry.table_files >= len(superseded) and dry.bytes_freed >= sizes
    assert _files(table) - referenced == superseded  # a dry run deletes nothing

    report = run_gc(config)
    assert {f"{METRICS}/{f}" for f in superseded} <= set(report.vacuumed)
    assert report.table_files == dry.table_files and report.bytes_freed == dry.bytes_freed
    assert _files(table) == _referenced(table) == referenced
    # the same rows, through pandas on the table and through the store's snapshot read
    pd.testing.assert_frame_equal(
        _sorted(deltalake.DeltaTable(str(table)).to_pandas()[list(before.columns)]), before,
        check_dtype=False)
    pd.testing.assert_frame_equal(_sorted(store.read_metrics()), before)
    assert run_gc(config).table_files == 0  # nothing left to vacuum


@pytest.mark.slow
@pytest.mark.timeout(600)
def test_gc_beside_an_embed_older_than_the_grace_period_spares_what_it_needs(tmp_path,
                                                                             monkeypatch):
    """A `zoorank embed` (its own local Ray) paused after it wrote its pending rows, its view
    cache decoded: everything it has is older than gc's (shortened) grace period, yet gc deletes
    none of it, only a dead writer's row; the embed then finishes."""
    import os
    import subprocess
    import sys
    import time

    import yaml
    from test_watch import _checkpoint, _config

    from zoorank.store.layout import WRITERS
    from zoorank.store.writers import read_writers

    grace = 1.0
    monkeypatch.setenv("ZOORANK_GC_GRACE_SECONDS", str(grace))
    (tmp_path / "ckpts").mkdir()
    for i in range(2):
        _checkpoint(tmp_path / "ckpts" / f"run{i}.safetensors", i)
    raw = _config(str(tmp_path / "store"), str(tmp_path / "ckpts" / "*.safetensors"))
    (tmp_path / "run.yaml").write_text(yaml.safe_dump(raw))
    config = parse_config(raw)
    store = Store(raw["store"])
    # a writer killed long ago: its row protects nothing
    dead = {"writer_id": "dead", "host": "elsewhere", "pid": 1, "stage": "embed",
            "started": 0.0, "heartbeat": 0.0, "paths": '["cache/views/gone"]'}
    store.upsert_rows(WRITERS, [dead], ["writer_id"])
    env = {**os.environ, "ZOORANK_PROGRESS": "0", "RAY_ADDRESS": "",
           "ZOORANK_TEST_PAUSE_AFTER_CLEAR": "30"}
    proc = subprocess.Popen([sys.executable, "-m", "zoorank", "embed", str(tmp_path / "run.yaml")],
                            stdout=subprocess.PIPE, stderr=subprocess.STDOUT, text=True, env=env)
    try:
        deadline = time.monotonic() + 300
        while (store.read_manifest().get("status", pd.Series(dtype=str)) != "pending").all():
            assert proc.poll() is None and time.monotonic() < deadline, proc.stdout.read()
            time.sleep(0.1)
        time.sleep(2 * grace)  # the pause has begun: every file of the embed is older than grace
        caches = store.list_dirs("cache/views")
        pending = store.read_manifest()
        assert caches and set(pending["status"]) == {"pending"} and len(pending) == 2
        writers = read_writers(store)
        assert set(writers["pid"]) == {1, proc.pid}

        report = run_gc(config)
        assert store.list_dirs("cache/views") == caches
        assert store.read_manifest().equals(pending)
        assert not report.removed and report.manifest_rows == 0, report
        assert set(report.spared) >= {f"cache/views/{d}" for d in caches}
        assert report.dead_writers == 1
        assert set(read_writers(store)["writer_id"]) == set(writers["writer_id"]) - {"dead"}

        output, _ = proc.communicate(timeout=300)
    finally:
        if proc.poll() is None:
            proc.kill()
    assert proc.returncode == 0, output
    assert set(store.read_manifest()["status"]) == {"done"}
    assert read_writers(store).empty  # the embed's row went with it


def test_a_run_leaves_the_view_cache_directory_another_live_run_needs(tmp_path):
    """Two runs on one store each decode their own cache under ``cache/views/<dataset>``; the
    first to finish deletes only its own while the other is registered, and the last one deletes
    the dataset's directory (on an object store a directory delete takes everything under it)."""
    from zoorank.embed import viewcache
    from zoorank.store.writers import Heartbeat

    store = Store(tmp_path / "store")
    for key in ("run-a", "run-b"):
        store.write_parquet(f"cache/views/digits/{key}/part-0.parquet", pd.DataFrame({"x": [0]}))
    with Heartbeat(store, "embed", ["cache/views/digits"], interval=3600) as a:
        with Heartbeat(store, "embed", ["cache/views/digits"], interval=3600) as b:
            viewcache.drop(store, "digits", "run-b", b.writer_id)
            viewcache.drop(store, "digits", "run-a", a.writer_id)  # b is still live
            assert store.list_dirs("cache/views") == ["digits"]
            assert store.list_dirs("cache/views/digits") == []
        viewcache.drop(store, "digits", "run-a", a.writer_id)  # the last: a gone cache is no error
    assert store.list_dirs("cache/views") == []
