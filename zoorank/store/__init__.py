"""The store (contract 2): layout, transactional tables, immutable embedding shards, readers.

Every stage reads and writes through :class:`Store`, which wraps one ``pyarrow.fs`` filesystem, so a
store can be a local directory or an object-store URI (``s3://bucket/prefix``, ``gs://...``).
Where each artifact lives is :mod:`zoorank.store.layout`; URIs are parsed and redacted by
:mod:`zoorank.store.uris`; the plain files under the store's root (paths, atomic whole-file writes,
listing, deletes) are :mod:`zoorank.store.files`.

Tables (manifest, metrics, oracle, agreement, failed, leaderboard, samples, digests) are Delta Lake
tables (:mod:`zoorank.store.tables`): every write is one atomic commit with conflict detection, so
several processes may write one store at once and readers see a consistent snapshot.

Fingerprints (the freshness rule; :mod:`zoorank.catalog` applies it for every reader): each
manifest row and each ``metrics`` row carries the fingerprint of exactly what produced it —
for an embedding entry the model (weights digest, hub revision, build version), preprocessing,
dataset content digest and sample selection, view recipe and seed, precision and the embed stage's
version; for a metric row its entry's fingerprint, the metric's settings, ``max_samples``, the seed
and the metric's implementation version (``zoorank.metrics.registry``). The package version is in
no fingerprint. A row whose fingerprint differs from what the current config would give is stale:
readers ignore it, SCORE recomputes it, ``zoorank gc`` deletes it.

Embedding shards are immutable, uniquely named Parquet files (``part-<slice>-<n>-<uuid>.parquet``),
never rewritten in place. A manifest row lists its entry's shards (``shards``, a JSON list of file
names); readers read only those, a re-embed writes new files and one manifest commit swaps the
reference, and files no manifest row references are what ``zoorank gc`` removes. Plain files are
written under a temporary name and renamed locally; on object stores a single PUT is atomic.
The shard format and the manifest's references to shards: :mod:`zoorank.store.shards`; the
tables' keys, columns and update rules: :mod:`zoorank.store.schema`.
"""

from __future__ import annotations

import io
import json
import uuid
from collections.abc import Iterable, Sequence

import numpy as np
import pandas as pd
import pyarrow as pa
import pyarrow.parquet as pq

from zoorank.store import layout, tables, uris
from zoorank.store.batching import BatchedRows
from zoorank.store.files import StoreFiles
from zoorank.store.layout import MANIFEST, METRICS
from zoorank.store.schema import (
    MANIFEST_COLUMNS,
    MANIFEST_KEY,
    METRICS_COLUMNS,
    UPDATE_RULES,
)
from zoorank.store.shards import Embeddings, embedding_table, embeddings_from_table, referenced_shards


def _same_rows(a: pd.DataFrame, b: pd.DataFrame) -> bool:
    """Whether two frames hold the same rows, in any order (a table is a set of rows: a reader
    may get them back in another order than they were written)."""
    if len(a) != len(b):
        return False
    if a.empty:
        return True
    cols = list(a.columns)
    key = [a[c].astype(str) for c in cols]
    order_a = pd.DataFrame(dict(zip(cols, key))).sort_values(cols, kind="stable").index
    order_b = pd.DataFrame({c: b[c].astype(str) for c in cols}).sort_values(cols, kind="stable").index
    return a.loc[order_a].reset_index(drop=True).equals(b.loc[order_b].reset_index(drop=True))


class Store(StoreFiles):
    """A zoorank store on any ``pyarrow.fs`` filesystem: its files (paths, atomic writes, listing:
    :class:`~zoorank.store.files.StoreFiles`), its tables, embedding shards and manifest."""

    DIGESTS = layout.DIGESTS

    def __reduce__(self):  # picklable for Ray: rebuild from the URI on the worker
        return (Store, (self.uri,))

    # -- tables (Delta) and plain Parquet files ---------------------------------------------------
    @staticmethod
    def _is_file(relpath: str) -> bool:
        """``*.parquet`` names a plain Parquet file; anything else a Delta table."""
        return relpath.endswith(".parquet")

    def table(self, name: str) -> tables.TableLocation:
        """The Delta location of table ``name`` (a :mod:`zoorank.store.layout` name)."""
        if self.is_local:
            return tables.TableLocation(self.path(name))
        uri, options = uris.delta_location(self.uri, self.path(name))
        return tables.TableLocation(uri, options)

    def table_exists(self, name: str) -> bool:
        return tables.exists(self.table(name))

    def table_version(self, name: str) -> int | None:
        """The committed version of a table (None when absent): a snapshot's identity."""
        return tables.version(self.table(name))

    def write_parquet(self, relpath: str, table: pa.Table | pd.DataFrame) -> None:
        """A plain ``*.parquet`` file (atomic), or a whole table's new content (one commit)."""
        if not self._is_file(relpath):
            tables.replace(self.table(relpath), table)
            return
        if isinstance(table, pd.DataFrame):
            table = pa.Table.from_pandas(table, preserve_index=False)
        buf = io.BytesIO()
        pq.write_table(table, buf)
        self.write_bytes(relpath, buf.getvalue())

    def read_parquet(self, relpath: str) -> pa.Table:
        if not self._is_file(relpath):
            data = tables.read_arrow(self.table(relpath))
            if data is None:
                raise FileNotFoundError(f"no table {relpath} in {self.name}")
            return data
        # one open file, not a dataset: pyarrow's dataset path would look the file up (a HEAD)
        # before opening it (another HEAD), for every shard every reader reads
        with self.fs.open_input_file(self.path(relpath)) as f:
            return pq.read_table(f)

    def read_frame(self, relpath: str, columns: Sequence[str] | None = None,
                   version: int | None = None) -> pd.DataFrame:
        """A table (one snapshot: the latest, or ``version``) or a Parquet file as a DataFrame;
        empty with ``columns`` when absent."""
        if not self._is_file(relpath):
            return tables.read(self.table(relpath), columns, version)
        if not self.exists(relpath):
            return pd.DataFrame(columns=list(columns or []))
        return self.read_parquet(relpath).to_pandas()

    def upsert_rows(self, name: str, rows: Iterable[dict] | pd.DataFrame,
                    key: Sequence[str], update_if: str | None = None) -> None:
        """Replace the rows of table ``name`` that share ``key`` with ``rows`` (one MERGE commit;
        ``update_if``: see :func:`zoorank.store.tables.merge`). When several rows share a key
        (one per ``metric``), they replace every row of that key."""
        new = rows if isinstance(rows, pd.DataFrame) else pd.DataFrame(list(rows))
        if new.empty:
            return
        group = None
        if new.duplicated(subset=list(key)).any():  # long rows (one per metric): whole groups
            extra = [c for c in ("metric", "view") if c in new.columns and c not in key]
            group, key = list(key), [*key, *extra]
            if new.duplicated(subset=key).any():
                raise ValueError(f"rows for {name} repeat the key {key}")
        tables.merge(self.table(name), new, key, update_if or UPDATE_RULES.get(name), group)

    def insert_rows(self, name: str, rows: pd.DataFrame, key: Sequence[str]) -> dict:
        """Add the rows of ``rows`` whose ``key`` table ``name`` does not hold yet (one insert-only
        MERGE commit, :func:`zoorank.store.tables.merge`): a key already there keeps its first
        row, also when another writer committed it meanwhile. Returns delta-rs's merge metrics
        (``num_target_rows_inserted``; empty when ``rows`` is)."""
        return tables.merge(self.table(name), rows, key, insert_only=True)

    def append_rows(self, name: str, rows: Iterable[dict] | pd.DataFrame) -> None:
        """Add ``rows`` to table ``name`` (one append commit; readers must take the union)."""
        new = rows if isinstance(rows, pd.DataFrame) else pd.DataFrame(list(rows))
        tables.append(self.table(name), new)

    def replace_table(self, name: str, frame: pd.DataFrame,
                      metadata: dict[str, str] | None = None) -> int:
        """Make ``frame`` the content of table ``name`` (one commit; ``metadata`` rides on it).

        Nothing is committed when the table already holds exactly these rows and metadata, so a
        rerun leaves finished outputs untouched. Returns the version that holds them.
        """
        loc = self.table(name)
        old, info, version = self.read_table_commit(name)
        if old is not None and all(info.get(k) == v for k, v in (metadata or {}).items()):
            new = tables._arrow(frame).to_pandas()
            if list(old.columns) == list(new.columns) and _same_rows(old, new):
                return int(version)
        tables.replace(loc, frame, metadata)
        return int(tables.version(loc))

    def read_table_commit(self, name: str, version: int | None = None
                          ) -> tuple[pd.DataFrame | None, dict, int | None]:
        """(snapshot, its commit's info with any custom metadata, its version) of table ``name``
        (the latest, or ``version``); (None, {}, None) when absent. The info is read from that
        version's own commit file (one GET, no listing)."""
        loc = self.table(name)
        if version is None:
            frame, version = tables.read_versioned(loc)
        else:
            frame = tables.read(loc, version=version)
        if frame is None:
            return None, {}, None
        info = tables.commit_info(self.read_text(f"{name}/{tables.commit_file(version)}"))
        return frame, info, version

    def read_table_metadata(self, name: str, key: str) -> tuple[pd.DataFrame | None, str | None]:
        """(snapshot, the ``key`` metadata of its commit) of table ``name``; (None, None) if absent."""
        frame, info, _ = self.read_table_commit(name)
        return frame, info.get(key)

    def vacuum_table(self, name: str, older_than_s: float, dry_run: bool = False) -> list[str]:
        """Delete (or list) the data files of table ``name`` that it stopped referencing at least
        ``older_than_s`` seconds ago (rounded up to whole hours); their store-relative paths."""
        return [f"{name}/{f}" for f in tables.vacuum(self.table(name), older_than_s, dry_run)]

    def compact_table(self, name: str, only_above: bool = False) -> dict:
        """Compact table ``name``'s small files and checkpoint its log (:func:`tables.compact`);
        ``only_above``: only when it holds more than ``tables.COMPACT_ABOVE_FILES`` files (a
        stage calls it at its end without, its batched writers with). Returns the optimize
        metrics (empty when nothing was done)."""
        above = tables.COMPACT_ABOVE_FILES if only_above else 1
        return tables.compact(self.table(name), above_files=above)

    def batched(self, name: str, key: Sequence[str], **options) -> BatchedRows:
        """A :class:`zoorank.store.batching.BatchedRows` committing rows of table ``name`` on
        ``key`` per K models or T seconds (``options``: ``models``, ``seconds``)."""
        return BatchedRows(self, name, key, **options)

    def delete_rows(self, name: str, keys: pd.DataFrame, key: Sequence[str]) -> None:
        """Delete the rows of table ``name`` whose ``key`` values appear in ``keys`` (one commit)."""
        tables.delete(self.table(name), keys, key)

    # -- embeddings ------------------------------------------------------------------------------
    @staticmethod
    def embedding_dir(dataset: str, view: str, model_id: str) -> str:
        return layout.embedding_dir(dataset, view, model_id)

    def write_shard(
        self,
        dataset: str,
        view: str,
        model_id: str,
        part: int | str,
        sample_id: np.ndarray,
        view_index: np.ndarray,
        embedding: np.ndarray,
        logits: np.ndarray | None = None,
    ) -> str:
        """Write one immutable shard under a unique name; returns its file name (not the path).

        ``logits`` (rows, K): the kept head's logits of the same rows (:mod:`.shards`)."""
        stem = f"{part:06d}" if isinstance(part, int) else str(part)
        name = f"part-{stem}-{uuid.uuid4().hex[:12]}.parquet"
        rel = f"{self.embedding_dir(dataset, view, model_id)}/{name}"
        self.write_parquet(rel, embedding_table(sample_id, view_index, embedding, logits))
        return name

    def shard_names(self, dataset: str, view: str, model_id: str,
                    manifest: pd.DataFrame | None = None) -> list[str]:
        """The shards the manifest references for an entry: none unless it is ``done``; every file
        in its directory for an entry the manifest does not list (or a row without ``shards``)."""
        if manifest is None:
            manifest = self.read_manifest()
        names = referenced_shards(manifest, dataset, view, model_id)
        if names is not None:
            return names
        return self.list_files(self.embedding_dir(dataset, view, model_id), suffix=".parquet")

    def clear_embeddings(self, dataset: str, view: str, model_id: str) -> None:
        """No-op kept for callers: shards are immutable; unreferenced ones are gc's to remove."""

    def read_embeddings(self, dataset: str, view: str, model_id: str,
                        shards: Sequence[str] | None = None) -> Embeddings:
        """An entry's rows from exactly the shards the manifest references (or ``shards``);
        ``.logits`` holds the kept head's logits (None when the entry has none)."""
        names = list(shards) if shards is not None else self.shard_names(dataset, view, model_id)
        if not names:
            raise FileNotFoundError(
                f"no embeddings for dataset={dataset} view={view} model={model_id} in {self.name}"
            )
        base = self.embedding_dir(dataset, view, model_id)
        parts = [self.read_parquet(f"{base}/{n}") for n in names]
        return embeddings_from_table(pa.concat_tables(parts))

    def read_logits(self, dataset: str, view: str, model_id: str,
                    shards: Sequence[str] | None = None) -> Embeddings:
        """An entry's kept-head logits without its embeddings (only the id and ``logits`` columns
        are read): ``.logits`` float32 (rows, K) in the dataset's class order, ``.embedding``
        empty (rows, 0). Raises ValueError when the entry has no logits (manifest ``logit_dim`` 0).
        """
        names = list(shards) if shards is not None else self.shard_names(dataset, view, model_id)
        if not names:
            raise FileNotFoundError(
                f"no embeddings for dataset={dataset} view={view} model={model_id} in {self.name}"
            )
        base = self.embedding_dir(dataset, view, model_id)
        parts = []
        for n in names:
            with self.fs.open_input_file(self.path(f"{base}/{n}")) as f:
                shard = pq.ParquetFile(f)
                if "logits" not in shard.schema_arrow.names:
                    raise ValueError(f"dataset={dataset} view={view} model={model_id}: no logits "
                                     "(no head kept for it)")
                parts.append(shard.read(columns=["sample_id", "view_index", "logits"]))
        return embeddings_from_table(pa.concat_tables(parts))

    # -- manifest and long tables ----------------------------------------------------------------
    def read_manifest(self) -> pd.DataFrame:
        df = self.read_frame(MANIFEST, MANIFEST_COLUMNS)
        for col in MANIFEST_COLUMNS:
            if col not in df:
                df[col] = pd.NA
        # rows written before heads were kept have no logits
        df["logit_dim"] = df["logit_dim"].astype("Int64").fillna(0)
        return df[MANIFEST_COLUMNS]

    def update_manifest(self, rows: Iterable[dict]) -> None:
        """Upsert manifest rows (one commit); ``shards`` lists may be given as Python lists."""
        out = []
        for r in rows:
            row = {c: r.get(c) for c in MANIFEST_COLUMNS}
            if isinstance(row["shards"], (list, tuple)):
                row["shards"] = json.dumps(sorted(row["shards"]))
            for c in ("rows", "dim", "bad_images", "param_count", "logit_dim"):
                v = row[c]
                row[c] = None if v is None or v is pd.NA or (isinstance(v, float) and np.isnan(v)) \
                    else int(v)
            out.append(row)
        frame = pd.DataFrame(out, columns=MANIFEST_COLUMNS)
        for c in ("dataset", "view", "model_id", "fingerprint", "status", "error", "shards",
                  "precision", "versions"):
            frame[c] = frame[c].astype("string")
        for c in ("rows", "dim", "bad_images", "param_count", "logit_dim"):
            frame[c] = frame[c].astype("Int64")
        frame["seconds"] = frame["seconds"].astype("float64")
        self.upsert_rows(MANIFEST, frame, MANIFEST_KEY)

    def done_entries(self) -> dict[tuple[str, str, str], str]:
        """(dataset, view, model_id) → fingerprint for every manifest row with status ``done``."""
        m = self.read_manifest()
        m = m[m["status"] == "done"]
        return {
            (r.dataset, r.view, r.model_id): r.fingerprint for r in m.itertuples(index=False)
        }

    def read_metrics(self) -> pd.DataFrame:
        return self.read_frame(METRICS, METRICS_COLUMNS)
