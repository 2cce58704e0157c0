"""Live writers of a store: one row per running embed in the Delta table ``writers``, with a heartbeat.

A long embed leaves files untouched for hours (a view cache decoded at the start, a pending
entry's shard directory filling slowly); a file-age rule alone cannot tell them from what an
interrupted run left behind. So the embed registers itself (:class:`Heartbeat`): writer id, host,
pid, stage, started, heartbeat, and the store-relative ``paths`` it may still write or read (its
entries' shard directories, its datasets' view caches). A thread refreshes ``heartbeat`` every
:data:`HEARTBEAT_SECONDS`; the row is deleted when the writer ends. A writer whose heartbeat is
older than :data:`STALE_SECONDS` (killed, its machine gone) is dead: its row protects nothing and
``zoorank gc`` deletes it.

Cost: one small MERGE commit per writer and heartbeat; :func:`live_paths` reads one small table.
"""

from __future__ import annotations

import json
import logging
import os
import socket
import threading
import time
import uuid
from collections.abc import Iterable, Sequence

import pandas as pd

from zoorank.store.layout import WRITERS

log = logging.getLogger(__name__)

#: how often a live writer refreshes its heartbeat (``ZOORANK_WRITER_HEARTBEAT_SECONDS``).
HEARTBEAT_SECONDS = 30.0
#: a heartbeat older than this is a dead writer (``ZOORANK_WRITER_STALE_SECONDS``): ten missed beats.
STALE_SECONDS = 300.0
KEY = ("writer_id",)
COLUMNS = ("writer_id", "host", "pid", "stage", "started", "heartbeat", "paths")


def _seconds(env: str, default: float) -> float:
    return float(os.environ.get(env, default))


def stale_seconds() -> float:
    return _seconds("ZOORANK_WRITER_STALE_SECONDS", STALE_SECONDS)


class Heartbeat:
    """Register a writer of ``store`` for the ``with`` block; refresh its heartbeat meanwhile.

    ``paths``: the store-relative files or directories the writer needs (anything at, under or
    above one of them is protected from gc). A failed refresh is logged, never raised: the writer's
    work matters more than its row (a missed beat only makes it look dead sooner).
    """

    def __init__(self, store, stage: str, paths: Iterable[str],
                 interval: float | None = None) -> None:
        self.store = store
        self.interval = interval if interval is not None else _seconds(
            "ZOORANK_WRITER_HEARTBEAT_SECONDS", HEARTBEAT_SECONDS)
        now = time.time()
        self.row = {"writer_id": uuid.uuid4().hex, "host": socket.gethostname(),
                    "pid": os.getpid(), "stage": stage, "started": now, "heartbeat": now,
                    "paths": json.dumps(sorted(set(paths)))}
        self._stop = threading.Event()
        self._thread: threading.Thread | None = None

    @property
    def writer_id(self) -> str:
        return self.row["writer_id"]

    def beat(self) -> None:
        self.row["heartbeat"] = time.time()
        self.store.upsert_rows(WRITERS, [self.row], list(KEY))

    def _run(self) -> None:
        while not self._stop.wait(self.interval):
            try:
                self.beat()
            except Exception as err:  # noqa: BLE001 - see the class docstring
                log.warning("writer heartbeat of %s failed: %s", self.store.name, err)

    def __enter__(self) -> Heartbeat:
        self.beat()
        self._thread = threading.Thread(target=self._run, name="zoorank-writer-heartbeat",
                                        daemon=True)
        self._thread.start()
        return self

    def __exit__(self, *exc) -> None:
        self._stop.set()
        if self._thread is not None:
            self._thread.join()
        try:
            self.store.delete_rows(WRITERS, pd.DataFrame([self.row]), list(KEY))
        except Exception as err:  # noqa: BLE001 - a row left behind goes stale, then gc drops it
            log.warning("could not remove writer %s of %s: %s", self.row["writer_id"],
                        self.store.name, err)


def read_writers(store) -> pd.DataFrame:
    """Every registered writer, live or dead (empty frame with :data:`COLUMNS` when none)."""
    return store.read_frame(WRITERS, columns=list(COLUMNS))


def split_live(writers: pd.DataFrame, now: float | None = None,
               stale_s: float | None = None) -> tuple[pd.DataFrame, pd.DataFrame]:
    """(live, dead) writers: live when the heartbeat is younger than ``stale_s``."""
    now = time.time() if now is None else now
    stale_s = stale_seconds() if stale_s is None else stale_s
    fresh = (now - writers["heartbeat"].astype(float)) < stale_s
    return writers[fresh], writers[~fresh]


def live_paths(writers: pd.DataFrame) -> list[str]:
    """The paths the given (live) writers need, sorted."""
    return sorted({p for text in writers["paths"] for p in json.loads(text)})


def needed_by_another(store, relpath: str, writer_id: str) -> bool:
    """Whether a live writer other than ``writer_id`` needs ``relpath`` (or something under or
    above it): a writer about to delete a shared directory leaves it to the last one."""
    writers = read_writers(store)
    if writers.empty:
        return False
    live, _ = split_live(writers)
    others = live[live["writer_id"] != writer_id]
    return not others.empty and protected(relpath, live_paths(others))


def protected(relpath: str, paths: Sequence[str]) -> bool:
    """Whether deleting ``relpath`` (a file or a whole directory) would touch one of ``paths``."""
    rel = relpath.strip("/")
    for p in paths:
        p = p.strip("/")
        if rel == p or p.startswith(rel + "/") or rel.startswith(p + "/"):
            return True
    return False
