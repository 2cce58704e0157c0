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
