"""Running EMBED's model chunks as Ray tasks (:func:`embed_chunks`): each group's chunks, sliced
over its decoded-view cache, on :func:`zoorank.tasks.runner.run_tasks`; a dead worker's slice split
into one task per model; each finished chunk's entries verified on disk (their manifest rows) with
its timings. The stage around it (what to embed, the manifest protocol) is :mod:`zoorank.embed`."""

from __future__ import annotations

import os
import time
from collections import defaultdict
from collections.abc import Iterable
from concurrent.futures import ThreadPoolExecutor
from dataclasses import dataclass, field
from typing import Any

import numpy as np

from zoorank.catalog import Entry
from zoorank.config import RunConfig
from zoorank.console.embed_progress import Display
from zoorank.embed import viewcache
from zoorank.embed.decode_groups import Caches, Groups
from zoorank.embed.entry_rows import VERIFY_THREADS, verified_row
from zoorank.embed.resources import Resources
from zoorank.embed.work_plan import chunk_entries, slices_for
from zoorank.store import Store
from zoorank.zoo import Geometry, ResolvedModel, sources


def factory_paths(models: Iterable[ResolvedModel]) -> list[str]:
    """``sys.path`` roots (on the driver) of the modules of python-factory models.

    A local Ray starts its workers with the driver's script directory and working directory only,
    so a factory importable here (e.g. from a directory added to ``sys.path``) is made importable in
    the actors by handing them these roots.
    """
    import importlib.util

    roots: list[str] = []
    for m in models:
        top = sources.get(m.spec.source).import_root(m.spec)
        if top is None:
            continue
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


@dataclass
class Chunk:
    """One model chunk of a group in flight: its entries, its number of slice tasks, their reports."""

    group: tuple[str, Geometry]
    index: int
    entries: list[Entry]
    slices: int
    submitted: float
    reports: list[dict[str, Any]] = field(default_factory=list)


def embed_chunks(
    store: Store, config: RunConfig, groups: Groups, caches: Caches, res: Resources,
    display: Display, writer_id: str, on_wait=None,
) -> Iterable[tuple[list[dict[str, Any]], dict[str, Any]]]:
    """Run every chunk's slice tasks on :func:`zoorank.tasks.runner.run_tasks`; yield (manifest rows,
    stats) per chunk as it finishes, after verifying its entries on disk. A group's view cache goes
    with its last chunk. ``on_wait``: the runner's, while it waits for results.

    A slice whose worker died is split into one task per model over the same cache parts, so only
    the model that killed it is recorded (``crashed: worker died ...``); a slice that raised records
    its models as failed with the reason.
    """
    import contextlib

    from zoorank.embed.embedder import embed_slice
    from zoorank.tasks.runner import Task, crash_reason, run_tasks

    chunks: list[Chunk] = []
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
        chunks.append(Chunk(gkey, ci, centries, len(slices), time.time()))
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


def _chunk_stats(chunk: Chunk, res: Resources) -> dict[str, Any]:
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
