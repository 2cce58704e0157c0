"""Transactional store tables: Delta Lake (delta-rs) under ``<store>/<name>/``.

One small API over every table (manifest, metrics, oracle, agreement, failed, leaderboard, samples,
digests): :func:`read` a snapshot, :func:`merge` rows on a key (a Delta MERGE), :func:`delete`
rows whose key is in a set (a MERGE that deletes), :func:`replace` the whole content, and
:func:`compact` the small files (then checkpoint the log). Every write is one Delta commit; a
commit that loses a race to another writer (``CommitFailedError``) runs again on the new snapshot
(:mod:`zoorank.tasks.retry`), so concurrent writers never lose each other's rows (a compaction, which only
rewrites committed rows, is best-effort instead: :func:`compact`). Merges read only the
files whose key ranges overlap the new rows (``streamed_exec=False``); callers batch their rows
(:mod:`zoorank.store.batching`) so a stage makes few commits and few files.

Concurrency without a lock service: on local disk delta-rs commits ``_delta_log/N.json`` with an
atomic create-if-absent; on S3 (delta-rs ≥ 1.0) with a conditional PUT (``If-None-Match: *``),
which AWS S3, MinIO, R2 and moto's server (≥ 5.0.15) honour; GCS has generation preconditions. The
DynamoDB lock of delta-rs 0.x is gone in 1.x.

Readers see one committed version (snapshot isolation) and take no lock.
"""

from __future__ import annotations

import logging
import math
from collections.abc import Sequence

import pandas as pd
import pyarrow as pa

from zoorank.store.redact import redact, redact_table
from zoorank.tasks import retry

log = logging.getLogger(__name__)

#: table properties of every new table: a checkpoint every 20 commits keeps a snapshot read to a
#: checkpoint plus at most 19 small JSON commits (object-store reads pay per request).
TABLE_CONFIGURATION = {"delta.checkpointInterval": "20"}
#: a table with more data files than this is compacted by the batched writer mid-stage (F); every
#: stage compacts the tables it wrote at its end anyway (:func:`compact`).
COMPACT_ABOVE_FILES = 32


class TableLocation:
    """Where one table lives: a delta-rs URI and its storage options (credentials, endpoint)."""

    def __init__(self, uri: str, storage_options: dict[str, str] | None = None) -> None:
        self.uri = uri
        self.storage_options = dict(storage_options or {})

    def __repr__(self) -> str:
        from zoorank.store.uris import redact

        return f"TableLocation({redact(self.uri)!r})"


def _open(loc: TableLocation, version: int | None = None):
    from deltalake import DeltaTable
    from deltalake.exceptions import TableNotFoundError

    try:
        return DeltaTable(loc.uri, version=version, storage_options=loc.storage_options or None)
    except TableNotFoundError:
        return None


def _schema(table) -> pa.Schema:
    """A Delta table's schema as a pyarrow schema (delta-rs 1.x hands out arro3 objects)."""
    return pa.schema(table.schema().to_arrow())


def _written(table) -> bool:
    """Whether a table holds a write: not only the empty commit that created it
    (:func:`_create_empty`), which readers take as no table yet (as before it existed)."""
    return table is not None and (table.version() > 0 or bool(table.file_uris()))


def exists(loc: TableLocation) -> bool:
    """Whether the table holds a write (a table only created empty does not, :func:`_written`)."""
    # not DeltaTable.is_deltatable: it keeps the GIL while it waits on the object store, which
    # deadlocks against an S3 server in the same process (the tests' moto) until its timeout
    return _written(_open(loc))


def version(loc: TableLocation) -> int | None:
    """The table's current version (None when it holds no write yet, :func:`_written`)."""
    table = _open(loc)
    return int(table.version()) if _written(table) else None


def read_arrow(loc: TableLocation, columns: Sequence[str] | None = None,
               version: int | None = None) -> pa.Table | None:
    """One committed snapshot (the latest, or ``version``) as Arrow; None when there is none."""
    table = _open(loc, version)
    if not _written(table):
        return None
    have = set(_schema(table).names) if columns is not None else None
    cols = [c for c in columns if c in have] if columns is not None else None
    return table.to_pyarrow_table(columns=cols)


def read(loc: TableLocation, columns: Sequence[str] | None = None,
         version: int | None = None) -> pd.DataFrame:
    """One committed snapshot (the latest, or ``version``) as a DataFrame; empty (with
    ``columns``) when the table is absent."""
    data = read_arrow(loc, version=version)
    if data is None:
        return pd.DataFrame(columns=list(columns or []))
    frame = data.to_pandas()
    return frame


def read_versioned(loc: TableLocation) -> tuple[pd.DataFrame | None, int | None]:
    """One snapshot and its version ((None, None) when the table does not exist)."""
    table = _open(loc)
    if not _written(table):
        return None, None
    return table.to_pyarrow_table().to_pandas(), int(table.version())


def commit_file(version: int) -> str:
    """The log file of a commit, relative to the table's directory (Delta protocol)."""
    return f"_delta_log/{version:020d}.json"


def commit_info(log_text: str) -> dict:
    """The ``commitInfo`` action of a commit file (custom metadata is merged into it)."""
    import json

    for line in log_text.splitlines():
        if line.strip():
            action = json.loads(line)
            if "commitInfo" in action:
                return action["commitInfo"]
    return {}


#: the type of an all-null column of these names (a crashed row's ``value``), else string.
NULL_TYPES = {"value": pa.float64(), "n": pa.int64(), "dim": pa.int64(), "seed": pa.int64(),
              "rows": pa.int64(), "bad_images": pa.int64(), "seconds": pa.float64(),
              "size": pa.int64(), "mtime_ns": pa.int64()}


def _arrow(frame: pd.DataFrame | pa.Table) -> pa.Table:
    """Arrow with types Delta can store: all-null columns get :data:`NULL_TYPES` (else string),
    unsigned integers become signed."""
    table = frame if isinstance(frame, pa.Table) else pa.Table.from_pandas(frame, preserve_index=False)
    fields = []
    for f in table.schema:
        t = f.type
        if pa.types.is_null(t):
            t = NULL_TYPES.get(f.name, pa.string())
        elif pa.types.is_unsigned_integer(t):
            t = pa.int64()
        elif pa.types.is_large_string(t):
            t = pa.string()
        fields.append(pa.field(f.name, t))
    return table.cast(pa.schema(fields))


def _conform(source: pa.Table, target_schema: pa.Schema) -> pa.Table:
    """Cast ``source``'s columns to the target table's types where both have them."""
    cols, fields = [], []
    for f in source.schema:
        col = source.column(f.name)
        idx = target_schema.get_field_index(f.name)
        if idx >= 0 and target_schema.field(idx).type != f.type:
            try:
                col = col.cast(target_schema.field(idx).type)
                f = pa.field(f.name, target_schema.field(idx).type)
            except (pa.ArrowInvalid, pa.ArrowNotImplementedError):
                pass
        cols.append(col)
        fields.append(f)
    return pa.Table.from_arrays(cols, schema=pa.schema(fields))


def _retry(action, what: str):
    """``action()`` until it commits (:data:`zoorank.tasks.retry.COMMITS`), returning its value: a lost
    commit race (``CommitFailedError``) or a transient I/O failure re-reads the table and tries
    again; any other error raises at once. ``what`` names the write in the error a give-up
    raises."""
    try:
        return retry.call(action, policy=retry.COMMITS, on=retry.COMMIT)
    except Exception as err:
        err.add_note(f"zoorank: {what}")
        raise


def _key_predicate(key: Sequence[str]) -> str:
    return " AND ".join(f"t.`{k}` = s.`{k}`" for k in key)


def _literal(value: object) -> str:
    if isinstance(value, (int, float)) and not isinstance(value, bool):
        return repr(value)
    return "'" + str(value).replace("'", "''") + "'"


def _group_predicate(rows: pd.DataFrame, group: Sequence[str]) -> str:
    """``t`` rows whose ``group`` values are one of ``rows``' (a literal OR of ANDs)."""
    keys = rows[list(group)].drop_duplicates().itertuples(index=False)
    return " OR ".join("(" + " AND ".join(f"t.`{g}` = {_literal(v)}" for g, v in zip(group, k))
                       + ")" for k in keys)


def _create_empty(loc: TableLocation, schema: pa.Schema):
    """Create a missing table with ``schema`` and no rows; returns it opened. Rows never ride on
    the creating commit: delta-rs retries a create that lost the race for version 0 as a blind
    append, which Delta checks against nothing, so two writers creating a table together with
    rows would both land theirs (the same key twice, or two copies of a replaced table). An empty
    create that loses raises ``CommitFailedError`` or lands no row; the caller's retry reads the
    winner's table."""
    from deltalake import write_deltalake

    write_deltalake(loc.uri, schema.empty_table(), mode="append",
                    configuration=TABLE_CONFIGURATION, storage_options=loc.storage_options or None)
    return _open(loc)


def merge(loc: TableLocation, rows: pd.DataFrame | pa.Table, key: Sequence[str],
          update_if: str | None = None, group: Sequence[str] | None = None,
          insert_only: bool = False) -> dict:
    """Upsert ``rows`` on ``key`` (one Delta MERGE commit): matching rows are replaced, others added.
    Returns delta-rs's merge metrics (``num_target_rows_inserted``, ...; empty when ``rows`` is
    empty). Cost: reads the files whose key ranges overlap ``rows``'.

    ``update_if``: a SQL predicate over ``t`` (the table) and ``s`` (the new rows); a matching row
    is replaced only where it holds (e.g. an in-progress row never replaces a finished one).
    ``group`` (a prefix of ``key``): rows of the table in a group that ``rows`` has, but that
    ``rows`` do not match, are deleted in the same commit (``rows`` replace whole groups).
    ``insert_only``: a matching row is kept as it is (the first row of a key wins; no update, no
    group clause): only the rows of new keys are added.

    A missing table is first created empty (:func:`_create_empty`), then the rows are merged into
    it like into any other: a MERGE that loses a race is checked against the winner's new files
    and runs again on the new snapshot, so two writers never insert the same key twice.
    """
    if insert_only and (update_if is not None or group):
        raise ValueError("an insert-only merge takes no update_if and no group")
    source = redact_table(_arrow(rows))  # no secret is written (zoorank.store.redact)
    if source.num_rows == 0:
        return {}
    dedup = source.to_pandas().drop_duplicates(subset=list(key), keep="last")
    source = _arrow(pa.Table.from_pandas(dedup, preserve_index=False, schema=source.schema))
    stale_in_group = _group_predicate(dedup, group) if group else None
    stats: dict = {}

    def action() -> None:
        table = _open(loc)
        if table is None:
            table = _create_empty(loc, source.schema)
        data = _conform(source, _schema(table))
        # streamed_exec=False: delta-rs materialises the (small) source and derives a filter on
        # the key columns' ranges from it, so only files whose statistics overlap the new keys
        # are read (the default streamed execution reads every file). A ``group`` clause
        # (not matched by source) still reads every file: keep it to small tables.
        merger = table.merge(data, predicate=_key_predicate(key), source_alias="s",
                             target_alias="t", merge_schema=True, streamed_exec=False)
        if not insert_only:
            merger = merger.when_matched_update_all(predicate=update_if)
        merger = merger.when_not_matched_insert_all()
        if stale_in_group:
            merger = merger.when_not_matched_by_source_delete(predicate=stale_in_group)
        stats.clear()  # the metrics of the attempt that committed
        stats.update(merger.execute())

    _retry(action, f"merge into {loc!r}")
    return stats


def append(loc: TableLocation, rows: pd.DataFrame | pa.Table) -> None:
    """Add ``rows`` (one commit). Appends never conflict with each other, so concurrent writers
    both land; a retried append may repeat rows, so use it only where readers take the union."""
    from deltalake import write_deltalake

    source = redact_table(_arrow(rows))
    if source.num_rows == 0:
        return

    def action() -> None:
        table = _open(loc)
        data = source if table is None else _conform(source, _schema(table))
        write_deltalake(loc.uri, data, mode="append", configuration=TABLE_CONFIGURATION,
                        storage_options=loc.storage_options or None)

    _retry(action, f"append to {loc!r}")


def delete(loc: TableLocation, keys: pd.DataFrame, key: Sequence[str]) -> None:
    """Delete the rows whose ``key`` values appear in ``keys`` (one MERGE commit)."""
    keys = keys[list(key)].drop_duplicates()
    if keys.empty:
        return

    def action() -> None:
        table = _open(loc)
        if table is None:
            return
        data = _conform(_arrow(keys), _schema(table))
        (table.merge(data, predicate=_key_predicate(key), source_alias="s", target_alias="t",
                     streamed_exec=False)
         .when_matched_delete().execute())

    _retry(action, f"delete from {loc!r}")


def replace(loc: TableLocation, rows: pd.DataFrame | pa.Table,
            metadata: dict[str, str] | None = None) -> None:
    """Replace the whole content (one overwrite commit): for derived tables one writer recomputes.

    ``metadata`` rides on the commit itself (Delta ``commitInfo``), so it always describes exactly
    the rows of that version (``Store.read_table_metadata``).
    """
    from deltalake import CommitProperties, write_deltalake

    data = redact_table(_arrow(rows))  # no secret is written (zoorank.store.redact)
    props = (CommitProperties(custom_metadata={k: redact(v) for k, v in metadata.items()})
             if metadata else None)

    def action() -> None:
        if _open(loc) is None:  # two overwrites creating the table would both land (see there)
            _create_empty(loc, data.schema)
        # predicate "true": the overwrite states that it read every row, so an overwrite racing
        # another is checked against the winner's files and runs again (a bare overwrite of a
        # table without files removes nothing and is retried by delta-rs as a blind append)
        write_deltalake(loc.uri, data, mode="overwrite", schema_mode="overwrite", predicate="true",
                        configuration=TABLE_CONFIGURATION,
                        storage_options=loc.storage_options or None, commit_properties=props)

    _retry(action, f"replace {loc!r}")


def file_count(loc: TableLocation) -> int:
    """Data files the current snapshot references (0 when the table does not exist)."""
    table = _open(loc)
    return 0 if table is None else len(table.file_uris())


def compact(loc: TableLocation, above_files: int = 1) -> dict:
    """Rewrite the small data files of a table into few (delta-rs ``optimize.compact``, one
    commit) when it has more than ``above_files`` of them, then checkpoint the log
    (``create_checkpoint``) so a snapshot read is one Parquet checkpoint and no JSON commits.

    Returns delta-rs's optimize metrics (``numFilesRemoved``, ...; empty when nothing was done).
    The files it replaces stay on disk for readers that hold an older snapshot (no vacuum here).
    Cost: reads and writes the table's small files once, O(rows).

    Best-effort: it only rewrites rows already committed, so a compaction that loses its commit
    race to another writer (``CommitFailedError``; not tried again: that writer is busy with the
    table, and a stage unwinding from SIGTERM or Ctrl-C must not wait) or whose I/O still fails
    after :data:`zoorank.tasks.retry.COMMITS` is logged as a warning and returns ``{}``; the stage's
    outcome and exit status stand, and the next compaction tries again.
    """
    def action() -> dict:
        table = _open(loc)
        if table is None or len(table.file_uris()) <= above_files:
            return {}
        out = table.optimize.compact()
        _open(loc).create_checkpoint()
        return out

    try:
        return retry.call(action, policy=retry.COMMITS, on=retry.transient_io)
    except Exception as err:
        if not retry.COMMIT(err):
            raise
        first = (str(err).strip().splitlines() or [""])[0][:300]
        log.warning("compact %r skipped (%s: %s); its rows are committed, the next compaction "
                    "tries again", loc, type(err).__name__, redact(first))
        return {}


def vacuum(loc: TableLocation, older_than_s: float, dry_run: bool = False) -> list[str]:
    """Delete (or with ``dry_run`` list) the data files the table no longer references that were
    removed from it at least ``older_than_s`` seconds ago; returns their paths relative to the
    table. Delta counts whole hours, so the age is rounded up to the next hour (never shorter)."""
    hours = max(0, math.ceil(older_than_s / 3600.0))
    return list(_open(loc).vacuum(retention_hours=hours, dry_run=dry_run,
                                  enforce_retention_duration=False))


def drop(loc: TableLocation, fs, path: str) -> None:
    """Remove a table's directory entirely (``fs``/``path``: the store's filesystem and its path)."""
    import pyarrow.fs as pafs

    if fs.get_file_info(path).type == pafs.FileType.Directory:
        fs.delete_dir(path)
