"""The decoded-view cache: a (dataset, geometry) group's views decoded once, kept in the store as
compact uint8 Parquet, and read by every model chunk.

Why a cache and not one stream: Ray Data hands each batch to one actor of a pool, so chunks of
different models cannot consume one decoded stream; a materialised dataset holds every decoded view
in the object store at once. Here a Ray Data pipeline (read → decode → write parts) streams the
views into the store, and each chunk's tasks stream the parts back, one at a time. Driver memory and
the object store stay bounded by a few blocks, whatever the dataset size.

Layout: ``cache/views/<dataset>/<key>/part-<n>.parquet`` with columns sample_id int64, view
string, view_index int32, image fixed_size_binary[s·s·3] (uint8 HWC), bad bool, error string, and
``index.json`` (parts, rows, undecodable samples per view) once the whole group is written. ``key``
fingerprints everything the views depend on (dataset content and selection, geometry, view plans,
seed, the embed version), so a rerun after a crash reuses a complete cache. The group's cache is
deleted once all of its chunks are done.
"""

from __future__ import annotations

import json
import time
import uuid
from collections import defaultdict
from typing import TYPE_CHECKING, Any

import numpy as np

from zoorank.data.sample_reader import UNREADABLE, UnreadableError
from zoorank.data.undecodable import record_undecodable
from zoorank.data.views import decode_views
from zoorank.errors import InputError
from zoorank.store.layout import VIEW_CACHE_DIR

if TYPE_CHECKING:
    from zoorank.data.sources import SampleIndex
    from zoorank.data.views import ViewGeometry, ViewPlan
    from zoorank.store import Store

VIEW_CACHE = VIEW_CACHE_DIR
#: samples per decode task batch (each gives 1 + Σ q rows of views).
DECODE_BATCH = 32
DECODE_NUM_CPUS = 0.25
#: view rows per cache part (decoded batches are re-batched to this size).
PART_ROWS = 512


def cache_dir(dataset: str, key: str) -> str:
    return f"{VIEW_CACHE}/{dataset}/{key}"


def views_table(batch: dict[str, np.ndarray]) -> Any:
    """decode_views' output (image uint8 (n, s, s, 3)) → an Arrow table with a fixed-size binary."""
    import pyarrow as pa

    images = np.ascontiguousarray(batch["image"], dtype=np.uint8)
    width = int(np.prod(images.shape[1:])) if images.ndim == 4 else 0
    flat = pa.py_buffer(images.reshape(-1).tobytes())
    image = pa.FixedSizeBinaryArray.from_buffers(pa.binary(width), len(images), [None, flat])
    return pa.table({
        "sample_id": pa.array(np.asarray(batch["sample_id"], dtype=np.int64)),
        "view": pa.array([str(v) for v in batch["view"]], type=pa.string()),
        "view_index": pa.array(np.asarray(batch["view_index"], dtype=np.int32)),
        "image": image,
        "bad": pa.array(np.asarray(batch["bad"], dtype=bool)),
        "error": pa.array([str(e) for e in batch["error"]], type=pa.string()),
    })


def batch_from_table(table: Any, size: int) -> dict[str, np.ndarray]:
    """A cache part back as numpy: image uint8 (n, size, size, 3), view and error as str arrays."""
    col = table.column("image").combine_chunks()
    n = len(col)
    raw = np.frombuffer(col.buffers()[1], dtype=np.uint8, count=n * size * size * 3,
                        offset=col.offset * size * size * 3)
    return {
        "sample_id": table.column("sample_id").to_numpy().astype(np.int64),
        "view": np.asarray(table.column("view").to_pylist(), dtype=object).astype(str),
        "view_index": table.column("view_index").to_numpy().astype(np.int32),
        "image": raw.reshape(n, size, size, 3),
        "bad": table.column("bad").to_numpy(zero_copy_only=False).astype(bool),
        "error": np.asarray(table.column("error").to_pylist(), dtype=object),
    }


def read_part(store: Store, directory: str, name: str) -> dict[str, np.ndarray]:
    import pyarrow.parquet as pq

    table = pq.read_table(store.path(f"{directory}/{name}"), filesystem=store.fs)
    meta = table.schema.metadata or {}
    size = int(meta.get(b"zoorank.image_size", b"0"))
    return batch_from_table(table, size)


def write_part(batch: dict[str, np.ndarray], store_uri: str, directory: str, size: int
               ) -> dict[str, np.ndarray]:
    """Ray Data map_batches body: write one cache part; return its record (name, rows, bad ids)."""
    from zoorank.store import Store

    store = Store(store_uri)
    table = views_table(batch)
    table = table.replace_schema_metadata({"zoorank.image_size": str(size)})
    name = f"part-{uuid.uuid4().hex}.parquet"  # a retried task's part is never listed twice
    store.write_parquet(f"{directory}/{name}", table)
    bad = {}
    for v in sorted(set(batch["view"].tolist())):
        m = (batch["view"] == v) & batch["bad"]
        bad[v] = sorted({int(s) for s in batch["sample_id"][m]})
    errors = [str(e) for e in batch["error"][batch["bad"]]]
    unread = [e for e in errors if e.startswith(UNREADABLE)]
    first_error = next((e for e in errors if not e.startswith(UNREADABLE)), "")
    return {"name": np.asarray([name], dtype=object), "rows": np.asarray([len(table)]),
            "bad": np.asarray([json.dumps(bad)], dtype=object),
            "first_error": np.asarray([str(first_error)], dtype=object),
            "unreadable": np.asarray([len(set(unread))]),
            "first_unreadable": np.asarray([unread[0] if unread else ""], dtype=object)}


def check_decoded(dataset: str, found: dict[str, Any], plans: list[ViewPlan]) -> None:
    """Refuse a cache that would give entries with dropped or no samples.

    Raises :class:`zoorank.data.sample_reader.UnreadableError` when bytes of a sample could not be read
    (a flaky store: the next run tries again; such a sample is never counted as undecodable), and
    :class:`InputError` naming the dataset (and view) when none of a view's samples could be
    decoded (the entry would hold 0 rows).
    """
    if found.get("unreadable"):
        raise UnreadableError(f"dataset {dataset!r}: {found['unreadable']} sample(s) could not be "
                              f"read; first: {found['first_unreadable'][len(UNREADABLE):]}")
    for p in plans:
        n_bad = len(found["bad"].get(p.name, ()))
        if len(p.samples) and n_bad >= len(p.samples):
            where = "" if p.is_clean else f" (view {p.name!r})"
            raise InputError(f"dataset {dataset!r}{where}: none of its {len(p.samples)} image(s) "
                             f"could be decoded; first: {found['first_error']}")


def build(
    store: Store,
    index: SampleIndex,
    needed: np.ndarray,
    plans: list[ViewPlan],
    geometry: ViewGeometry,
    seed: int,
    key: str,
) -> dict[str, Any]:
    """Decode the group's views into the cache (or reuse a complete one); returns its index.

    The index: ``{"parts": [names], "rows": total, "bad": {view: [sample_ids]}, "first_error":
    str, "seconds": float, "reused": bool}``.
    """
    from zoorank.data.sample_reader import read_encoded

    directory = cache_dir(index.dataset, key)
    if store.exists(f"{directory}/index.json"):
        found = store.read_json(f"{directory}/index.json")
        check_decoded(index.dataset, found, plans)
        return {**found, "reused": True, "seconds": 0.0}
    store.delete(directory)  # an incomplete cache from a killed run
    t0 = time.perf_counter()
    ds = read_encoded(index, needed)
    ds = ds.map_batches(decode_views, fn_kwargs={"geometry": geometry, "plans": plans,
                                                 "seed": seed},
                        batch_size=DECODE_BATCH, batch_format="numpy", num_cpus=DECODE_NUM_CPUS)
    ds = ds.map_batches(write_part, fn_kwargs={"store_uri": store.uri, "directory": directory,
                                               "size": int(geometry.input_size)},
                        batch_size=PART_ROWS, batch_format="numpy", num_cpus=DECODE_NUM_CPUS)
    parts, rows, first_error, unreadable, first_unreadable = [], 0, "", 0, ""
    bad: dict[str, set[int]] = defaultdict(set)
    for rec in ds.iter_rows():  # one small record per part
        parts.append(str(rec["name"]))
        rows += int(rec["rows"])
        for v, ids in json.loads(rec["bad"]).items():
            bad[v].update(ids)
        first_error = first_error or str(rec["first_error"])
        unreadable += int(rec["unreadable"])
        first_unreadable = first_unreadable or str(rec["first_unreadable"])
    found = {"parts": sorted(parts), "rows": rows, "first_error": first_error,
             "bad": {v: sorted(ids) for v, ids in bad.items() if ids},
             "unreadable": unreadable, "first_unreadable": first_unreadable}
    try:
        check_decoded(index.dataset, found, plans)
    except InputError:
        store.delete(directory)  # never reused: the next run reads again
        raise
    record_undecodable(store, index.dataset, index.content_digest,
                       sorted({i for ids in found["bad"].values() for i in ids}))
    store.write_json(f"{directory}/index.json", found)
    return {**found, "reused": False, "seconds": time.perf_counter() - t0}


def drop(store: Store, dataset: str, key: str, writer_id: str) -> None:
    """Delete this run's cache of a group, then the dataset's cache directory when it is empty
    and no other live writer (:mod:`zoorank.store.writers`; ``writer_id`` is this run's) needs
    it: on an object store, deleting a directory deletes whatever another run has just written
    under it. Another run's delete of the same directory is no error."""
    from zoorank.store.writers import needed_by_another

    store.delete(cache_dir(dataset, key))
    parent = f"{VIEW_CACHE}/{dataset}"
    if not needed_by_another(store, parent, writer_id) and not store.list_dirs(parent):
        store.delete(parent)
