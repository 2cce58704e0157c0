"""The console every stage prints user-facing tables to: fitted to the terminal, or plain text.

On a terminal, rich's Console at the terminal's width. Off a terminal (a pipe, a log file,
``ray job logs``) rich would assume 80 columns and cut tables, so the console is plain: no colour,
:data:`PLAIN_WIDTH` columns, and tables are drawn without box borders (``plain(console)``), which
can wrap but never be cut.

Live progress bars (EMBED's, and every stage's task bar in :mod:`zoorank.tasks.runner`) follow the
terminal: they show only when stdout and stderr are both a terminal (not piped, not redirected to
a log, ``TERM`` not ``dumb``); ``ZOORANK_PROGRESS=0`` turns them off (``--quiet`` sets it) and
``ZOORANK_PROGRESS=1`` on wherever the output goes.
``NO_COLOR`` (rich honours it) takes the colour and styles away, everywhere.

What the terminal shows, nothing the store holds: this module, and
:mod:`zoorank.console.embed_progress` (EMBED's live progress and summary, which REPORT reads too).
"""

from __future__ import annotations

import os
import sys
from typing import Any

#: width of plain-text output when the stream is not a terminal.
PLAIN_WIDTH = 100
#: ``0`` turns every progress bar off (``--quiet`` sets it).
ENV_PROGRESS = "ZOORANK_PROGRESS"


def shown_path(path: str | os.PathLike) -> str:
    """A local path as the console shows it: relative to the working directory when it lies
    under it (``zoorank-store/report/index.html``), else as given (an absolute path elsewhere, a
    URI)."""
    from pathlib import Path

    text = os.fspath(path)
    if "://" in text:
        return text
    try:
        return str(Path(text).resolve().relative_to(Path.cwd().resolve()))
    except (ValueError, OSError):
        return text


def progress_enabled() -> bool:
    """Whether live progress bars show: ``ZOORANK_PROGRESS=0`` never, ``1`` always (also in a log:
    the bars' final state is printed once), unset (or ``auto``) when stdout and stderr are both a
    terminal and ``TERM`` is not ``dumb``."""
    setting = os.environ.get(ENV_PROGRESS, "").strip().lower()
    if setting in ("0", "1"):
        return setting == "1"
    if os.environ.get("TERM") == "dumb":
        return False
    return _isatty(sys.stdout) and _isatty(sys.stderr)


def _isatty(stream: Any) -> bool:
    try:
        return bool(stream.isatty())
    except (AttributeError, ValueError, OSError):  # replaced or closed streams
        return False


def output_console(stderr: bool = False) -> Any:
    """A rich Console for ``stdout`` (or ``stderr``) as described in the module docstring."""
    from rich.console import Console

    stream = sys.stderr if stderr else sys.stdout
    if stream.isatty():
        return Console(stderr=stderr)
    return Console(stderr=stderr, width=PLAIN_WIDTH, color_system=None, force_terminal=False,
                   soft_wrap=False, highlight=False, emoji=False)


def table_box(console: Any) -> Any:
    """The box style of a table on ``console``: a light rule under the header on a terminal,
    none off a terminal (plain aligned columns)."""
    from rich import box

    return box.SIMPLE_HEAD if console.is_terminal else None


def counts_line(stage: str, counts: list[tuple[int, str]], tail: str = "") -> str:
    """A stage's line that says only what happened: ``"<stage>: 3 model(s) scored, 1 failed;
    4.2 s"`` from ``(count, words)`` pairs, each pair with a zero count left out (``"nothing to
    do"`` when every count is zero); ``tail`` after a semicolon."""
    said = [f"{n} {words}" for n, words in counts if n]
    return f"{stage}: {', '.join(said) or 'nothing to do'}" + (f"; {tail}" if tail else "")
