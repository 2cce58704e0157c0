"""The task runner on a real local Ray: raising tasks, dead workers, splitting, bounded concurrency,
cancelling. Task bodies are defined inside the tests so Ray ships them by value."""

from __future__ import annotations

import contextlib
import os
import signal
import subprocess
import sys
import textwrap
import time
from pathlib import Path

import pytest

from zoorank.tasks.runner import Outcome, Task, run_tasks

REPO = Path(__file__).resolve().parents[2]


def _by_key(outcomes: list[Outcome]) -> dict:
    return {o.task.key: o for o in outcomes}


def _pid_alive(pid: int) -> bool:
    try:
        os.kill(pid, 0)
    except ProcessLookupError:
        return False
    # a zombie is dead too (a child of its raylet that has not been reaped yet)
    with contextlib.suppress(OSError):
        if Path(f"/proc/{pid}/stat").read_text().split()[2] == "Z":
            return False
    return True


def _wait_dead(pids: list[int], timeout: float) -> list[int]:
    deadline = time.monotonic() + timeout
    alive = list(pids)
    while alive and time.monotonic() < deadline:
        time.sleep(0.2)
        alive = [p for p in alive if _pid_alive(p)]
    return alive


@pytest.mark.timeout(120)
def test_a_raising_task_fails_with_its_own_error_and_the_others_finish(ray_session):
    def body(i: int) -> int:
        if i == 2:
            raise ValueError(f"model {i} gives NaN")
        return i * i

    out = _by_key(list(run_tasks(body, [Task(i, (i,)) for i in range(4)],
                                 options={"num_cpus": 0.25}, reruns=3)))
    assert {k: o.value for k, o in out.items() if o.ok} == {0: 0, 1: 1, 3: 9}
    assert out[2].status == "failed"
    assert out[2].error == "ValueError: model 2 gives NaN"
    assert out[2].attempts == 1  # an exception is deterministic: never retried


@pytest.mark.timeout(180)
def test_a_task_whose_worker_dies_is_retried_then_recorded_crashed(ray_session):
    def body(i: int) -> int:
        if i == 1:
            os.kill(os.getpid(), signal.SIGKILL)
        return i

    out = _by_key(list(run_tasks(body, [Task(i, (i,)) for i in range(3)],
                                 options={"num_cpus": 0.25}, reruns=1)))
    assert out[0].value == 0 and out[2].value == 2
    assert out[1].status == "crashed"
    assert out[1].error.startswith("worker died (WorkerCrashedError")
    assert out[1].attempts == 2  # the first run and one retry


@pytest.mark.timeout(180)
def test_a_dead_chunk_is_split_so_only_the_culprit_is_crashed(ray_session):
    def body(models: list[str]) -> list[str]:
        if "killer" in models:
            os.kill(os.getpid(), signal.SIGKILL)
        return [m.upper() for m in models]

    def chunk_task(models: list[str]) -> Task:
        return Task(tuple(models), (models,),
                    split=lambda: [chunk_task([m]) for m in models] if len(models) > 1 else [])

    chunk = ["a", "killer", "b"]
    (outcome,) = run_tasks(body, [chunk_task(chunk)], options={"num_cpus": 0.25}, reruns=1)
    assert outcome.status == "split"
    assert outcome.error.startswith("worker died")
    parts = _by_key(outcome.parts)
    assert set(parts) == {("a",), ("killer",), ("b",)}
    assert parts[("a",)].value == ["A"] and parts[("b",)].value == ["B"]
    assert parts[("killer",)].status == "crashed"
    assert parts[("killer",)].attempts == 1  # the split was its retry
    assert outcome.leaves() == outcome.parts


@pytest.mark.timeout(180)
def test_no_more_than_max_in_flight_tasks_run_at_once(ray_session):
    def body(i: int) -> tuple[float, float]:
        start = time.time()
        time.sleep(0.5)
        return start, time.time()

    # Ray alone would run all six at once (0.1 CPU each); the runner holds them to two
    out = list(run_tasks(body, [Task(i, (i,)) for i in range(6)], options={"num_cpus": 0.1},
                         max_in_flight=2))
    spans = [o.value for o in out]
    assert len(spans) == 6 and all(o.ok for o in out)
    most = max(sum(1 for s, e in spans if s <= t < e) for t, _ in spans)
    assert most <= 2


@pytest.mark.timeout(300)
def test_leaving_the_loop_cancels_the_tasks_still_running(ray_session, tmp_path):
    def body(i: int, where: str) -> int:
        Path(where, f"{i}.pid").write_text(str(os.getpid()))
        time.sleep(0 if i == 0 else 300)
        return i

    tasks = [Task(i, (i, str(tmp_path))) for i in range(3)]
    results = run_tasks(body, tasks, options={"num_cpus": 0.25})
    with pytest.raises(RuntimeError, match="the caller failed"), contextlib.closing(results):
        for outcome in results:
            assert outcome.task.key == 0
            deadline = time.monotonic() + 150
            while len(list(tmp_path.glob("*.pid"))) < 3 and time.monotonic() < deadline:
                time.sleep(0.2)
            raise RuntimeError("the caller failed")
    pids = [int(p.read_text()) for p in tmp_path.glob("*.pid") if p.stem != "0"]
    assert len(pids) == 2
    assert _wait_dead(pids, 30) == []


_SIGTERM_DRIVER = """
import os, sys, time
from pathlib import Path
import ray
from zoorank.tasks.runner import Task, run_tasks
ray.init(address=sys.argv[2])  # the test session's Ray: a driver of its own, no Ray to start
where = sys.argv[1]

def body(i):
    Path(where, f"{i}.pid").write_text(str(os.getpid()))
    time.sleep(300)

try:
    for _ in run_tasks(body, [Task(i, (i,)) for i in range(2)], options={"num_cpus": 0.25}):
        pass
except BaseException as err:
    Path(where, "unwound").write_text(type(err).__name__)
    raise
"""


@pytest.mark.timeout(240)
@pytest.mark.parametrize(("signum", "raised"), [(signal.SIGTERM, "SystemExit"),
                                               (signal.SIGINT, "KeyboardInterrupt")])
def test_sigterm_and_ctrl_c_cancel_the_tasks_in_flight_then_unwind(ray_session, tmp_path, signum,
                                                                   raised):
    """The driver is a process of its own (the signal ends it) joined to the session's Ray."""
    script = tmp_path / "driver.py"
    script.write_text(textwrap.dedent(_SIGTERM_DRIVER))
    address = ray_session.get_runtime_context().gcs_address
    env = {**os.environ, "PYTHONPATH": str(REPO)}
    env.pop("RAY_ADDRESS", None)
    proc = subprocess.Popen([sys.executable, str(script), str(tmp_path), address], env=env,
                            start_new_session=True)
    try:
        deadline = time.monotonic() + 150
        while len(list(tmp_path.glob("*.pid"))) < 2 and time.monotonic() < deadline:
            assert proc.poll() is None, "the driver exited before its tasks started"
            time.sleep(0.1)
        pids = [int(p.read_text()) for p in tmp_path.glob("*.pid")]
        assert len(pids) == 2
        proc.send_signal(signum)
        rc = proc.wait(timeout=90)
        assert (tmp_path / "unwound").read_text() == raised
        if signum == signal.SIGTERM:
            assert rc == 143
        assert _wait_dead(pids, 30) == []
    finally:
        if proc.poll() is None:
            os.killpg(proc.pid, signal.SIGKILL)


def test_dead_workers_are_crashes_and_exceptions_are_failures_even_when_ray_wraps_them():
    import ray.exceptions as rex

    from zoorank.tasks.runner import classify

    assert classify(rex.WorkerCrashedError())[0] == "crashed"
    assert classify(rex.NodeDiedError("node 1 died"))[0] == "crashed"
    assert classify(rex.ActorDiedError())[0] == "crashed"
    status, reason = classify(rex.RayTaskError("f", "tb", rex.WorkerCrashedError()))
    assert status == "crashed" and reason.startswith("worker died (WorkerCrashedError")
    status, reason = classify(rex.RayTaskError("f", "tb", KeyError("conv1.weight")))
    assert (status, reason) == ("failed", "KeyError: 'conv1.weight'")
    assert classify(rex.TaskUnschedulableError("no GPU node"))[0] == "failed"
