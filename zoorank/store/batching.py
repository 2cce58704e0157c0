"""Rows committed in batches: one Delta commit per K models or T seconds, whichever comes first.

A stage that commits per model pays a commit (a log listing, a snapshot read, a data file, a
commit file: a dozen requests or more on an object store) per model, about 22 ms each on local
disk, and leaves one small data file and one log file per model. :class:`BatchedRows` buffers the
rows of finished tasks and commits them together:

- :data:`BATCH_MODELS` (K = 32): a 32-model commit of 25 metric rows each costs 37–51 ms locally
  against 22–33 ms for one model (``benchmarks/performance/bench_commits.py``, figures in
  ``benchmarks/results/bench_scale.md``), so the commit cost per model falls 15–20×, and a
  1,000-model table gets ~32 files before compaction instead of 1,000;
- :data:`BATCH_SECONDS` (T = 10 s): a finished task's rows wait at most this long. The batch's age
  is checked when a result is added and, while the stage waits for the next result, by the task
  runner (:func:`zoorank.tasks.runner.run_tasks` calls :meth:`BatchedRows.flush_due` before each wait
  and waits no longer than the batch has left), so a finished model's rows are committed within T
  (plus one commit) even while the next task is still running.

**What a killed run loses** (SIGKILL, a lost driver): the buffered rows only, i.e. at most K models,
all of them finished less than T seconds (plus one commit) before the kill. A stopped run (an
exception, SIGINT, SIGTERM) loses nothing: leaving the ``with`` block commits the buffer. Rows
already committed are never lost, and the next run recomputes only the rows that are missing (the
freshness rule), so the lost work is bounded by about T seconds of finished models plus the
models still running.

When the table holds more than :data:`zoorank.store.tables.COMPACT_ABOVE_FILES` data files after
a commit, it is compacted on the spot; the stage compacts and checkpoints it again at its end
(:meth:`zoorank.store.Store.compact_table`). Compaction is best-effort
(:func:`zoorank.store.tables.compact`): one that loses its race to another writer is logged and
skipped, and the stage's outcome stands.
"""

from __future__ import annotations

import time
from collections.abc import Callable, Iterable, Sequence
from typing import Any

import pandas as pd

#: models (tasks) per commit (K).
BATCH_MODELS = 32
#: seconds a finished task's rows wait at most for the next result before they are committed (T).
BATCH_SECONDS = 10.0


class BatchedRows:
    """Buffers the rows of finished tasks of one table and upserts them in batches (module note).

    ``write(frame)`` commits one batch (default: ``store.upsert_rows(name, frame, key)``);
    ``clock`` is injectable for tests. Use as a context manager: leaving the block commits what is
    buffered, also when the block raises. Cost: one commit per ⌈n / K⌉ tasks (or per T seconds).
    """

    def __init__(self, store: Any, name: str, key: Sequence[str], *,
                 models: int = BATCH_MODELS, seconds: float = BATCH_SECONDS,
                 write: Callable[[pd.DataFrame], None] | None = None,
                 clock: Callable[[], float] = time.monotonic) -> None:
        if models < 1 or seconds < 0:
            raise ValueError("a batch needs models >= 1 and seconds >= 0")
        self.store, self.name, self.key = store, name, list(key)
        self.models, self.seconds, self.clock = models, seconds, clock
        self._write = write or (lambda frame: store.upsert_rows(name, frame, key=self.key))
        self._rows: list[dict] = []
        self._tasks = 0
        self._since: float | None = None
        self.commits = 0

    def add(self, rows: Iterable[dict], tasks: int = 1) -> None:
        """One finished task's rows (one model, or one ensemble; ``tasks``: how many models they
        hold, for a task over several); commits when the batch holds K models or its first rows
        have waited T seconds."""
        self._rows.extend(rows)
        self._tasks += tasks
        now = self.clock()
        if self._since is None:
            self._since = now
        if self._tasks >= self.models or now - self._since >= self.seconds:
            self.flush()

    def due_in(self) -> float | None:
        """Seconds until the buffered rows have waited T (≤ 0: due now); None when none are."""
        if self._since is None:
            return None
        return self.seconds - (self.clock() - self._since)

    def flush_due(self) -> float | None:
        """Commit the buffer when its first rows have waited T seconds (called while the stage
        waits for results); returns the seconds until it is next due (None when empty)."""
        left = self.due_in()
        if left is not None and left <= 0:
            self.flush()
            return None
        return left

    def flush(self) -> None:
        """Commit the buffered rows (one commit; nothing when empty)."""
        rows, self._rows, self._tasks, self._since = self._rows, [], 0, None
        if not rows:
            return
        frame = pd.DataFrame(rows)
        # a later task's row for the same key (a retry) wins, as it would have per commit
        self._write(frame.drop_duplicates(subset=self.key, keep="last"))
        self.commits += 1
        self.store.compact_table(self.name, only_above=True)

    def __enter__(self) -> BatchedRows:
        return self

    def __exit__(self, *exc: object) -> None:
        self.flush()


def superseding(store: Any, name: str, key: Sequence[str], existing: pd.DataFrame,
                owner: Sequence[str], fingerprint: str = "fingerprint") -> Callable[[pd.DataFrame], None]:
    """A ``write`` for :class:`BatchedRows` whose batch supersedes older rows of the same owners.

    Each batch is upserted on ``key``, so a commit reads only the files whose key ranges overlap
    the batch. A row of ``existing`` (the table as read before the stage ran) of an ``owner`` group
    the batch wrote (e.g. a (model_id, dataset)) that the batch did not replace (another spec's
    metric) carries another ``fingerprint``: readers already skip it, and it is deleted, by owner
    and fingerprint, in a second commit right after the batch's.
    """
    owner = list(owner)

    def write(frame: pd.DataFrame) -> None:
        store.upsert_rows(name, frame, key=list(key))
        if existing.empty:
            return
        fresh = frame[[*owner, fingerprint]].drop_duplicates()
        old = existing.merge(fresh, on=owner, suffixes=("", "_new"))
        stale = old[old[fingerprint] != old[f"{fingerprint}_new"]]
        if not stale.empty:
            store.delete_rows(name, stale, [*owner, fingerprint])

    return write
