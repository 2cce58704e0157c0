"""Reading a dataset's encoded images: the read work of a :class:`zoorank.data.sources.SampleIndex`, its
blocks streamed on the workers, and a Ray Data datasource over them.

Conventions:

- A read never holds more than one unit's ids on the driver and one block of encoded images on a
  worker (:data:`READ_BLOCK_ROWS` rows); image bytes never travel through the driver.
- A read that fails with a transient error is tried again with back-off (:data:`READ_TRIES`,
  :mod:`zoorank.tasks.retry`); a missing file is final at once. A sample whose bytes still cannot be
  read is yielded with a None payload and a name starting with :data:`UNREADABLE`, never dropped
  and never taken for an undecodable image.
"""

from __future__ import annotations

import dataclasses
import fnmatch
import functools
import io
import os
from collections.abc import Iterator
from typing import Any

import numpy as np

from zoorank.data.sources import SampleIndex
from zoorank.errors import InputError
from zoorank.store import uris
from zoorank.tasks import retry

#: encoded samples per block a read task yields (each read task streams its rows in such blocks).
READ_BLOCK_ROWS = 128
#: needed samples per read task (a Parquet row group larger than this is read by several tasks).
READ_TASK_ROWS = 1024
#: tries of one read (a file, or a Parquet row-group slice) before it counts as unreadable: the
#: :data:`zoorank.tasks.retry.READS` policy's.
READ_TRIES = retry.READS.attempts
#: prefix of the ``name`` of a sample whose bytes could not be read (not an undecodable image).
UNREADABLE = "unreadable: "


class UnreadableError(InputError):
    """Bytes of a dataset that could not be read after :data:`READ_TRIES` tries (names the file)."""


def _retrying(what: str, fn: Any) -> Any:
    """``fn()`` under :data:`zoorank.tasks.retry.READS`, tried again on a transient ``OSError`` (a flaky
    disk or object store; a missing file or a denied read is final at once).

    A read that still fails raises :class:`UnreadableError` with the last reason: an unreadable
    sample is never taken for an undecodable image, which would drop it silently.
    """
    policy = retry.READS.retrying(retry.transient_io)
    try:
        return policy(fn)
    except OSError as err:
        raise UnreadableError(f"{what}: cannot read after {_tries(policy)}: "
                              f"{uris.redact(str(err))}") from None


def _tries(policy: Any) -> str:
    n = int(policy.statistics.get("attempt_number", 1))
    return f"{n} tries" if n > 1 else "1 try"


#: test hook: ``GLOB`` makes every read of a matching image-folder file fail with an OSError;
#: ``GLOB:N`` only its first N tries in each process (a transient fault); several rules are
#: separated by ``;`` (the first whose glob matches applies).
ENV_FAIL_READS = "ZOORANK_TEST_FAIL_READS"
_injected: dict[str, int] = {}


def _read_file(uri: str) -> bytes:
    for rule in filter(None, os.environ.get(ENV_FAIL_READS, "").split(";")):
        pattern, _, times = rule.partition(":")
        if fnmatch.fnmatch(uri, pattern):
            _injected[uri] = _injected.get(uri, 0) + 1
            if not times or _injected[uri] <= int(times):
                raise OSError(f"injected read failure ({ENV_FAIL_READS})")
            break
    fs, path = uris.resolve(uri)
    with fs.open_input_file(path) as f:
        return f.read()


# -- reading encoded images (workers) --------------------------------------------------------------
def read_units(index: SampleIndex, needed: np.ndarray) -> list[tuple[str, Any]]:
    """The read work for ``needed`` sample ids: one unit per Parquet row-group slice or file batch.

    Each unit is small and picklable (ids and names, never bytes): ``("parquet", (row_group,
    first_row, ids))``, ``("files", [(sample_id, relpath), ...])`` or ``("memory", ids)``.
    """
    needed = np.unique(np.asarray(needed, dtype=np.int64))
    units: list[tuple[str, Any]] = []
    if index.kind == "parquet":
        for g, (start, rows) in enumerate(index.row_groups):
            lo, hi = np.searchsorted(needed, [start, start + rows])
            ids = needed[lo:hi]
            for a in range(0, len(ids), READ_TASK_ROWS):
                units.append(("parquet", (g, int(start), ids[a:a + READ_TASK_ROWS])))
    elif index.kind == "image_folder":
        for a in range(0, len(needed), READ_TASK_ROWS // 4):
            ids = needed[a:a + READ_TASK_ROWS // 4]
            units.append(("files", [(int(s), index.relpaths[int(s)]) for s in ids]))
    else:
        for a in range(0, len(needed), READ_TASK_ROWS):
            units.append(("memory", needed[a:a + READ_TASK_ROWS]))
    return units


def _block(ids: list[int], payloads: list[Any], names: list[str]) -> dict[str, np.ndarray]:
    payload = np.empty(len(payloads), dtype=object)
    payload[:] = payloads
    return {"sample_id": np.asarray(ids, dtype=np.int64), "payload": payload,
            "name": np.asarray(names, dtype=object)}


def read_unit(index: SampleIndex, unit: tuple[str, Any],
              block_rows: int = READ_BLOCK_ROWS) -> Iterator[dict[str, np.ndarray]]:
    """Stream one unit's encoded images as blocks (sample_id, payload, name) of ≤ ``block_rows``.

    Runs on a worker: opens the file or object itself (credentials from its environment).
    """
    kind, arg = unit
    label = f"dataset {index.dataset!r}: "
    if kind == "parquet":
        group, start, ids = arg
        ids = np.asarray(ids, dtype=np.int64)
        # a read that fails part-way is tried again from the first id not yet yielded, under
        # the one read policy (blocks stream out as they are read); what is still unreadable is
        # flagged, never dropped
        got = 0
        policy = retry.READS.retrying(retry.transient_io)
        try:
            for tried in policy:
                with tried:
                    for block in _parquet_blocks(index, group, start, ids[got:], block_rows,
                                                 label):
                        got += len(block["sample_id"])
                        yield block
        except OSError as err:
            why = (f"{UNREADABLE}{label}{uris.basename(index.uri)} row group {group}: cannot "
                   f"read after {_tries(policy)}: {uris.redact(str(err))}")
            left = [int(x) for x in ids[got:]]
            for a in range(0, len(left), block_rows):
                yield _block(left[a:a + block_rows], [None] * len(left[a:a + block_rows]),
                             [why] * len(left[a:a + block_rows]))
    elif kind == "files":
        for a in range(0, len(arg), block_rows):
            part = arg[a:a + block_rows]
            payloads, names = [], []
            for s, rel in part:
                name = f"{label}{rel} (sample_id {s})"
                uri = uris.child(index.uri, rel)
                try:
                    payloads.append(_retrying(name, functools.partial(_read_file, uri)))
                except UnreadableError as err:  # flagged, never counted as an undecodable image
                    payloads.append(None)
                    name = f"{UNREADABLE}{err}"
                names.append(name)
            yield _block([s for s, _ in part], payloads, names)
    elif kind == "arrays":  # (ids, uint8 arrays, names) carried by the task itself
        ids, arrays, names = arg
        for a in range(0, len(ids), block_rows):
            part = [int(s) for s in ids[a:a + block_rows]]
            yield _block(part, [png_bytes(x) for x in arrays[a:a + block_rows]],
                         [f"{label}{n} (sample_id {s})"
                          for s, n in zip(part, names[a:a + block_rows])])
    else:
        for a in range(0, len(arg), block_rows):
            ids = [int(s) for s in arg[a:a + block_rows]]
            yield _block(ids, [index.arrays[s] for s in ids],
                         [f"{label}{index.names[s]} (sample_id {s})" for s in ids])


def _parquet_blocks(index: SampleIndex, group: int, start: int, ids: np.ndarray, block_rows: int,
                    label: str) -> Iterator[dict[str, np.ndarray]]:
    """The blocks (sample_id, payload, name) of one Parquet row group's ``ids`` (sorted)."""
    import pyarrow as pa
    import pyarrow.parquet as pq

    row = start
    ids_out: list[int] = []
    payloads: list[Any] = []
    if len(ids) == 0:
        return
    base = uris.basename(index.uri)
    fs, path = uris.resolve(index.uri)
    with fs.open_input_file(path) as f:
        for batch in pq.ParquetFile(f).iter_batches(
            batch_size=max(block_rows, 256), row_groups=[group], columns=[index.image_column]
        ):
            col = batch.column(0)
            if pa.types.is_struct(col.type):
                col = col.field("bytes")
            n = len(col)
            lo, hi = np.searchsorted(ids, [row, row + n])
            if hi > lo:
                ids_out += ids[lo:hi].tolist()
                payloads += col.take(pa.array(ids[lo:hi] - row)).to_pylist()
            while len(ids_out) >= block_rows:
                part, ids_out = ids_out[:block_rows], ids_out[block_rows:]
                got, payloads = payloads[:block_rows], payloads[block_rows:]
                yield _block(part, got, [f"{label}{base}#row={s} (sample_id {s})" for s in part])
            row += n
            if row > ids[-1]:
                break
    if ids_out:
        yield _block(ids_out, payloads, [f"{label}{base}#row={s} (sample_id {s})" for s in ids_out])


def read_encoded(index: SampleIndex, needed: np.ndarray) -> Any:
    """A Ray Dataset of the encoded images of ``needed`` ids: columns sample_id, payload, name.

    A Ray Data datasource whose read tasks (one per :func:`read_units` unit, carrying ids and names
    only) run on the workers and stream blocks of :data:`READ_BLOCK_ROWS` samples.
    ``ray.data.read_parquet`` gives no row index (the stable ``sample_id``) and
    ``read_binary_files`` stats every path on the driver, so neither fits as is. In-memory sources
    (digits, ``.npz``) travel as lossless PNG bytes.
    """
    import ray
    from ray.data.block import BlockMetadata
    from ray.data.datasource import Datasource, ReadTask

    # what a read task needs of the index: no labels, listings or arrays
    light = dataclasses.replace(index, label=None, relpaths=None, arrays=None, names=None)
    units = read_units(index, needed)

    class EncodedImages(Datasource):
        def estimate_inmemory_data_size(self) -> int | None:
            return None

        def get_read_tasks(self, parallelism: int, **kwargs: Any) -> list[ReadTask]:
            tasks = []
            for unit in units:
                if index.kind == "memory":  # only this unit's arrays travel with its task
                    ids = unit[1]
                    unit = ("arrays", (ids, [index.arrays[int(s)] for s in ids],
                                       [index.names[int(s)] for s in ids]))
                rows = len(unit[1][2]) if unit[0] == "parquet" else len(unit[1][0]) \
                    if unit[0] == "arrays" else len(unit[1])
                meta = BlockMetadata(num_rows=rows, size_bytes=None, input_files=None,
                                     exec_stats=None)
                tasks.append(ReadTask(functools.partial(_read_task, light, unit), meta))
            return tasks

    return ray.data.read_datasource(EncodedImages())


def _read_task(index: SampleIndex, unit: tuple[str, Any]) -> Iterator[Any]:
    import pyarrow as pa

    for block in read_unit(index, unit):
        yield pa.table({
            "sample_id": pa.array(block["sample_id"]),
            "payload": pa.array(list(block["payload"]), type=pa.binary()),
            "name": pa.array(list(block["name"]), type=pa.string()),
        })


def png_bytes(arr: np.ndarray) -> bytes:
    """A uint8 (H, W[, C]) array as lossless PNG bytes."""
    from PIL import Image

    arr = np.asarray(arr)
    if arr.ndim == 3 and arr.shape[-1] == 1:
        arr = arr[..., 0]
    buf = io.BytesIO()
    Image.fromarray(arr).save(buf, format="PNG")
    return buf.getvalue()
