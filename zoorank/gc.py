"""``zoorank gc CONFIG``: delete what the current config no longer describes.

Removed (each counted, with the bytes freed):

* rows of the ``metrics`` table that are not fresh for the config (metrics no longer configured,
  models or datasets no longer in it, other settings or implementation versions:
  :mod:`zoorank.freshness`);
* rows of the ``oracle`` table of models or datasets no longer in the config;
* manifest rows of entries the config does not have, or whose embeddings are stale or pending,
  with their shards;
* shard directories no manifest row points at (orphans of an interrupted or older run), and
  shard files a kept entry's manifest row does not list (earlier or concurrent attempts);
* reliability tables of seed ensembles that no longer exist;
* decoded-view caches (``cache/views/``) an interrupted embed left behind.

Files written less than :data:`GC_GRACE_SECONDS` ago stay: without a lease another process may be
writing them right now. Table rows are deleted by key and fingerprint in one commit each, so a row
another writer refreshed meanwhile stays.

``--dry-run`` reports the same without deleting anything. Everything fresh stays, so a rerun after
gc skips exactly what it skipped before.
"""

from __future__ import annotations

from dataclasses import dataclass, field
from typing import Any

import pandas as pd
import pyarrow.fs as pafs

from zoorank.config import RunConfig
from zoorank.freshness import expected_metric_fingerprints, fresh_manifest, select_fresh
from zoorank.store import MANIFEST, MANIFEST_KEY, METRICS, METRICS_KEY, Store, parse_shards
from zoorank.store.layout import (
    EMBEDDINGS_DIR,
    ORACLE,
    RELIABILITY_DIR,
    VIEW_CACHE_DIR,
    reliability_dir,
)


@dataclass
class GcReport:
    metric_rows: int = 0
    oracle_rows: int = 0
    manifest_rows: int = 0
    shard_dirs: int = 0
    shard_files: int = 0
    reliability_tables: int = 0
    view_caches: int = 0
    bytes_freed: int = 0
    removed: list[str] = field(default_factory=list)

    def summary(self) -> str:
        return (f"{self.metric_rows} metric row(s), {self.oracle_rows} oracle row(s), "
                f"{self.manifest_rows} manifest row(s), {self.shard_dirs} embedding "
                f"director(y/ies), {self.shard_files} unreferenced shard(s), "
                f"{self.reliability_tables} reliability table(s), "
                f"{self.view_caches} decoded-view cache(s); "
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


#: files younger than this are never removed: without a lease, another process may be writing
#: them right now (an embed's new shards or view cache); ``ZOORANK_GC_GRACE_SECONDS`` overrides.
GC_GRACE_SECONDS = 900.0


def run_gc(config: RunConfig, dry_run: bool = False, models: Any = None) -> GcReport:
    """Delete stale rows and orphaned files of ``config``'s store; returns what was (or would be)
    removed."""
    import os

    from rich.console import Console

    grace = float(os.environ.get("ZOORANK_GC_GRACE_SECONDS", GC_GRACE_SECONDS))

    from zoorank.score import plan_score, reliability_path

    if models is None:
        from zoorank.zoo import resolve_models

        models = resolve_models(config)
    store = Store(config.store)
    report = GcReport()
    raw_manifest = store.read_manifest()
    manifest = fresh_manifest(config, store, models, raw_manifest)

    # metrics: keep the fresh rows only
    metrics = store.read_metrics()
    if not metrics.empty:
        fresh = select_fresh(metrics, expected_metric_fingerprints(config, models, manifest))
        report.metric_rows = len(metrics) - len(fresh)
        if report.metric_rows and not dry_run:
            # by key and fingerprint: a row another writer just refreshed stays
            key = [*METRICS_KEY, "fingerprint"]
            gone = metrics.merge(fresh[key].drop_duplicates(), on=key, how="left", indicator=True)
            store.delete_rows(METRICS, gone[gone["_merge"] == "left_only"], key)

    # oracle: rows of models or datasets the config has
    model_ids = {m.model_id for m in models}
    datasets = {d.name for d in config.datasets}
    oracle = store.read_frame(ORACLE)
    if not oracle.empty:
        keep = oracle["model_id"].isin(model_ids) & oracle["dataset"].isin(datasets)
        report.oracle_rows = int((~keep).sum())
        if report.oracle_rows and not dry_run:
            store.delete_rows(ORACLE, oracle[~keep.to_numpy()], ["model_id", "dataset"])

    # manifest rows the config does not describe (absent, stale, pending) and their shards
    kept = manifest[manifest["status"].isin(["done", "failed"])]
    keep_keys = set(zip(kept["dataset"], kept["view"], kept["model_id"]))
    keep_rows = [k in keep_keys for k in zip(raw_manifest["dataset"], raw_manifest["view"],
                                            raw_manifest["model_id"])]
    report.manifest_rows = keep_rows.count(False)
    on_disk = {(d, v, m) for d in store.list_dirs(EMBEDDINGS_DIR)
               for v in store.list_dirs(EMBEDDINGS_DIR, d)
               for m in store.list_dirs(EMBEDDINGS_DIR, d, v)}
    for key in sorted(on_disk - keep_keys):
        rel = Store.embedding_dir(*key)
        if store.modified_within(rel, grace):
            continue
        report.shard_dirs += 1
        report.bytes_freed += _tree_bytes(store, rel)
        report.removed.append(rel)
        if not dry_run:
            store.delete(rel)
    # shards of kept entries that their manifest row does not reference (earlier attempts)
    for row in kept.itertuples(index=False):
        key = (row.dataset, row.view, row.model_id)
        if key not in on_disk or parse_shards(row.shards) is None:
            continue
        referenced = set(parse_shards(row.shards))
        for name in store.list_files(Store.embedding_dir(*key), suffix=".parquet"):
            rel = f"{Store.embedding_dir(*key)}/{name}"
            if name not in referenced and not store.modified_within(rel, grace):
                report.shard_files += 1
                report.bytes_freed += _tree_bytes(store, rel)
                report.removed.append(rel)
                if not dry_run:
                    store.delete(rel)
    if report.manifest_rows and not dry_run:
        gone = [not k for k in keep_rows]
        store.delete_rows(MANIFEST, raw_manifest[gone], [*MANIFEST_KEY, "fingerprint"])

    # reliability tables of ensembles that no longer exist
    plan = plan_score(config, list(models), manifest, pd.DataFrame(columns=["model_id"]))
    groups = {(d, g) for d, gs in plan.ensembles.items() for g in gs}
    for dataset in store.list_dirs(RELIABILITY_DIR):
        for file in store.list_files(reliability_dir(dataset), suffix=".parquet"):
            group = file.removesuffix(".parquet")
            if (dataset, group) in groups:
                continue
            rel = reliability_path(dataset, group)
            report.reliability_tables += 1
            report.bytes_freed += _tree_bytes(store, rel)
            report.removed.append(rel)
            if not dry_run:
                store.delete(rel)

    # decoded-view caches left by an interrupted embed (a finished group deletes its own)
    for name in store.list_dirs(VIEW_CACHE_DIR):
        rel = f"{VIEW_CACHE_DIR}/{name}"
        if store.modified_within(rel, grace):
            continue
        report.view_caches += 1
        report.bytes_freed += _tree_bytes(store, rel)
        report.removed.append(rel)
        if not dry_run:
            store.delete(rel)

    verb = "would free" if dry_run else "freed"
    Console().print(f"gc {store.name}: {verb} {report.summary()}")
    return report
