"""Manifest rows of an EMBED entry: ``pending`` (or ``broken``) before its shards are cleared, the
verified ``done`` / ``failed`` row from what its shards on disk hold, and which ``done`` entries
are complete (:func:`complete_entries`: skipped)."""

from __future__ import annotations

from collections.abc import Sequence
from concurrent.futures import ThreadPoolExecutor
from typing import Any

import numpy as np
import pandas as pd

from zoorank.catalog import Entry
from zoorank.embed.work_plan import verify_rows
from zoorank.store import Store
from zoorank.store.shards import parse_shards

#: threads reading shards back (footers, id columns): small reads whose latency dominates on an
#: object store, so they go in parallel.
VERIFY_THREADS = 16


def pending_row(entry: Entry, previous: dict[str, Any] | None = None) -> dict[str, Any]:
    """The row marking ``entry`` in progress; ``broken`` (naming the shards it replaces) when the
    manifest says done with this fingerprint but those shards are unreadable or short."""
    row = {"dataset": entry.dataset, "view": entry.view.name, "model_id": entry.model.model_id,
           "fingerprint": entry.fingerprint, "status": "pending", "error": None, "rows": 0,
           "dim": None, "seconds": 0.0, "bad_images": 0, "logit_dim": 0}
    if (previous is not None and previous.get("status") == "done"
            and previous.get("fingerprint") == entry.fingerprint):
        row.update(status="broken", shards=previous.get("shards"),
                   error="its shards are missing, short or unreadable; re-embedding")
    return row


def read_entry_rows(store: Store, key: tuple[str, str, str], shards: list[str]
                     ) -> tuple[np.ndarray, np.ndarray, int | None, int]:
    """(sample_id, view_index, dim, logit_dim) of the given shards of an entry (id columns only;
    ``logit_dim`` 0 without a ``logits`` column, -1 when the shards disagree on it)."""
    import pyarrow as pa
    import pyarrow.parquet as pq

    base = Store.embedding_dir(*key)
    sids, vis, dim, logit_dims = [], [], None, set()
    for name in shards:
        # one open file for the footer and the id columns: a path would be looked up (a request
        # on an object store) once for the table and once more for the schema
        with store.fs.open_input_file(store.path(f"{base}/{name}")) as f:
            shard = pq.ParquetFile(f)
            t = shard.read(columns=["sample_id", "view_index"])
            schema = shard.schema_arrow
            typ = schema.field("embedding").type
            logits = schema.field("logits").type if "logits" in schema.names else None
        logit_dims.add(logits.list_size if logits is not None
                       and pa.types.is_fixed_size_list(logits) else 0)
        sids.append(t.column("sample_id").to_numpy())
        vis.append(t.column("view_index").to_numpy())
        if pa.types.is_fixed_size_list(typ):
            dim = typ.list_size
    if not sids:
        return np.zeros(0, np.int64), np.zeros(0, np.int32), None, 0
    logit_dim = logit_dims.pop() if len(logit_dims) == 1 else -1
    return (np.concatenate(sids).astype(np.int64), np.concatenate(vis).astype(np.int32), dim,
            logit_dim)


def verified_row(store: Store, entry: Entry, records: list[dict[str, Any]], bad: set[int]
                  ) -> dict[str, Any]:
    """The manifest row of a finished entry, from what its shards on disk hold."""
    row = pending_row(entry)
    bad_here = np.asarray(sorted(bad), dtype=np.int64)
    expected = np.setdiff1d(entry.samples, bad_here)
    row["bad_images"] = int(len(entry.samples) - len(expected))
    row["seconds"] = round(float(sum(r["seconds"] for r in records)), 4)
    error = next((r["error"] for r in records if r["error"]), None)
    if not records:
        error = "no output (no task reported this entry)"
    shards = sorted({name for r in records for name in r.get("shards", ())})
    if error is None:
        try:
            sid, vi, dim, logit_dim = read_entry_rows(store, entry.key, shards)
        except (OSError, ValueError) as err:  # ArrowInvalid (a corrupt shard) is a ValueError
            sid = vi = None
            error = f"cannot read its shards: {err}"
        if error is None:
            error = verify_rows(sid, vi, expected, entry.view.per_sample)
            if error is None and logit_dim < 0:
                error = "its shards disagree on the logits column (some lack it, or widths differ)"
            if error is None and dim is None and len(expected):
                error = "no embeddings produced"
            row.update(rows=int(len(sid)), dim=dim, logit_dim=logit_dim)
    # what the workers used, as they resolved it (readers use this, never their own GPU)
    row["precision"] = next((r.get("precision") for r in records if r.get("precision")), None)
    row["versions"] = next((r.get("versions") for r in records if r.get("versions")), None)
    row["param_count"] = next((r["param_count"] for r in records
                               if r.get("param_count") is not None), None)
    if error is not None:
        row.update(status="failed", error=error, rows=0)
    else:
        row.update(status="done", shards=shards)
    return row


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
