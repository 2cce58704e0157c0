"""The EMBED stage: decode each (dataset, geometry) group once, then run every model chunk on it,
all chunks at once, across the cluster.

Per group::

    Ray Data: read encoded images (workers) → decode once + every view → decoded-view cache
              (compact uint8 Parquet in the store, zoorank.embed.viewcache)
    Ray tasks: one or more per model chunk (num_gpus=1 on GPUs), on zoorank.run.runner (as many at
               once as there are GPUs or CPU workers); each loads its chunk once, streams the
               cache, runs every model on every batch ("one read, many models") and writes each
               entry as a few large part files (zoorank.embed.embedder). A task whose worker dies (OOM
               kill, segfault, lost node) is split: its models run again one per task, so only the
               culprit is recorded ``failed`` (``crashed: worker died ...``); the run goes on.

With C chunks and G GPUs, min(C, G) chunks run at once and the rest start as GPUs free up (no pool
start-up waits on another); with C < G a chunk is split into slices over the cache so every GPU
works, but never into slices of fewer than :data:`SLICE_MIN_ROWS` rows of its smallest entry, so an
entry stays a few files. Groups overlap: the next group decodes while the previous one embeds.

Manifest protocol (crash-safe): every entry to (re)compute is written ``pending`` (with its new
fingerprint) *before* its shards are cleared; it becomes ``done`` only after the driver has verified
the rows on disk (count, unique (sample_id, view_index), view_index 0..q-1 for every sample, the
expected samples), else ``failed`` with the reason and its shards removed. Readers use ``done`` rows
only. An entry is skipped when its row is ``done`` with the same fingerprint and its shards hold
exactly ``rows`` rows.

Fingerprint of an entry: :data:`EMBED_VERSION`, the model's fingerprint, its preprocessing, the
dataset's content digest and sample selection, the view recipe, the seed (augmented views), and
the precision the forward runs in. ``EMBED_VERSION`` is bumped whenever the stage's maths or
preprocessing change; a release that does not change them keeps a store valid.

Heads: a model whose classifier head is kept writes its logits beside its features (column
``logits``, manifest ``logit_dim``; :mod:`zoorank.store.shards`). A head whose outputs do not line
up with a dataset's classes where they must (:mod:`zoorank.zoo.label_space`) is a ConfigError naming
the dataset and the model: before anything runs when its width shows without a forward
(:func:`check_heads`), else its entries fail and the stage raises once everything else is saved.

Devices: ``embed.device: auto`` is ``cuda`` when the cluster has GPUs or its autoscaler config can
add some (:func:`zoorank.runtime.autoscaler_gpus`), else ``cpu``. With ``cuda`` and no GPU yet, the
driver asks the autoscaler for GPU workers and waits up to ``embed.gpu_wait_seconds``.
``embed.allow_cpu_torch`` (or ``ZOORANK_GPU_AS_CPU=1``) lets GPU-scheduled tasks run on CPU torch
(tests on fake GPU resources).

The stage is this module; the decode of each group into the view cache: :mod:`.decode_groups`; the
manifest rows of an entry (pending, verified): :mod:`.entry_rows`.
"""

from __future__ import annotations

import logging
import os
import time
from collections import defaultdict
from collections.abc import Iterable, Sequence
from concurrent.futures import ThreadPoolExecutor
from dataclasses import dataclass, field
from typing import Any

import numpy as np
import pandas as pd

from zoorank.catalog import Catalog, Entry, planned_precision, samples_path
from zoorank.catalog.context import RunContext
from zoorank.config import RunConfig
from zoorank.console.embed_progress import Display, print_summary, quiet_ray_data
from zoorank.data.views import check_views
from zoorank.embed import viewcache
from zoorank.embed.decode_groups import Caches, Groups, decode_groups, with_undecodable
from zoorank.embed.entry_rows import pending_row, verified_row
from zoorank.embed.plan import chunk_entries, slices_for
from zoorank.embed.resources import Resources, cluster_resources, wait_for_gpus
from zoorank.errors import ConfigError
from zoorank.store import MANIFEST, Store
from zoorank.store.layout import VIEW_CACHE_DIR
from zoorank.store.schema import MANIFEST_KEY
from zoorank.store.shards import parse_shards
from zoorank.store.writers import Heartbeat
from zoorank.zoo import Geometry, ResolvedModel
from zoorank.zoo.label_space import check_label_space, head_columns

log = logging.getLogger(__name__)

#: how a worker records a model's ConfigError (a label space that does not fit its head).
CONFIG_ERROR = "ConfigError: "
#: threads reading shards back (footers, id columns): small reads whose latency dominates on an
#: object store, so they go in parallel.
VERIFY_THREADS = 16

#: test hook: seconds to sleep after clearing the entries to recompute, before embedding them.
ENV_PAUSE_AFTER_CLEAR = "ZOORANK_TEST_PAUSE_AFTER_CLEAR"


# -- workers --------------------------------------------------------------------------------------
def factory_paths(models: Iterable[ResolvedModel]) -> list[str]:
    """``sys.path`` roots (on the driver) of the modules of python-factory models.

    A local Ray starts its workers with the driver's script directory and working directory only,
    so a factory importable here (e.g. from a directory added to ``sys.path``) is made importable in
    the actors by handing them these roots.
    """
    import importlib.util

    roots: list[str] = []
    for m in models:
        if m.spec.source != "python":
            continue
        top = m.spec.name.partition(":")[0].split(".")[0]
        try:
            found = importlib.util.find_spec(top)
        except (ImportError, ValueError):
            continue
        if found is None or not found.origin or found.origin in ("built-in", "frozen"):
            continue
        root = os.path.dirname(found.origin)
        if found.submodule_search_locations is not None:  # a package: its parent directory
            root = os.path.dirname(root)
        if root not in roots:
            roots.append(root)
    return roots


def _shard_rows(store: Store, entry_key: tuple[str, str, str], shards: list[str]) -> int:
    """Rows held by the shards a manifest row references (Parquet footers only)."""
    import pyarrow.parquet as pq

    base = Store.embedding_dir(*entry_key)
    return sum(
        pq.read_metadata(store.path(f"{base}/{name}"), filesystem=store.fs).num_rows
        for name in shards
    )


def complete_entries(
    store: Store, entries: Sequence[Entry], manifest: pd.DataFrame
) -> set[tuple[str, str, str]]:
    """Entries done with the same fingerprint whose shards hold exactly the manifest's rows."""
    previous = {(r["dataset"], r["view"], r["model_id"]): r for r in manifest.to_dict("records")}
    candidates = []
    for e in entries:
        row = previous.get(e.key)
        if (row is not None and row.get("status") == "done"
                and row.get("fingerprint") == e.fingerprint and not pd.isna(row.get("rows"))):
            shards = parse_shards(row.get("shards"))
            if shards is None:  # a row from before manifests listed shards: every file there
                shards = store.list_files(Store.embedding_dir(*e.key), suffix=".parquet")
            candidates.append((e.key, int(row["rows"]), shards))

    def check(item: tuple[tuple[str, str, str], int, list[str]]) -> bool:
        try:
            return _shard_rows(store, item[0], item[2]) == item[1]
        except (OSError, ValueError):  # missing, truncated or corrupt (ArrowInvalid): re-embed
            return False

    # footers are small reads; on object stores their latency dominates, so read them in parallel
    with ThreadPoolExecutor(max_workers=VERIFY_THREADS) as pool:
        flags = list(pool.map(check, candidates))
    return {key for (key, _, _), ok in zip(candidates, flags) if ok}


def check_heads(entries: Sequence[Entry]) -> None:
    """Before anything runs: a ``label_map`` that cannot fit any head, and, for models that ask
    for their head (``head: true``) or map it, a head that does not fit where its number of classes
    is known without building the model (:func:`zoorank.zoo.inspect.head_classes`: reads its
    checkpoint or config once). What only a forward tells is checked where the model runs."""
    classes: dict[str, int | None] = {}
    for e in entries:
        space = e.label_space
        if space is None:
            continue
        check_label_space(space, e.model.model_id)
        if not space.required and space.mapping is None or e.model.unreadable:
            continue
        if e.model.model_id not in classes:
            from zoorank.zoo.inspect import head_classes

            try:
                classes[e.model.model_id] = head_classes(e.model)[1]
            except Exception as err:  # noqa: BLE001 - the worker reports it with the model
                log.debug("head of %s not known before embedding: %s", e.model.model_id, err)
                classes[e.model.model_id] = None
        outputs = classes[e.model.model_id]
        if outputs:
            head_columns(space, outputs, e.model.model_id)


def label_space_errors(rows: pd.DataFrame) -> None:
    """Raise ConfigError (exit 2) naming each failed entry whose head's label space does not fit
    its dataset (recorded by the worker as ``ConfigError: dataset ..., model ...: ...``); the
    entries done meanwhile are already saved."""
    if rows.empty or "error" not in rows:
        return
    errors = rows["error"].dropna().astype(str)
    found = sorted({e.removeprefix(CONFIG_ERROR) for e in errors if e.startswith(CONFIG_ERROR)})
    if found:
        raise ConfigError("; ".join(found))


# -- the driver ------------------------------------------------------------------------------------
@dataclass
class _Chunk:
    """One model chunk of a group in flight: its entries, its number of slice tasks, their reports."""

    group: tuple[str, Geometry]
    index: int
    entries: list[Entry]
    slices: int
    submitted: float
    reports: list[dict[str, Any]] = field(default_factory=list)


def _embed_chunks(
    store: Store, config: RunConfig, groups: Groups, caches: Caches, res: Resources,
    display: Display, writer_id: str, on_wait=None,
) -> Iterable[tuple[list[dict[str, Any]], dict[str, Any]]]:
    """Run every chunk's slice tasks on :func:`zoorank.run.runner.run_tasks`; yield (manifest rows,
    stats) per chunk as it finishes, after verifying its entries on disk. A group's view cache goes
    with its last chunk. ``on_wait``: the runner's, while it waits for results.

    A slice whose worker died is split into one task per model over the same cache parts, so only
    the model that killed it is recorded (``crashed: worker died ...``); a slice that raised records
    its models as failed with the reason.
    """
    import contextlib

    from zoorank.embed.embedder import embed_slice
    from zoorank.run.runner import Task, crash_reason, run_tasks

    chunks: list[_Chunk] = []
    left: dict[tuple[str, Geometry], int] = {}
    plan = []  # (group, chunk index, entries, models, wanted, slices of the cache parts)
    # the dataset's label space per model whose head is looked for (one dataset per group)
    spaces = {gkey: {e.model.model_id: e.label_space for e in entries if e.label_space is not None}
              for gkey, entries in groups.items()}
    for gkey, entries in groups.items():
        parts = caches[gkey][1]["parts"]
        chunked = chunk_entries(entries, config.embed)
        left[gkey] = len(chunked)
        for ci, centries in enumerate(chunked):
            models = list({e.model.model_id: e.model for e in centries}.values())
            wanted: dict[str, list[str]] = defaultdict(list)
            for e in centries:
                wanted[e.model.model_id].append(e.view.name)
            smallest = min(e.expected_rows for e in centries)
            n = slices_for(len(chunked), res.num_workers, smallest, len(parts))
            bounds = np.linspace(0, len(parts), n + 1).astype(int)
            plan.append((gkey, ci, centries, models, dict(wanted),
                         [parts[a:b] for a, b in zip(bounds[:-1], bounds[1:])]))
    threads = res.num_threads
    if res.num_gpus == 0:  # CPU: the tasks that run at once share the cores
        tasks_total = sum(len(p[-1]) for p in plan)
        threads = max(1, int(res.total_cpus // max(1, min(res.num_workers, tasks_total))))

    def slice_task(chunk: int, gkey: tuple[str, Geometry], part_names: list[str], si: int,
                   models: list[ResolvedModel], wanted: dict[str, list[str]]) -> Task:
        ckey = caches[gkey][0]
        args = (store.uri, gkey[0], viewcache.cache_dir(gkey[0], ckey), part_names, models,
                wanted, si)
        kwargs = dict(device=res.device, precision=res.precision, num_threads=threads,
                      batch_size=config.embed.batch_size,
                      label_spaces={m.model_id: spaces[gkey][m.model_id] for m in models
                                    if m.model_id in spaces[gkey]},
                      allow_cpu_torch=res.allow_cpu_torch, import_paths=factory_paths(models))
        split = None
        if len(models) > 1:  # a dead worker: the chunk's models again, one per task
            def split() -> list[Task]:
                return [slice_task(chunk, gkey, part_names, si, [m],
                                   {m.model_id: wanted[m.model_id]}) for m in models]
        return Task((chunk, si), args, kwargs, split=split)

    tasks = []
    for gkey, ci, centries, models, wanted, slices in plan:
        chunks.append(_Chunk(gkey, ci, centries, len(slices), time.time()))
        tasks += [slice_task(len(chunks) - 1, gkey, part_names, si, models, wanted)
                  for si, part_names in enumerate(slices)]
    finished = [0] * len(chunks)
    # the images bar: each chunk's tasks read its group's decoded view rows once between them
    planned = [caches[c.group][1]["rows"] for c in chunks]
    counted = [0] * len(chunks)
    display.pipeline("images", sum(planned))
    results = run_tasks(embed_slice, tasks, max_in_flight=res.num_workers, reruns=1,
                        options={"num_cpus": res.num_cpus, "num_gpus": res.num_gpus},
                        on_wait=on_wait)
    with contextlib.closing(results):
        for outcome in results:
            chunk_index = outcome.task.key[0]
            chunk = chunks[chunk_index]
            for leaf in outcome.leaves():
                report = leaf.value if leaf.ok else _lost_report(leaf.task, crash_reason(leaf))
                chunk.reports.append(report)
                # a dead worker's models re-read the same parts one task each: count each row once
                step = min(report["images"], planned[chunk_index] - counted[chunk_index])
                counted[chunk_index] += step
                display.advance_images(step)
            finished[chunk_index] += 1
            if finished[chunk_index] < chunk.slices:
                continue
            # rows never embedded (undecodable, or a task that failed) are settled: the bar ends
            # at its total
            display.advance_images(planned[chunk_index] - counted[chunk_index])
            bad = caches[chunk.group][1]["bad"]
            work = [(store, e, [r for rep in chunk.reports for r in rep["records"]
                                if (r["view"], r["model_id"]) == (e.view.name, e.model.model_id)],
                     set(bad.get(e.view.name, ()))) for e in chunk.entries]
            # reading shards back is latency on an object store: the chunk's entries in parallel
            with ThreadPoolExecutor(max_workers=VERIFY_THREADS) as pool:
                rows = list(pool.map(lambda args: verified_row(*args), work))
            yield rows, _chunk_stats(chunk, res)
            left[chunk.group] -= 1
            if left[chunk.group] == 0:
                viewcache.drop(store, chunk.group[0], caches[chunk.group][0], writer_id)


def _lost_report(task: Any, error: str) -> dict[str, Any]:
    """The report of a slice task that raised or whose worker died: every entry it held failed."""
    now = time.time()
    wanted: dict[str, list[str]] = task.args[5]
    return {"records": [{"view": v, "model_id": m, "rows": 0, "dim": -1, "seconds": 0.0,
                         "error": error} for m, views in wanted.items() for v in views],
            "images": 0, "load_seconds": 0.0, "called": now, "done": now, "node_id": ""}


def _chunk_stats(chunk: _Chunk, res: Resources) -> dict[str, Any]:
    reps = chunk.reports
    first_call = min(r["called"] for r in reps)
    last_done = max(r["done"] for r in reps)
    images = sum(r["images"] for r in reps)
    steady = max(0.0, last_done - first_call)
    return {
        "dataset": chunk.group[0],
        "geometry": chunk.group[1],
        "chunk": chunk.index,
        "models": len({e.model.model_id for e in chunk.entries}),
        "actors": chunk.slices,
        "images": images,
        "seconds": last_done - chunk.submitted,
        # until a task starts its first batch: scheduling, worker start-up and the model loads
        "startup_seconds": max(0.0, first_call - chunk.submitted),
        "model_load_seconds": max(r["load_seconds"] for r in reps),
        "steady_seconds": steady,
        "steady_images_per_second": images / steady if steady > 0 else None,
        # wall-clock times: when the chunk's tasks were submitted, first ran, last finished
        "submitted": chunk.submitted,
        "first_call": first_call,
        "last_done": last_done,
        #: the Ray nodes the chunk's tasks ran on (multi-node tests check the GPU workers)
        "nodes": sorted({r.get("node_id", "") for r in reps}),
    }


def run_embed(config: RunConfig, address: str | None = None, catalog: Catalog | None = None,
              context: RunContext | None = None) -> pd.DataFrame:
    """Embed every (dataset, view, model) of ``config`` into the store; returns their manifest rows.

    Entries already done with the same fingerprint and complete shards are skipped. Failed models
    are recorded (status ``failed`` with the reason) and the run returns normally. The live
    progress and the summary table go to the terminal (``ZOORANK_PROGRESS=0`` turns them off);
    ``result.attrs["pipelines"]`` holds each chunk's timings (start-up, steady-state images/s),
    ``result.attrs["driver_peak_rss_bytes"]`` this process's peak resident memory.
    """
    check_views(config.views)
    context = RunContext.of(config if context is None else context, catalog, address)
    store, catalog = context.store, context.catalog
    models, indexes = catalog.models, catalog.indexes
    if catalog.digests is not None:
        catalog.digests.save()
    precision = planned_precision(config.embed)
    res = None
    if precision is None:  # `auto` on both: the cluster decides the device, hence the precision
        context.ensure_ray()
        res = cluster_resources(config.embed)
        precision = res.precision
    entries = catalog.plan_entries(precision)
    check_heads(entries)

    manifest = store.read_manifest()
    previous = {(r["dataset"], r["view"], r["model_id"]): r for r in manifest.to_dict("records")}
    skipped = complete_entries(store, entries, manifest)
    todo = [e for e in entries if e.key not in skipped]
    # a checkpoint the store cannot read right now (zoorank.zoo.resolve): failed with the reason,
    # no work; every other model goes on, and the next run tries it again
    unreadable = [{**pending_row(e), "status": "failed", "error": e.model.unreadable}
                  for e in todo if e.model.unreadable]
    todo = [e for e in todo if not e.model.unreadable]
    for name in catalog.stale_samples(store):
        store.replace_table(samples_path(name), catalog.samples_frame(name))

    results: dict[tuple[str, str, str], dict[str, Any]] = {
        k: {**previous[k], "status": "done"} for k in skipped
    }
    if unreadable:
        store.update_manifest(unreadable)
        results.update({(r["dataset"], r["view"], r["model_id"]): r for r in unreadable})
    show = os.environ.get("ZOORANK_PROGRESS", "1") != "0"
    pipelines: list[dict[str, Any]] = []
    progress: dict[str, tuple[int, int]] = {}
    if todo:
        from zoorank.runtime import quiet_ray_logging, release_gpu_request

        context.ensure_ray()
        quiet_ray_data()
        quiet_ray_logging()  # Ray Data's own notes ("Progress bars disabled") only with --debug
        res = res or cluster_resources(config.embed)
        # registered as a live writer: gc spares these shard directories and view caches
        needs = [Store.embedding_dir(*e.key) for e in todo] + sorted(
            {f"{VIEW_CACHE_DIR}/{e.key[0]}" for e in todo})
        try:
            with Heartbeat(store, "embed", needs) as writer, \
                    Display(len(entries), enabled=show) as display:
                display.entries_done(len(skipped) + len(unreadable))
                groups, caches, unread = decode_groups(store, config, indexes, todo,
                                                       writer.writer_id)
                before = dict(indexes)
                todo, groups = with_undecodable(store, config, models, indexes, todo, groups,
                                                 precision)
                if any(indexes[k] is not before[k] for k in indexes):
                    catalog.reindexed(indexes)  # the stages after EMBED expect the new set
                # pending (new fingerprint) first; shards are immutable and uniquely named, and
                # one manifest commit per chunk swaps each entry's reference to its new files
                store.update_manifest([pending_row(e, previous.get(e.key)) for e in todo])
                if unread:  # unreadable samples: these entries fail with the reason
                    store.update_manifest(unread)
                    results.update({(r["dataset"], r["view"], r["model_id"]): r for r in unread})
                    display.entries_done(len(unread))
                if os.environ.get(ENV_PAUSE_AFTER_CLEAR):
                    time.sleep(float(os.environ[ENV_PAUSE_AFTER_CLEAR]))
                if res.num_gpus > 0:
                    wait_for_gpus(res, config.embed)
                # done rows are committed per K models or T seconds, also while the next chunk
                # runs (zoorank.store.batching)
                with store.batched(MANIFEST, MANIFEST_KEY, write=lambda frame: (
                        store.update_manifest(frame.to_dict("records")))) as done_rows:
                    for rows, stats in _embed_chunks(store, config, groups, caches, res,
                                                     display, writer.writer_id,
                                                     on_wait=done_rows.flush_due):
                        for r in rows:
                            results[(r["dataset"], r["view"], r["model_id"])] = r
                        done_rows.add(rows, tasks=len({r["model_id"] for r in rows}))
                        display.entries_done(len(rows))
                        pipelines.append(stats)
                        log.info("embed chunk %s", stats)
                progress = display.state()
        finally:
            if res.num_gpus > 0:
                release_gpu_request()
        store.compact_table(MANIFEST)  # few files and a checkpointed log for every reader
    out = pd.DataFrame([results[e.key] for e in entries if e.key in results])
    label_space_errors(out)
    from zoorank.zoo import describe_preprocessing

    print_summary(out, skipped, enabled=show,
                  preprocessing={m.model_id: describe_preprocessing(m) for m in models},
                  where=f"{store.name}/{MANIFEST}")
    out = out.reset_index(drop=True)
    #: timings of each chunk (start-up, steady-state images/s) for benchmarks and logs.
    out.attrs["pipelines"] = pipelines
    #: each progress bar's (completed, total) at the end: entries, images read.
    out.attrs["progress"] = progress
    from zoorank.runtime import peak_rss_bytes

    #: the driver's peak RSS so far (the process's lifetime peak: measure in a fresh process).
    out.attrs["driver_peak_rss_bytes"] = peak_rss_bytes()
    return out


