"""The EMBED stage: decode each (dataset, geometry) group once, then run every model chunk on it,
all chunks at once, across the cluster.

Per group::

    Ray Data: read encoded images (workers) → decode once + every view → decoded-view cache
              (compact uint8 Parquet in the store, zoorank.embed.viewcache)
    Ray tasks: one or more per model chunk (num_gpus=1 on GPUs), on zoorank.tasks.runner (as many at
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
chunks' Ray tasks: :mod:`.chunks`; the manifest rows of an entry (pending, verified, complete):
:mod:`.entry_rows`.
"""

from __future__ import annotations

import logging
import os
import time
from collections.abc import Sequence
from typing import Any

import pandas as pd

from zoorank.catalog import Catalog, Entry, planned_precision, samples_path
from zoorank.catalog.context import RunContext
from zoorank.config import RunConfig
from zoorank.console.embed_progress import Display, print_summary, quiet_ray_data
from zoorank.data.views import check_views
from zoorank.embed.chunks import embed_chunks
from zoorank.embed.decode_groups import decode_groups, with_undecodable
from zoorank.embed.entry_rows import complete_entries, pending_row
from zoorank.embed.resources import cluster_resources, wait_for_gpus
from zoorank.errors import ConfigError
from zoorank.store import MANIFEST, Store
from zoorank.store.layout import VIEW_CACHE_DIR
from zoorank.store.schema import MANIFEST_KEY
from zoorank.store.writers import Heartbeat
from zoorank.zoo.label_space import check_label_space, head_columns

log = logging.getLogger(__name__)

#: how a worker records a model's ConfigError (a label space that does not fit its head).
CONFIG_ERROR = "ConfigError: "

#: test hook: seconds to sleep after clearing the entries to recompute, before embedding them.
ENV_PAUSE_AFTER_CLEAR = "ZOORANK_TEST_PAUSE_AFTER_CLEAR"


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


def print_head_notes(entries: Sequence[Entry], rows: pd.DataFrame | None = None) -> None:
    """Before the run (``rows`` None): one line per distinct head choice of the python models;
    after it (the run's manifest ``rows``): a warning for each python model that looks like a
    classifier ranked by its features (:mod:`zoorank.zoo.heads`)."""
    from rich.text import Text

    from zoorank.console import output_console
    from zoorank.zoo.heads import head_choices, head_warnings

    if rows is None:
        lines = head_choices({e.model.model_id: e.model for e in entries}.values())
    else:
        classes = {e.dataset: len(e.label_space.classes) for e in entries
                   if e.label_space is not None and e.label_space.classes}
        lines = [f"warning: {w}" for w in head_warnings(
            {e.model.model_id: e.model for e in entries},
            rows.to_dict("records") if not rows.empty else [], classes)]
    console = output_console()
    for line in lines:
        console.print(Text(line, style="yellow" if rows is not None else ""), soft_wrap=True)


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


def run_embed(context: RunContext | RunConfig, address: str | None = None,
              catalog: Catalog | None = None) -> pd.DataFrame:
    """Embed every (dataset, view, model) of ``config`` into the store; returns their manifest rows.

    Entries already done with the same fingerprint and complete shards are skipped. Failed models
    are recorded (status ``failed`` with the reason) and the run returns normally. The live
    progress and the summary table go to the terminal (``ZOORANK_PROGRESS=0`` turns them off);
    ``result.attrs["pipelines"]`` holds each chunk's timings (start-up, steady-state images/s),
    ``result.attrs["driver_peak_rss_bytes"]`` this process's peak resident memory.
    """
    context = RunContext.of(context, catalog, address)
    config = context.config
    check_views(config.views)
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
    print_head_notes(entries)

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
                    for rows, stats in embed_chunks(store, config, groups, caches, res,
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
    print_head_notes(entries, out)
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


