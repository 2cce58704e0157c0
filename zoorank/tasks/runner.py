"""One task runner for all of zoorank's Ray work: embed slices, score tasks, the label oracle and
Tune's export run through :func:`run_tasks`, so every stage fails the same way.

The failure contract (ARCHITECTURE.md, contract 6), per submitted :class:`Task`:

* ``done``: the task returned; :attr:`Outcome.value` is its value.
* ``failed``: the task raised. The error is deterministic (a bad checkpoint, a bug in a user's
  model), so it is not retried; :attr:`Outcome.error` is the task's own exception, one line.
* ``crashed``: the task's worker died (OOM killer, a segfault or ``os.kill`` inside a user's model,
  a lost node: :data:`DEAD_WORKER` errors, also when Ray wraps them in a ``RayTaskError``).
  :attr:`Outcome.error` starts with ``worker died``. A task with a :attr:`Task.split` is split
  once into smaller tasks that run apart (an embed chunk: one task per model), so one culprit does
  not take healthy work with it; the outcome is then ``split`` and :attr:`Outcome.parts` holds the
  parts' outcomes. A task without one is run again up to ``reruns`` times first (every zoorank task is
  idempotent: a retried embed slice rewrites the same file names with the same rows, the others
  only return values), since a node loss is not the task's fault.

The caller records what is not ``done`` (manifest rows ``failed``, metric rows ``crashed``) and
goes on; the next run tries it again, because only ``done`` work is skipped.

At most ``max_in_flight`` tasks are submitted at once (the rest wait here, not in Ray's queue, so
the stage's thread counts hold). Ctrl-C, and SIGTERM (turned into ``SystemExit(143)`` while tasks
run), cancel every task in flight (``ray.cancel(force=True)`` ends their workers)
before the exception goes on. A progress bar shows on stderr when the console takes bars
(:func:`zoorank.console.progress_enabled`: stdout and stderr a terminal, ``ZOORANK_PROGRESS`` not
``0``).
"""

from __future__ import annotations

import signal
import threading
from collections import deque
from collections.abc import Callable, Iterable, Iterator, Sequence
from dataclasses import dataclass, field
from typing import Any, Literal

from zoorank.console import progress_enabled

#: names of the ``ray.exceptions`` that mean the worker (or its node) is gone, not that the task
#: raised. Resolved lazily: importing this module does not import Ray.
DEAD_WORKER_NAMES = (
    "WorkerCrashedError",  # the worker process exited (SIGKILL, segfault, os._exit)
    "RayActorError",  # ActorDiedError, ActorUnavailableError
    "NodeDiedError",
    "LocalRayletDiedError",
    "OutOfMemoryError",  # Ray's memory monitor killed it
    "ObjectLostError",  # the return value died with its node (OwnerDiedError, ...)
)
#: seconds each ``ray.wait`` blocks, so Ctrl-C is seen promptly.
WAIT_S = 0.5

Status = Literal["done", "failed", "crashed", "split"]


@dataclass
class Task:
    """One unit of Ray work: ``fn(*args, **kwargs)`` with per-task Ray ``options``.

    ``split`` (optional) returns smaller tasks that together do this task's work, to run apart
    when this task's worker dies (see the module docstring); it is used once, never recursively.
    """

    key: Any
    args: tuple = ()
    kwargs: dict[str, Any] = field(default_factory=dict)
    options: dict[str, Any] = field(default_factory=dict)
    split: Callable[[], Sequence[Task]] | None = None


@dataclass
class Outcome:
    """What became of one task (one per task given to :func:`run_tasks`, in completion order)."""

    task: Task
    status: Status
    value: Any = None
    error: str | None = None
    attempts: int = 1
    parts: list[Outcome] = field(default_factory=list)  #: for ``split``: the parts' outcomes

    @property
    def ok(self) -> bool:
        return self.status == "done"

    def leaves(self) -> list[Outcome]:
        """This outcome, or its parts' when it was split."""
        return self.parts if self.status == "split" else [self]


def _dead_worker_types() -> tuple[type, ...]:
    import ray.exceptions as rex

    return tuple(t for t in (getattr(rex, n, None) for n in DEAD_WORKER_NAMES) if t is not None)


def _first_line(err: BaseException) -> str:
    lines = [x for x in str(err).strip().splitlines() if x.strip()]
    return lines[0].strip() if lines else ""


def classify(err: BaseException) -> tuple[Literal["failed", "crashed"], str]:
    """(``failed`` or ``crashed``, a one-line reason) of an exception from ``ray.get``."""
    import ray.exceptions as rex

    dead = _dead_worker_types()
    cause: BaseException = err
    if isinstance(err, rex.RayTaskError):
        # the task's own exception, without Ray's wrapper (pid, address, remote traceback)
        cause = err.cause if err.cause is not None else err
    if isinstance(cause, dead) and not isinstance(cause, rex.RayTaskError):
        return "crashed", f"worker died ({type(cause).__name__}: {_first_line(cause)})"[:500]
    return "failed", f"{type(cause).__name__}: {_first_line(cause)}"[:500]


@dataclass
class _Node:
    task: Task
    parent: _Node | None = None
    attempts: int = 0
    left: int = 0  # parts still running (a split task)
    outcome: Outcome | None = None


class _Progress:
    """A rich bar of tasks done (stderr), only where :func:`~zoorank.console.progress_enabled`."""

    def __init__(self, label: str | None, total: int) -> None:
        self.progress = None
        if label is None or not progress_enabled():
            return
        from rich.console import Console
        from rich.progress import BarColumn, MofNCompleteColumn, Progress, TimeElapsedColumn

        self.progress = Progress("[progress.description]{task.description}", BarColumn(),
                                 MofNCompleteColumn(), TimeElapsedColumn(),
                                 console=Console(stderr=True), transient=True)
        self.progress.start()
        self.bar = self.progress.add_task(label, total=total)

    def advance(self) -> None:
        if self.progress is not None:
            self.progress.advance(self.bar)

    def close(self) -> None:
        if self.progress is not None:
            self.progress.stop()


class _Signals:
    """Ctrl-C and SIGTERM while tasks run, noted by handlers and raised by the wait loop.

    A handler that raises inside ``ray.wait`` comes out as Ray's ``SystemExit(1)``, so the
    handlers only note the signal; :meth:`check` raises ``KeyboardInterrupt`` (Ctrl-C) or
    ``SystemExit(143)`` (SIGTERM, which Ray's own driver handler would end without unwinding).
    Outside the main thread nothing is trapped.
    """

    def __init__(self) -> None:
        self.received: int | None = None
        self.previous: dict[int, Any] = {}
        if threading.current_thread() is not threading.main_thread():
            return
        for signum in (signal.SIGINT, signal.SIGTERM):
            self.previous[signum] = signal.getsignal(signum)
            signal.signal(signum, self._note)

    def _note(self, signum: int, frame: Any) -> None:
        self.received = signum

    def check(self) -> None:
        if self.received == signal.SIGINT:
            raise KeyboardInterrupt
        if self.received is not None:
            raise SystemExit(128 + self.received)

    def restore(self) -> None:
        for signum, handler in self.previous.items():
            signal.signal(signum, handler)
        self.previous = {}


def run_tasks(
    fn: Any,
    tasks: Iterable[Task],
    *,
    options: dict[str, Any] | None = None,
    max_in_flight: int | None = None,
    reruns: int = 1,
    label: str | None = None,
    on_wait: Callable[[], float | None] | None = None,
) -> Iterator[Outcome]:
    """Run ``fn`` (a plain function or a ``ray.remote`` one) on every task; yield their outcomes.

    ``options`` are Ray options for every task (``num_cpus``, ``num_gpus``, ...), overridden by a
    task's own. Ray's own task re-execution is off (``max_retries=0``): this runner decides, by the
    contract above. ``max_in_flight`` (default: all) bounds the tasks submitted at once;
    ``reruns`` is how often an unsplittable task whose worker died is run again; ``label`` names
    the progress bar (none without it). ``on_wait`` is called before each wait for results (in
    the driver's thread, e.g. :meth:`zoorank.store.batching.BatchedRows.flush_due`, which commits
    a batch that is due); it returns the seconds until it wants to be called again (None: no
    deadline), and the wait is no longer than that. Use it under ``contextlib.closing`` (or
    exhaust it): leaving the loop early, or an exception in the caller's loop, cancels what is
    still running.
    """
    import ray

    remote = fn if hasattr(fn, "remote") else ray.remote(fn)
    remote = remote.options(max_retries=0, retry_exceptions=False, **(options or {}))
    queue: deque[_Node] = deque(_Node(t) for t in tasks)
    limit = max(1, max_in_flight or len(queue) or 1)
    in_flight: dict[Any, _Node] = {}
    progress = _Progress(label, len(queue))
    signals = _Signals()

    def submit(node: _Node) -> None:
        node.attempts += 1
        t = node.task
        handle = remote.options(**t.options) if t.options else remote
        in_flight[handle.remote(*t.args, **t.kwargs)] = node

    try:
        while queue or in_flight:
            while queue and len(in_flight) < limit:
                submit(queue.popleft())
            due = on_wait() if on_wait is not None else None
            timeout = WAIT_S if due is None else min(WAIT_S, max(0.0, due))
            ready, _ = ray.wait(list(in_flight), num_returns=1, timeout=timeout)
            signals.check()
            if not ready:
                continue
            node = in_flight.pop(ready[0])
            try:
                outcome = Outcome(node.task, "done", ray.get(ready[0]), attempts=node.attempts)
            except Exception as err:  # a task's failure is its models' failure, not the run's
                status, reason = classify(err)
                if status == "crashed" and node.parent is None and node.task.split is not None:
                    parts = [_Node(t, parent=node) for t in node.task.split()]
                    if len(parts) > 1:
                        node.left = len(parts)
                        node.outcome = Outcome(node.task, "split", error=reason,
                                               attempts=node.attempts)
                        queue.extendleft(reversed(parts))  # first: they finish their chunk
                        continue
                if status == "crashed" and node.parent is None and node.attempts <= reruns:
                    queue.appendleft(node)
                    continue
                outcome = Outcome(node.task, status, error=reason, attempts=node.attempts)
            parent = node.parent
            if parent is None:
                progress.advance()
                yield outcome
                continue
            assert parent.outcome is not None
            parent.outcome.parts.append(outcome)
            parent.left -= 1
            if parent.left == 0:
                progress.advance()
                yield parent.outcome
        signals.check()  # a signal noted while the caller handled the last outcome
    except BaseException:
        cancel(list(in_flight))
        raise
    finally:
        signals.restore()
        progress.close()


def cancel(refs: Sequence[Any]) -> None:
    """Cancel tasks in flight, ending their workers; never raises (it runs while unwinding)."""
    import ray

    for ref in refs:
        try:
            ray.cancel(ref, force=True)
        except Exception:  # already finished, or Ray is going down
            pass


def crash_reason(outcome: Outcome) -> str:
    """``outcome``'s reason, prefixed ``crashed:`` when its worker died (manifest rows)."""
    if outcome.status == "crashed":
        return f"crashed: {outcome.error}"
    return str(outcome.error)
