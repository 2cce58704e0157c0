"""The store (contract 2): layout, atomic writes, the manifest, and readers.

Every stage reads and writes through :class:`Store`, which wraps one ``pyarrow.fs`` filesystem, so a
store can be a local directory or an object-store URI (``s3://bucket/prefix``, ``gs://...``).

Fingerprints (the freshness rule; :mod:`zoorank.freshness` applies it for every reader): each
manifest row and each ``metrics.parquet`` row carries the fingerprint of exactly what produced it —
for an embedding entry the model (weights digest, hub revision, build version), preprocessing,
dataset content digest and sample selection, view recipe and seed, precision and the embed stage's
version; for a metric row its entry's fingerprint, the metric's settings, ``max_samples``, the seed
and the metric's implementation version (``zoorank.metrics.registry``). The package version is in
no fingerprint. A row whose fingerprint differs from what the current config would give is stale:
readers ignore it, SCORE recomputes it, ``zoorank gc`` deletes it. One process writes a store at a
time (:mod:`zoorank.lease`).

Atomicity: local files are written under a temporary name and renamed; on object stores a single
PUT is already atomic, so objects are written in place. Only the driver writes the manifest and the
tables (``metrics.parquet`` ...); actors write embedding shards, each shard a whole file.
"""

from __future__ import annotations

import io
import json
import os
import uuid
from collections.abc import Iterable, Sequence
from dataclasses import dataclass
from pathlib import Path

import numpy as np
import pandas as pd
import pyarrow as pa
import pyarrow.fs as pafs
import pyarrow.parquet as pq

MANIFEST = "manifest.parquet"
METRICS = "metrics.parquet"
MANIFEST_KEY = ["dataset", "view", "model_id"]
MANIFEST_COLUMNS = [
    "dataset",
    "view",
    "model_id",
    "fingerprint",
    "status",
    "error",
    "rows",
    "dim",
    "seconds",
    "bad_images",
]
METRICS_COLUMNS = [
    "model_id",
    "dataset",
    "metric",
    "value",
    "params",
    "n",
    "dim",
    "seed",
    "zoorank_version",
    "fingerprint",
]


@dataclass(frozen=True)
class Embeddings:
    """Rows of one (dataset, view, model) entry, sorted by (sample_id, view_index)."""

    sample_id: np.ndarray  # int64 (rows,)
    view_index: np.ndarray  # int32 (rows,)
    embedding: np.ndarray  # float32 (rows, dim)

    def grouped(self) -> tuple[np.ndarray, np.ndarray]:
        """(sample_ids (n,), views (n, q, dim)) for augmented views; every sample must have q views."""
        ids, counts = np.unique(self.sample_id, return_counts=True)
        if len(ids) == 0:
            return ids, self.embedding.reshape(0, 0, self.embedding.shape[-1])
        if not np.all(counts == counts[0]):
            raise ValueError("samples have different numbers of views; cannot group n×q")
        q = int(counts[0])
        return ids, self.embedding.reshape(len(ids), q, -1)


def embedding_table(sample_id: np.ndarray, view_index: np.ndarray, embedding: np.ndarray) -> pa.Table:
    """Arrow table with the contract-2 columns (embedding as fixed_size_list<float32>[dim])."""
    emb = np.ascontiguousarray(embedding, dtype=np.float32)
    if emb.ndim != 2:
        raise ValueError(f"embedding must be 2-D (rows, dim), got {emb.shape}")
    flat = pa.array(emb.reshape(-1), type=pa.float32())
    column = pa.FixedSizeListArray.from_arrays(flat, emb.shape[1])
    return pa.table(
        {
            "sample_id": pa.array(np.asarray(sample_id, dtype=np.int64)),
            "view_index": pa.array(np.asarray(view_index, dtype=np.int32)),
            "embedding": column,
        }
    )


def _embeddings_from_table(table: pa.Table) -> Embeddings:
    sample_id = table.column("sample_id").to_numpy().astype(np.int64)
    view_index = table.column("view_index").to_numpy().astype(np.int32)
    col = table.column("embedding").combine_chunks()
    if isinstance(col.type, pa.ExtensionType):  # a Ray Data tensor column
        col = col.storage
    if len(col) == 0:
        emb = np.zeros((0, 0), dtype=np.float32)
    else:
        dim = col.type.list_size if pa.types.is_fixed_size_list(col.type) else len(col[0])
        emb = col.flatten().to_numpy(zero_copy_only=False).astype(np.float32).reshape(-1, dim)
    order = np.lexsort((view_index, sample_id))
    return Embeddings(sample_id[order], view_index[order], emb[order])


class Store:
    """A zoorank store on any ``pyarrow.fs`` filesystem."""

    def __init__(self, uri: str | os.PathLike[str], filesystem: pafs.FileSystem | None = None):
        uri = str(uri)
        self.uri = uri
        if filesystem is not None:
            self.fs, self.root = filesystem, uri.rstrip("/")
        elif "://" in uri:
            from zoorank.uris import with_retries

            self.fs, self.root = pafs.FileSystem.from_uri(uri)
            self.fs = with_retries(self.fs)  # transient object-store faults are retried
            self.root = self.root.rstrip("/")
        else:
            self.fs, self.root = pafs.LocalFileSystem(), str(Path(uri).expanduser().resolve())
        self.is_local = isinstance(self.fs, pafs.LocalFileSystem)
        self.fs.create_dir(self.root, recursive=True)

    def __repr__(self) -> str:
        return f"Store({self.name!r})"

    @property
    def name(self) -> str:
        """The store's URI with any credentials removed: what messages and reports show."""
        from zoorank.uris import redact

        return redact(self.uri)

    def __reduce__(self):  # picklable for Ray: rebuild from the URI on the worker
        return (Store, (self.uri,))

    # -- paths and raw I/O ---------------------------------------------------------------------
    def path(self, *parts: str) -> str:
        return "/".join([self.root, *[str(p).strip("/") for p in parts if p != ""]])

    def local_path(self, *parts: str) -> Path:
        """A real filesystem path (only for local stores, e.g. to hand a directory to matplotlib)."""
        if not self.is_local:
            raise ValueError(f"{self.name} is not a local store")
        return Path(self.path(*parts))

    def exists(self, *parts: str) -> bool:
        return self.fs.get_file_info(self.path(*parts)).type != pafs.FileType.NotFound

    def list_files(self, *parts: str, suffix: str = "") -> list[str]:
        """Relative names of the files directly under ``parts`` (sorted)."""
        base = self.path(*parts)
        if self.fs.get_file_info(base).type == pafs.FileType.NotFound:
            return []
        infos = self.fs.get_file_info(pafs.FileSelector(base, recursive=False))
        return sorted(
            i.base_name
            for i in infos
            if i.type == pafs.FileType.File and i.base_name.endswith(suffix)
            and not i.base_name.startswith(".")
        )

    def list_dirs(self, *parts: str) -> list[str]:
        base = self.path(*parts)
        if self.fs.get_file_info(base).type == pafs.FileType.NotFound:
            return []
        infos = self.fs.get_file_info(pafs.FileSelector(base, recursive=False))
        return sorted(i.base_name for i in infos if i.type == pafs.FileType.Directory)

    def write_bytes(self, relpath: str, data: bytes) -> None:
        """Write a whole file atomically (temp name + rename locally; one PUT on object stores).

        Text files and Parquet tables are redacted first (zoorank.redact: no secret is written)."""
        from zoorank.redact import redact_file

        data = redact_file(relpath, data)
        final = self.path(relpath)
        parent = final.rsplit("/", 1)[0]
        self.fs.create_dir(parent, recursive=True)
        if self.is_local:
            tmp = f"{parent}/.tmp-{uuid.uuid4().hex}-{final.rsplit('/', 1)[1]}"
            with self.fs.open_output_stream(tmp) as f:
                f.write(data)
            os.replace(tmp, final)
        else:
            with self.fs.open_output_stream(final) as f:
                f.write(data)

    def read_bytes(self, relpath: str) -> bytes:
        with self.fs.open_input_stream(self.path(relpath)) as f:
            return f.read()

    def write_text(self, relpath: str, text: str) -> None:
        self.write_bytes(relpath, text.encode())

    def read_text(self, relpath: str) -> str:
        return self.read_bytes(relpath).decode()

    def write_json(self, relpath: str, obj: object) -> None:
        self.write_text(relpath, json.dumps(obj, indent=2, sort_keys=True, default=str))

    def read_json(self, relpath: str) -> object:
        return json.loads(self.read_text(relpath))

    def write_parquet(self, relpath: str, table: pa.Table | pd.DataFrame) -> None:
        if isinstance(table, pd.DataFrame):
            table = pa.Table.from_pandas(table, preserve_index=False)
        buf = io.BytesIO()
        pq.write_table(table, buf)
        self.write_bytes(relpath, buf.getvalue())

    def read_parquet(self, relpath: str) -> pa.Table:
        return pq.read_table(self.path(relpath), filesystem=self.fs)

    def read_frame(self, relpath: str, columns: Sequence[str] | None = None) -> pd.DataFrame:
        """A Parquet table as a DataFrame; an empty frame with ``columns`` when it does not exist."""
        if not self.exists(relpath):
            return pd.DataFrame(columns=list(columns or []))
        return self.read_parquet(relpath).to_pandas()

    def delete(self, relpath: str) -> None:
        p = self.path(relpath)
        info = self.fs.get_file_info(p)
        if info.type == pafs.FileType.Directory:
            self.fs.delete_dir(p)
        elif info.type == pafs.FileType.File:
            self.fs.delete_file(p)

    # -- embeddings ------------------------------------------------------------------------------
    @staticmethod
    def embedding_dir(dataset: str, view: str, model_id: str) -> str:
        return f"embeddings/{dataset}/{view}/{model_id}"

    def write_shard(
        self,
        dataset: str,
        view: str,
        model_id: str,
        part: int | str,
        sample_id: np.ndarray,
        view_index: np.ndarray,
        embedding: np.ndarray,
    ) -> str:
        """Write one ``part-*.parquet`` shard atomically; returns its relative path."""
        name = f"part-{part:06d}.parquet" if isinstance(part, int) else f"part-{part}.parquet"
        rel = f"{self.embedding_dir(dataset, view, model_id)}/{name}"
        self.write_parquet(rel, embedding_table(sample_id, view_index, embedding))
        return rel

    def shard_names(self, dataset: str, view: str, model_id: str) -> list[str]:
        return self.list_files(self.embedding_dir(dataset, view, model_id), suffix=".parquet")

    def clear_embeddings(self, dataset: str, view: str, model_id: str) -> None:
        self.delete(self.embedding_dir(dataset, view, model_id))

    def read_embeddings(self, dataset: str, view: str, model_id: str) -> Embeddings:
        names = self.shard_names(dataset, view, model_id)
        if not names:
            raise FileNotFoundError(
                f"no embeddings for dataset={dataset} view={view} model={model_id} in {self.name}"
            )
        base = self.embedding_dir(dataset, view, model_id)
        tables = [self.read_parquet(f"{base}/{n}") for n in names]
        return _embeddings_from_table(pa.concat_tables(tables))

    # -- manifest and long tables ----------------------------------------------------------------
    def read_manifest(self) -> pd.DataFrame:
        df = self.read_frame(MANIFEST, MANIFEST_COLUMNS)
        for col in MANIFEST_COLUMNS:
            if col not in df:
                df[col] = pd.NA
        return df[MANIFEST_COLUMNS]

    def upsert_rows(self, relpath: str, rows: Iterable[dict], key: Sequence[str]) -> pd.DataFrame:
        """Replace rows of a Parquet table that share ``key`` with ``rows`` (single writer)."""
        new = pd.DataFrame(list(rows))
        old = self.read_frame(relpath)
        if new.empty:
            return old
        if not old.empty:
            merged = old.merge(new[list(key)].drop_duplicates(), on=list(key), how="left",
                               indicator=True)
            old = old[(merged["_merge"] == "left_only").to_numpy()]
            frames = [f for f in (old, new) if not f.empty]
            new = pd.concat(frames, ignore_index=True)
        self.write_parquet(relpath, new)
        return new

    def update_manifest(self, rows: Iterable[dict]) -> pd.DataFrame:
        rows = [{c: r.get(c) for c in MANIFEST_COLUMNS} for r in rows]
        return self.upsert_rows(MANIFEST, rows, MANIFEST_KEY)

    def done_entries(self) -> dict[tuple[str, str, str], str]:
        """(dataset, view, model_id) → fingerprint for every manifest row with status ``done``."""
        m = self.read_manifest()
        m = m[m["status"] == "done"]
        return {
            (r.dataset, r.view, r.model_id): r.fingerprint for r in m.itertuples(index=False)
        }

    def read_metrics(self) -> pd.DataFrame:
        return self.read_frame(METRICS, METRICS_COLUMNS)
