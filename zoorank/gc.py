"""``zoorank gc CONFIG``: delete what the store has and the config's catalog does not.

Removed (each counted, with the bytes freed):

* rows of the ``metrics`` table that are not fresh for the config (metrics no longer configured,
  models or datasets no longer in it, other settings or implementation versions:
  :mod:`zoorank.catalog`);
* rows of the ``oracle`` table whose fingerprint is not the catalog's (models or datasets no longer
  in the config, other labels, oracle settings or embeddings);
* manifest rows of entries the config does not have, or whose embeddings are stale or pending,
  with their shards;
* shard directories no manifest row points at (orphans of an interrupted or older run), and
  shard files a kept entry's manifest row does not list (earlier or concurrent attempts);
* reliability tables that are not fresh (seed ensembles that no longer exist, an ensemble metric
  no longer configured or computed under other settings);
* rows of the ``pools`` table (a pool metric's members, stored once) that no kept metric row names
  by its ``pool_id``;
* sample and label tables of datasets no longer in the config;
* decoded-view caches (``cache/views/``) an interrupted embed left behind;
* data files of the Delta tables that no version at or after the grace period references any more
  (the files a MERGE, replace or delete superseded; Delta's ``VACUUM``), after the row deletions
  above.

What a live writer needs stays (:mod:`zoorank.store.writers`: a running embed registers its shard
directories and view caches with a heartbeat): its pending manifest rows, shard directories and
view caches, however old their files; dead writers' rows (heartbeat older than
:data:`zoorank.store.writers.STALE_SECONDS`) are deleted. Files written less than
:data:`GC_GRACE_SECONDS` ago stay too (a writer that has not registered yet, table data files of a
commit in flight). Table rows are deleted by key and fingerprint in one commit each, so a row
another writer refreshed meanwhile stays.

While a checkpoint of the config cannot be read (:attr:`zoorank.zoo.ResolvedModel.unreadable`)
gc deletes nothing and raises InputError (exit 2): that model's fresh rows cannot be told apart.

``--dry-run`` reports the same without deleting anything. Everything fresh stays, so a rerun after
gc skips exactly what it skipped before.
"""

from __future__ import annotations

import json
import os
from dataclasses import dataclass, field
from typing import Any

import numpy as np
import pyarrow.fs as pafs

from zoorank.catalog import Catalog, build_catalog, reliability_path, samples_path, select_fresh
from zoorank.catalog.context import RunContext
from zoorank.config import RunConfig
from zoorank.errors import InputError
from zoorank.store import MANIFEST, METRICS, Store
from zoorank.store.layout import (
    DATASETS_DIR,
    EMBEDDINGS_DIR,
    ORACLE,
    POOLS,
    RELIABILITY_DIR,
    REPORT_DIR,
    VIEW_CACHE_DIR,
    WRITERS,
    reliability_dir,
)
from zoorank.store.schema import MANIFEST_KEY, METRICS_KEY
from zoorank.store.shards import parse_shards
from zoorank.store.writers import KEY as WRITER_KEY
from zoorank.store.writers import live_paths, protected, read_writers, split_live

#: files younger than this are never removed: another process may be writing them right now
#: before it registered as a writer, or a table commit be in flight;
#: ``ZOORANK_GC_GRACE_SECONDS`` overrides.
GC_GRACE_SECONDS = 900.0


@dataclass
class GcReport:
    metric_rows: int = 0
    oracle_rows: int = 0
    manifest_rows: int = 0
    shard_dirs: int = 0
    shard_files: int = 0
    reliability_tables: int = 0
    pool_rows: int = 0
    sample_tables: int = 0
    view_caches: int = 0
    table_files: int = 0
    #: writers whose heartbeat stopped (their rows are deleted)
    dead_writers: int = 0
    #: store-relative paths spared because a live writer needs them
    spared: list[str] = field(default_factory=list)
    bytes_freed: int = 0
    removed: list[str] = field(default_factory=list)
    #: the table data files vacuumed (or that would be), store-relative
    vacuumed: list[str] = field(default_factory=list)

    def summary(self) -> str:
        return (f"{self.metric_rows} metric row(s), {self.oracle_rows} oracle row(s), "
                f"{self.manifest_rows} manifest row(s), {self.shard_dirs} embedding "
                f"director(y/ies), {self.shard_files} unreferenced shard(s), "
                f"{self.reliability_tables} reliability table(s), "
                f"{self.pool_rows} pool row(s), "
                f"{self.sample_tables} sample table(s), "
                f"{self.view_caches} decoded-view cache(s), "
                f"{self.table_files} unreferenced table file(s), "
                f"{self.dead_writers} dead writer(s); "
                f"{self.bytes_freed / 1e6:.2f} MB")


def _tree_bytes(store: Store, relpath: str) -> int:
    base = store.path(relpath)
    info = store.fs.get_file_info(base)
    if info.type == pafs.FileType.File:
        return int(info.size or 0)
    if info.type == pafs.FileType.NotFound:
        return 0
    infos = store.fs.get_file_info(pafs.FileSelector(base, recursive=True))
    return sum(int(i.size or 0) for i in infos if i.type == pafs.FileType.File)


def run_gc(context: RunContext | RunConfig, dry_run: bool = False, models: Any = None,
           catalog: Catalog | None = None) -> GcReport:
    """Delete what ``config``'s store has and its catalog does not; returns what was (or would be)
    removed."""
    from rich.console import Console

    grace = float(os.environ.get("ZOORANK_GC_GRACE_SECONDS", GC_GRACE_SECONDS))
    context = RunContext.of(context, catalog)
    config = context.config
    if catalog is None and models is not None:  # the models given, not the config's zoo
        catalog = build_catalog(config, models, store=context.store)
    catalog = context.catalog if catalog is None else catalog
    unreadable = [m for m in catalog.models if getattr(m, "unreadable", None)]
    if unreadable:  # its entries' fingerprints are unknown: what is fresh cannot be told
        raise InputError(
            f"gc deletes nothing while a checkpoint cannot be read ({len(unreadable)}): "
            f"{unreadable[0].model_id}: {unreadable[0].unreadable}; rerun when it can be read")
    store = context.store
    report = GcReport()
    live, dead = split_live(read_writers(store))
    needed = live_paths(live)

    def spared(relpath: str) -> bool:
        if protected(relpath, needed):
            report.spared.append(relpath)
            return True
        return store.modified_within(relpath, grace)

    raw_manifest = store.read_manifest()
    manifest = catalog.fresh_manifest(raw_manifest)
    raw_metrics = store.read_metrics()
    fresh_rel = catalog.fresh_reliability(manifest, raw_metrics)
    oracle_expected = catalog.oracle_fingerprints(manifest, raw_metrics)

    # metrics: keep the fresh rows only, deleted by key and fingerprint (a row another writer
    # just refreshed stays)
    if not raw_metrics.empty:
        fresh = select_fresh(raw_metrics, catalog.metric_fingerprints(manifest))
        report.metric_rows = len(raw_metrics) - len(fresh)
        if report.metric_rows and not dry_run:
            key = [*METRICS_KEY, "fingerprint"]
            gone = raw_metrics.merge(fresh[key].drop_duplicates(), on=key, how="left",
                                     indicator=True)
            store.delete_rows(METRICS, gone[gone["_merge"] == "left_only"], key)

    # pools that no kept metric row names (its pool metric dropped, or recomputed over another pool)
    pools = store.read_frame(POOLS)
    if not pools.empty:
        kept_rows = fresh if not raw_metrics.empty else raw_metrics
        named = {json.loads(p).get("pool_id") for p in kept_rows.get("params", [])
                 if isinstance(p, str) and "pool_id" in p}
        unnamed = pools[~pools["pool_id"].isin(named)]
        report.pool_rows = len(unnamed)
        if len(unnamed) and not dry_run:
            store.delete_rows(POOLS, unnamed, ["pool_id"])

    # oracle and few-label rows: keep the rows with the catalog's fingerprint
    oracle = store.read_frame(ORACLE)
    if not oracle.empty:
        keep = np.array([oracle_expected.get((m, d), (None,))[0] == fp for m, d, fp in
                         zip(oracle["model_id"], oracle["dataset"], oracle["fingerprint"])], bool)
        report.oracle_rows = int((~keep).sum())
        if report.oracle_rows and not dry_run:
            store.delete_rows(ORACLE, oracle[~keep], ["model_id", "dataset", "fingerprint"])

    # manifest rows the config does not describe (absent, stale, pending) and their shards
    kept = manifest[manifest["status"].isin(["done", "failed"])] if not manifest.empty else manifest
    keep_keys = set(zip(kept["dataset"], kept["view"], kept["model_id"])) if len(kept) else set()
    keep_keys |= {k for k in zip(raw_manifest["dataset"], raw_manifest["view"],
                                 raw_manifest["model_id"])
                  if protected(Store.embedding_dir(*k), needed)}  # a live writer's pending rows
    keep_rows = [k in keep_keys for k in zip(raw_manifest["dataset"], raw_manifest["view"],
                                            raw_manifest["model_id"])]
    report.manifest_rows = keep_rows.count(False)
    on_disk = {(d, v, m) for d in store.list_dirs(EMBEDDINGS_DIR)
               for v in store.list_dirs(EMBEDDINGS_DIR, d)
               for m in store.list_dirs(EMBEDDINGS_DIR, d, v)}
    for key in sorted(on_disk - keep_keys):
        rel = Store.embedding_dir(*key)
        if spared(rel):
            continue
        report.shard_dirs += 1
        _remove(store, rel, report, dry_run)
    # shards of kept entries that their manifest row does not reference (earlier attempts)
    for row in kept.itertuples(index=False):
        key = (row.dataset, row.view, row.model_id)
        if key not in on_disk or parse_shards(row.shards) is None:
            continue
        referenced = set(parse_shards(row.shards))
        for name in store.list_files(Store.embedding_dir(*key), suffix=".parquet"):
            rel = f"{Store.embedding_dir(*key)}/{name}"
            if name not in referenced and not spared(rel):
                report.shard_files += 1
                _remove(store, rel, report, dry_run)
    if report.manifest_rows and not dry_run:
        gone = [not k for k in keep_rows]
        store.delete_rows(MANIFEST, raw_manifest[gone], [*MANIFEST_KEY, "fingerprint"])

    # reliability tables that are not fresh (ensembles gone, ensemble metric dropped, settings)
    for dataset in store.list_dirs(RELIABILITY_DIR):
        for file in store.list_files(reliability_dir(dataset), suffix=".parquet"):
            group = file.removesuffix(".parquet")
            if (dataset, group) not in fresh_rel:
                report.reliability_tables += 1
                _remove(store, reliability_path(dataset, group), report, dry_run)

    # sample and label tables of datasets the config no longer has
    for dataset in store.list_dirs(DATASETS_DIR):
        if dataset not in catalog.indexes and store.table_exists(samples_path(dataset)):
            report.sample_tables += 1
            _remove(store, samples_path(dataset), report, dry_run)

    # decoded-view caches left by an interrupted embed (a finished group deletes its own)
    for name in store.list_dirs(VIEW_CACHE_DIR):
        rel = f"{VIEW_CACHE_DIR}/{name}"
        if spared(rel):
            continue
        report.view_caches += 1
        _remove(store, rel, report, dry_run)

    # table data files the tables no longer reference (superseded by the commits above or earlier)
    for name in _delta_tables(store):
        # the log keeps listing a vacuumed file until a checkpoint drops it: count what is there
        listed = store.vacuum_table(name, grace, dry_run=True)
        infos = store.fs.get_file_info([store.path(f) for f in listed]) if listed else []
        present = [(f, int(i.size or 0)) for f, i in zip(listed, infos)
                   if i.type == pafs.FileType.File]
        if present and not dry_run:
            store.vacuum_table(name, grace)
        report.table_files += len(present)
        report.bytes_freed += sum(size for _, size in present)
        report.vacuumed += [f for f, _ in present]

    report.dead_writers = len(dead)
    if len(dead) and not dry_run:
        store.delete_rows(WRITERS, dead, list(WRITER_KEY))

    verb = "would free" if dry_run else "freed"
    Console().print(f"gc {store.name}: {verb} {report.summary()}")
    return report


def _remove(store: Store, relpath: str, report: GcReport, dry_run: bool) -> None:
    report.bytes_freed += _tree_bytes(store, relpath)
    report.removed.append(relpath)
    if not dry_run:
        store.delete(relpath)


#: store folders that hold no Delta table (shards, plain Parquet, files for people, caches).
_NOT_TABLES = (EMBEDDINGS_DIR, RELIABILITY_DIR, REPORT_DIR, VIEW_CACHE_DIR)


def _delta_tables(store: Store, prefix: str = "", depth: int = 3) -> list[str]:
    """Every Delta table of the store (a folder holding ``_delta_log``), store-relative."""
    out = []
    for name in store.list_dirs(prefix) if prefix else store.list_dirs():
        rel = f"{prefix}/{name}" if prefix else name
        if name.startswith("_") or rel in _NOT_TABLES:
            continue
        if store.exists(rel, "_delta_log"):
            out.append(rel)
        elif depth > 1:
            out += _delta_tables(store, rel, depth - 1)
    return out
