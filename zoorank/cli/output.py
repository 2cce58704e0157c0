"""The command's output: results as JSON (:func:`print_json`) and the stream context that keeps
stdout for the result (:func:`_output`)."""

from __future__ import annotations

import contextlib
import os
import sys
from collections.abc import Iterator
from typing import Any


def _plain(value: Any) -> Any:
    """A JSON-able copy of a result (dataclasses, NumPy and pandas values, paths, tuples)."""
    import dataclasses
    import math
    from pathlib import PurePath

    if dataclasses.is_dataclass(value) and not isinstance(value, type):
        return _plain({f.name: getattr(value, f.name) for f in dataclasses.fields(value)})
    if isinstance(value, dict):
        return {str(k): _plain(v) for k, v in value.items()}
    if isinstance(value, (list, tuple, set, frozenset)):
        return [_plain(v) for v in value]
    if isinstance(value, PurePath):
        return str(value)
    if hasattr(value, "tolist") and not isinstance(value, (str, bytes)):  # NumPy arrays, scalars
        return _plain(value.tolist())
    if isinstance(value, float) and not math.isfinite(value):
        return None
    if value is None or isinstance(value, (str, int, float, bool)):
        return value
    try:
        import pandas as pd

        if pd.isna(value):
            return None
    except (TypeError, ValueError):
        pass
    return str(value)


def print_json(result: Any, stream: Any = None) -> None:
    """``result`` as one JSON document (NaN as null) on ``stream`` (default stdout)."""
    import json

    from zoorank.store.redact import redact

    text = json.dumps(_plain(result), indent=2, allow_nan=False)
    print(redact(text), file=stream or sys.stdout, flush=True)


@contextlib.contextmanager
def _output(to_stderr: bool, silent: bool) -> Iterator[None]:
    """Keep stdout for the result: what the command prints goes to stderr (``to_stderr``) or
    nowhere (``silent``: also its stderr notes), at the Python level and at file descriptor 1
    (native libraries, subprocesses). The caller prints the result after the block."""
    if not (to_stderr or silent):
        yield
        return
    sink = open(os.devnull, "w") if silent else None  # noqa: SIM115 - closed below
    target_out = sink if silent else sys.stderr
    for stream in (sys.stdout, sys.stderr):
        with contextlib.suppress(OSError, ValueError):
            stream.flush()
    saved_fd = None
    with contextlib.suppress(OSError):
        saved_fd = os.dup(1)
        if silent:
            null = os.open(os.devnull, os.O_WRONLY)
            os.dup2(null, 1)
            os.close(null)
        else:
            os.dup2(2, 1)
    try:
        with contextlib.redirect_stdout(target_out):
            if silent:
                with contextlib.redirect_stderr(sink):
                    yield
            else:
                yield
    finally:
        for stream in (sys.stdout, sys.stderr, target_out):
            with contextlib.suppress(OSError, ValueError):
                stream.flush()
        if saved_fd is not None:
            os.dup2(saved_fd, 1)
            os.close(saved_fd)
        if sink is not None:
            sink.close()
