"""Batched commits keep their promise (issue 32): a finished model's rows are committed within T
seconds while the next task still runs, and a compaction that loses its race to another writer
changes neither the stage's outcome nor its exit status (0, or 143 under SIGTERM). Real local Ray
(the session's), real Delta tables; the rival writer is a real second writer committing between the
compaction's read and its commit."""

from __future__ import annotations

import contextlib
import os
import signal
import subprocess
import sys
import textwrap
import threading
import time
from pathlib import Path

import pytest

from zoorank.store import Store, tables
from zoorank.tasks.runner import Task, run_tasks

REPO = Path(__file__).resolve().parents[2]
KEY = ["model_id"]


def _rows(store: Store) -> dict[str, float]:
    frame = tables.read(store.table("rows"))
    return dict(zip(frame.get("model_id", []), frame.get("value", [])))


def test_flush_due_commits_a_batch_once_its_first_rows_waited_t(tmp_path):
    store = Store(tmp_path / "s")
    now = [0.0]
    with store.batched("rows", KEY, models=100, seconds=10, clock=lambda: now[0]) as out:
        assert out.flush_due() is None  # nothing buffered: no deadline
        out.add([{"model_id": "a", "value": 1.0}])
        now[0] = 4.0
        assert out.flush_due() == pytest.approx(6.0) and _rows(store) == {}
        now[0] = 10.0  # no new result: the wait itself commits the batch
        assert out.flush_due() is None and _rows(store) == {"a": 1.0}
        assert out.commits == 1 and out.due_in() is None


@pytest.mark.timeout(180)
def test_a_finished_models_rows_are_committed_within_t_while_another_task_runs(ray_session,
                                                                              tmp_path):
    T = 1.0
    store = Store(tmp_path / "s")

    def body(i: int, where: str) -> int:
        if i == 1:  # runs until the test has seen model 0's rows committed (at most 60 s)
            deadline = time.monotonic() + 60
            while not Path(where, "release").exists() and time.monotonic() < deadline:
                time.sleep(0.05)
        return i

    seen: dict[str, float | None] = {}

    def watch(since: float) -> None:  # another reader, polling the table
        reader = Store(tmp_path / "s")
        deadline = since + 20
        seen["at"] = None
        while time.monotonic() < deadline:
            if "m0" in _rows(reader):
                seen["at"] = time.monotonic()
                break
            time.sleep(0.05)
        (tmp_path / "release").write_text("1")

    received: dict[int, float] = {}
    watcher = None
    with store.batched("rows", KEY, models=100, seconds=T) as out:
        results = run_tasks(body, [Task(i, (i, str(tmp_path))) for i in range(2)],
                            options={"num_cpus": 0.25}, on_wait=out.flush_due)
        with contextlib.closing(results):
            for outcome in results:
                out.add([{"model_id": f"m{outcome.value}", "value": 1.0}])
                received[outcome.value] = time.monotonic()
                if outcome.value == 0:
                    watcher = threading.Thread(target=watch, args=(received[0],))
                    watcher.start()
    watcher.join()
    assert seen["at"] is not None, "model 0's rows were not committed while model 1 ran"
    # within T of the result (plus one commit on a busy machine), before the slow task returned
    assert seen["at"] - received[0] <= T + 2.0
    assert received[1] > seen["at"]
    assert _rows(store) == {"m0": 1.0, "m1": 1.0}


_LOSING_COMPACTION_DRIVER = """
import os, sys, time
from pathlib import Path
import ray
from deltalake.table import TableOptimizer
from zoorank.tasks.runner import Task, run_tasks
from zoorank.store import Store, tables

where, address, mode = sys.argv[1], sys.argv[2], sys.argv[3]
ray.init(address=address)  # the test session's Ray
KEY = ["model_id"]
store = Store(f"{where}/store")
for i in range(3):  # a table of three small files
    store.upsert_rows("rows", [{"model_id": f"old{i}", "value": 0.0}], key=KEY)
tables.COMPACT_ABOVE_FILES = 1  # every flush compacts

real = TableOptimizer.compact

def losing_compact(self, *args, **kwargs):
    # a rival writer rewrites a row this compaction read, then the compaction commits: it loses
    Store(f"{where}/store").upsert_rows("rows", [{"model_id": "old0", "value": time.time()}],
                                        key=KEY)
    with open(Path(where, "lost"), "a") as f:
        f.write("x")
    return real(self, *args, **kwargs)

TableOptimizer.compact = losing_compact

def body(i, where, mode):
    Path(where, f"{i}.pid").write_text(str(os.getpid()))
    if i == 1 and mode == "sigterm":
        time.sleep(300)
    return i

with store.batched("rows", KEY, models=100, seconds=3600) as out:
    tasks = [Task(i, (i, where, mode)) for i in range(2)]
    for outcome in run_tasks(body, tasks, options={"num_cpus": 0.25}, on_wait=out.flush_due):
        out.add([{"model_id": f"m{outcome.value}", "value": 1.0}])
        Path(where, f"added-{outcome.value}").write_text("1")
store.compact_table("rows")  # the stage's end
Path(where, "finished").write_text("1")
"""


@pytest.mark.slow
@pytest.mark.timeout(240)
@pytest.mark.parametrize(("mode", "status"), [("finish", 0), ("sigterm", 143)])
def test_a_compaction_that_loses_its_race_leaves_the_exit_status(ray_session, tmp_path, mode,
                                                                 status):
    script = tmp_path / "driver.py"
    script.write_text(textwrap.dedent(_LOSING_COMPACTION_DRIVER))
    address = ray_session.get_runtime_context().gcs_address
    env = {**os.environ, "PYTHONPATH": str(REPO)}
    env.pop("RAY_ADDRESS", None)
    proc = subprocess.Popen([sys.executable, str(script), str(tmp_path), address, mode], env=env,
                            stdout=subprocess.PIPE, stderr=subprocess.STDOUT,
                            start_new_session=True)
    try:
        if mode == "sigterm":  # model 0 finished and buffered, model 1 still running
            deadline = time.monotonic() + 150
            while not ((tmp_path / "added-0").exists() and (tmp_path / "1.pid").exists()):
                assert proc.poll() is None and time.monotonic() < deadline, "driver stalled"
                time.sleep(0.1)
            proc.send_signal(signal.SIGTERM)
        out, _ = proc.communicate(timeout=150)
        log = out.decode(errors="replace")
        assert proc.returncode == status, log
        assert (tmp_path / "lost").exists()  # a compaction did lose its race
        assert "skipped (CommitFailedError" in log
        rows = _rows(Store(tmp_path / "store"))
        done = {"m0", "m1"} if mode == "finish" else {"m0"}
        assert set(rows) == {"old0", "old1", "old2"} | done  # every committed row stands
        assert (tmp_path / "finished").exists() == (mode == "finish")
    finally:
        if proc.poll() is None:
            os.killpg(proc.pid, signal.SIGKILL)
