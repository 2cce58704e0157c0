"""The one harness every benchmark writes its figures through (issue 33 item 4).

What every benchmark shares, nothing else:

* **where and when**: :func:`commit`, :func:`machine` (cores, memory, CPU model, GPU) and
  :func:`load` (1-minute load average), gathered by :func:`header` into a results file's preamble;
* **the results file**: :func:`write_results` writes ``header + body`` (``results/<name>.md`` by
  default), so every file names its commit, date, machine and load; :func:`results_option` adds
  the ``--markdown PATH`` flag that points it elsewhere, :func:`options` builds simple flag sets;
* **timing as a ratio**: :func:`timed` (best wall seconds of ``repeat`` calls) and :func:`ratio`
  (a figure against a baseline measured in the same run, as one printed line);
* **peak memory, one way**: ``ru_maxrss`` from ``getrusage``/``wait4``. :func:`peak_rss` is this
  process's lifetime peak. The peak of one section is that of a fresh child process that runs only
  it (:func:`run_child`: wall, CPU seconds and peak RSS of that child, exact, from ``wait4``; a
  child that must build its inputs first prints ``peak_rss()`` after the section minus before).
  Not a forked child: BLAS/OpenMP thread pools may hang there;
* **the markdown table**: :func:`table` (rows of cells) and :func:`frame_table` (a DataFrame);
  :class:`Report` keeps the lines it prints for the results file.

Usage::

    from harness import ratio, run_child, table, timed, write_results

    base, t0 = timed(baseline_fn)
    out, t1 = timed(product_fn, repeat=3)
    print(ratio("rank 1000 models", t1, "rank 100 models", t0))
    write_results("bench_x", "bench_x — what it measures", table(["n", "s"], [[1000, f"{t1:.2f}"]]))

Scripts live in groups (``performance/``, ``science/``, ``zoos/``) and run as
``python benchmarks/<group>/<script>.py``. Each one finds the harness the same way, with one line
before ``import harness`` (no package, nothing to install)::

    sys.path.insert(0, str(Path(__file__).resolve().parents[1]))  # benchmarks/: the harness

Importing the harness then puts every group folder on ``sys.path`` (a script imports a module of
another group by name: ``import shift_zoo``) and on ``PYTHONPATH`` (child processes and the Ray
workers a script starts find them too: a config's python model ``uva_models:resnet``).
"""

from __future__ import annotations

import dataclasses
import datetime
import os
import platform
import resource
import shlex
import subprocess
import sys
import tempfile
import threading
import time
from collections.abc import Callable, Mapping, Sequence
from pathlib import Path
from typing import Any

REPO = Path(__file__).resolve().parents[1]
RESULTS = REPO / "benchmarks" / "results"
MB = 1 << 20
#: the folders benchmark scripts live in, by what they measure
GROUPS = tuple(REPO / "benchmarks" / g for g in ("performance", "science", "zoos"))


def _put_groups_on_path() -> None:
    """Every group folder on ``sys.path`` and ``PYTHONPATH`` (appended: a script's own folder and a
    ``PYTHONPATH`` given on the command line, e.g. another checkout's ``zoorank``, come first)."""
    for folder in map(str, GROUPS):
        if folder not in sys.path:
            sys.path.append(folder)
    given = [p for p in os.environ.get("PYTHONPATH", "").split(os.pathsep) if p]
    os.environ["PYTHONPATH"] = os.pathsep.join(given + [str(g) for g in GROUPS if str(g) not in given])


_put_groups_on_path()


def commit() -> str:
    """The short commit of the checkout (``unknown`` outside git)."""
    try:
        return subprocess.run(["git", "rev-parse", "--short", "HEAD"], cwd=REPO, text=True,
                              capture_output=True, check=True).stdout.strip()
    except (OSError, subprocess.CalledProcessError):
        return "unknown"


def load() -> float:
    """The 1-minute load average (the development machines are shared: read figures beside it)."""
    return os.getloadavg()[0]


def machine() -> dict[str, Any]:
    """cores, memory (GiB), CPU model, GPU names ('none'), Python version."""
    cpu = platform.processor() or "unknown CPU"
    memory = 0.0
    try:
        for line in Path("/proc/cpuinfo").read_text().splitlines():
            if line.startswith("model name"):
                cpu = line.split(":", 1)[1].strip()
                break
        memory = os.sysconf("SC_PAGE_SIZE") * os.sysconf("SC_PHYS_PAGES") / (1 << 30)
    except (OSError, ValueError):
        pass
    gpu = "none"
    if "torch" in sys.modules:  # never import torch just to ask (seconds of start-up)
        torch = sys.modules["torch"]
        if torch.cuda.is_available():
            gpu = ", ".join(torch.cuda.get_device_name(i) for i in range(torch.cuda.device_count()))
    return {"cores": os.cpu_count(), "memory_gb": round(memory, 1), "cpu": cpu, "gpu": gpu,
            "python": platform.python_version()}


def command_line() -> str:
    """This process's command line, with the interpreter relative to the cwd where it is inside."""
    python = os.path.relpath(sys.executable)
    return shlex.join([python if not python.startswith("..") else sys.executable, *sys.argv])


def header(title: str, command: str | None = None) -> str:
    """A results file's preamble: title, commit, UTC date, machine, load average, command."""
    m = machine()
    date = datetime.datetime.now(datetime.timezone.utc).strftime("%Y-%m-%d %H:%M UTC")
    lines = [f"# {title}", "",
             f"Commit `{commit()}`, {date}; {m['cores']} cores, {m['memory_gb']:g} GiB, {m['cpu']}, "
             f"GPU {m['gpu']}, Python {m['python']}; load average {load():.1f} at the end (the "
             "machine may be shared: read ratios, measured within one run).", "",
             "```", command or command_line(), "```"]
    return "\n".join(lines)


def results_option(parser: Any, name: str) -> None:
    """Add ``--markdown PATH`` to an argparse parser: the results file, ``results/<name>.md`` by
    default (point it elsewhere for a trial run that should not replace the recorded figures)."""
    parser.add_argument("--markdown", type=Path, default=RESULTS / f"{name}.md",
                        help="the results file to write (default: %(default)s)")


def options(doc: str, name: str, argv: Sequence[str] | None = None, **defaults: Any) -> Any:
    """Parse ``--<option>`` flags whose defaults (and so types) are ``defaults`` (``per_sample=4``
    is ``--per-sample INT``; a bool default is a switch), plus :func:`results_option`'s
    ``--markdown``; the description is ``doc``'s first line. For scripts whose flags need no help."""
    import argparse

    parser = argparse.ArgumentParser(description=doc.strip().splitlines()[0])
    for key, default in defaults.items():
        flag = "--" + key.replace("_", "-")
        if isinstance(default, bool):
            parser.add_argument(flag, action="store_true", default=default)
        else:
            parser.add_argument(flag, type=type(default), default=default,
                                help="(default: %(default)s)")
    results_option(parser, name)
    return parser.parse_args(argv)


def write_results(name: str | Path, title: str, body: str, command: str | None = None) -> Path:
    """Write ``header(title) + body`` to ``results/<name>.md`` (a str) or to ``name`` (a Path)."""
    path = name if isinstance(name, Path) else RESULTS / f"{name}.md"
    path.parent.mkdir(parents=True, exist_ok=True)
    path.write_text(f"{header(title, command)}\n\n{body.strip()}\n")
    print(f"results: {path}")
    return path


def timed(fn: Callable[..., Any], *args: Any, repeat: int = 1, **kwargs: Any) -> tuple[Any, float]:
    """(the last call's result, the best wall seconds of ``repeat`` calls)."""
    best, result = float("inf"), None
    for _ in range(repeat):
        start = time.perf_counter()
        result = fn(*args, **kwargs)
        best = min(best, time.perf_counter() - start)
    return result, best


def ratio(name: str, seconds: float, baseline: str, baseline_seconds: float) -> str:
    """One line: a figure against its baseline measured in the same run (ratio = figure / baseline)."""
    r = seconds / baseline_seconds if baseline_seconds > 0 else float("nan")
    return f"{name} {seconds:.3g} s vs {baseline} {baseline_seconds:.3g} s: ratio {r:.2f}"


def peak_rss() -> int:
    """This process's peak resident set size so far, bytes (``ru_maxrss``; Linux reports KiB)."""
    return resource.getrusage(resource.RUSAGE_SELF).ru_maxrss * 1024


@dataclasses.dataclass(frozen=True)
class Child:
    """One finished child process: its output (stdout then stderr), exit code and exact usage."""

    output: str
    returncode: int
    seconds: float  # wall
    cpu: float  # user + system seconds of the child itself
    peak_rss: int  # bytes, ru_maxrss of the child alone


def run_child(cmd: Sequence[str], env: Mapping[str, str] | None = None, cwd: str | Path | None = REPO,
              check: bool = True, timeout: float | None = None) -> Child:
    """Run ``cmd`` to its end; its wall, CPU and peak RSS from ``wait4`` (the section's own peak).

    ``check``: SystemExit with the output's tail when it exits non-zero. ``timeout`` (seconds):
    the child is killed and the result has returncode -9."""
    with tempfile.TemporaryFile("w+", errors="replace") as out:
        start = time.perf_counter()
        proc = subprocess.Popen(list(cmd), stdout=out, stderr=subprocess.STDOUT, env=env, cwd=cwd)
        killer = threading.Timer(timeout, proc.kill) if timeout is not None else None
        if killer is not None:
            killer.start()
        _, status, usage = os.wait4(proc.pid, 0)  # not Popen.wait: wait4 also gives the usage
        if killer is not None:
            killer.cancel()
        proc.returncode = os.waitstatus_to_exitcode(status)
        seconds = time.perf_counter() - start
        out.seek(0)
        text = out.read()
    if check and proc.returncode != 0:
        raise SystemExit(f"{shlex.join(map(str, cmd))} exited {proc.returncode}:\n{text[-3000:]}")
    return Child(text, proc.returncode, seconds, usage.ru_utime + usage.ru_stime,
                 usage.ru_maxrss * 1024)


def table(header_row: Sequence[str], rows: Sequence[Sequence[Any]], align: str | None = None) -> str:
    """A markdown table; ``align`` is one letter a column, ``l`` or ``r`` (default: first left,
    the rest right). Cells are formatted by ``str``: format numbers before."""
    align = align or "l" + "r" * (len(header_row) - 1)
    sep = ["---:" if a == "r" else "---" for a in align]
    lines = ["| " + " | ".join(map(str, header_row)) + " |", "| " + " | ".join(sep) + " |"]
    lines += ["| " + " | ".join(map(str, r)) + " |" for r in rows]
    return "\n".join(lines)


def frame_table(frame: Any, float_format: str = "{:.3f}") -> str:
    """:func:`table` of a pandas DataFrame (its columns; floats by ``float_format``)."""
    def cell(v: Any) -> str:
        return float_format.format(v) if isinstance(v, float) else str(v)

    rows = [[cell(v) for v in row] for row in frame.itertuples(index=False)]
    return table([str(c) for c in frame.columns], rows, "l" * len(frame.columns))


class Report:
    """Lines printed as they come and kept, in order, for :func:`write_results`."""

    def __init__(self) -> None:
        self.lines: list[str] = []

    def say(self, text: str = "") -> None:
        print(text, flush=True)
        self.lines.append(text)

    def write(self, name: str | Path, title: str, command: str | None = None) -> Path:
        return write_results(name, title, "\n".join(self.lines), command)
