"""The files under a store's root on any ``pyarrow.fs`` filesystem (local or object storage):
paths and URIs, listing, whole-file atomic writes (redacted: :mod:`zoorank.store.redact`), reads
and deletes. :class:`zoorank.store.Store` puts zoorank's tables and shards on top of it.
"""

from __future__ import annotations

import json
import os
import uuid
from pathlib import Path

import pyarrow.fs as pafs

from zoorank.store import uris


class StoreFiles:
    """The files under one store URI (its filesystem and root)."""

    def __init__(self, uri: str | os.PathLike[str], filesystem: pafs.FileSystem | None = None):
        uri = str(uri)
        self.uri = uri
        if filesystem is not None:
            self.fs, self.root = filesystem, uri.rstrip("/")
        else:
            self.fs, self.root = uris.resolve(uri)
            self.root = self.root.rstrip("/")
        self.is_local = isinstance(self.fs, pafs.LocalFileSystem)
        if self.is_local:  # an object store has no directories: a marker costs 2 requests a Store
            self.fs.create_dir(self.root, recursive=True)

    def __repr__(self) -> str:
        return f"{type(self).__name__}({self.name!r})"

    @property
    def name(self) -> str:
        """The store's URI with any credentials removed: what messages and reports show."""
        return uris.redact(self.uri)

    # -- paths and raw I/O ---------------------------------------------------------------------
    def path(self, *parts: str) -> str:
        return "/".join([self.root, *[str(p).strip("/") for p in parts if p != ""]])

    def uri_of(self, *parts: str) -> str:
        """A full URI (or local path) of a location in the store, for tools outside pyarrow.fs
        (Ray Tune's storage); it carries the store URI's credentials and options."""
        if self.is_local:
            return self.path(*parts)
        return uris.child(self.uri, "/".join(str(p).strip("/") for p in parts if p != ""))

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
        infos = self.fs.get_file_info(pafs.FileSelector(base, recursive=False,
                                                        allow_not_found=True))
        return sorted(
            i.base_name
            for i in infos
            if i.type == pafs.FileType.File and i.base_name.endswith(suffix)
            and not i.base_name.startswith(".")
        )

    def modified_within(self, relpath: str, seconds: float) -> bool:
        """Whether any file at or under ``relpath`` was written in the last ``seconds`` (a
        concurrent writer may still be filling it; gc leaves such files alone)."""
        import time

        if seconds <= 0:
            return False
        base = self.path(relpath)
        info = self.fs.get_file_info(base)
        if info.type == pafs.FileType.NotFound:
            return False
        infos = [info] if info.type == pafs.FileType.File else self.fs.get_file_info(
            pafs.FileSelector(base, recursive=True))
        now_ns = time.time_ns()
        return any(i.type == pafs.FileType.File and i.mtime_ns is not None
                   and now_ns - i.mtime_ns < seconds * 1e9 for i in infos)

    def list_dirs(self, *parts: str) -> list[str]:
        base = self.path(*parts)
        # allow_not_found: a directory another process deletes after the look lists empty
        infos = self.fs.get_file_info(pafs.FileSelector(base, recursive=False,
                                                        allow_not_found=True))
        return sorted(i.base_name for i in infos if i.type == pafs.FileType.Directory)

    def write_bytes(self, relpath: str, data: bytes, redacted: bool = False) -> None:
        """Write a whole file atomically (temp name + rename locally; one PUT on object stores).

        Text files and Parquet files are redacted first (zoorank.store.redact: no secret is written),
        unless the caller did (``redacted``: e.g. a report page whose inlined plotly.js the
        redactor would mangle)."""
        from zoorank.store.redact import redact_file

        data = data if redacted else redact_file(relpath, data)
        final = self.path(relpath)
        parent = final.rsplit("/", 1)[0]
        if self.is_local:
            self.fs.create_dir(parent, recursive=True)
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

    def delete(self, relpath: str) -> None:
        """Delete a file or a whole directory; nothing when it is gone (another process may
        have deleted it between the look and the delete)."""
        p = self.path(relpath)
        info = self.fs.get_file_info(p)
        try:
            if info.type == pafs.FileType.Directory:
                self.fs.delete_dir(p)
            elif info.type == pafs.FileType.File:
                self.fs.delete_file(p)
        except FileNotFoundError:
            pass
