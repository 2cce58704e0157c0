"""SIGTERM ends a command like Ctrl-C: the handler, and the note :func:`zoorank.cli.main` reads
when the exit it raised was swallowed."""

from __future__ import annotations

import sys

_RESUMES = "finished work is kept in the store and the next run resumes from it"
#: set by the SIGTERM handler: the exit it raises can be swallowed (see _terminate_cleanly)
_TERMINATED: list[bool] = []


def _on_sigterm(signum: int, frame: object) -> None:
    _TERMINATED.append(True)
    sys.exit(143)


def _terminate_cleanly() -> None:
    """SIGTERM (``ray job stop``, a scheduler) unwinds like Ctrl-C, so partial outputs
    are released by their ``finally`` blocks. :func:`zoorank.runtime.ensure_ray` puts this
    handler back after ``ray.init`` replaces it.

    Python runs the handler wherever the main thread is; inside a weakref callback or a
    ``__del__`` the ``SystemExit`` is printed and ignored, and the command runs on. So the handler
    also notes the signal, and :func:`zoorank.cli.main` ends with 143 however the command returned.
    """
    import signal
    import threading

    if threading.current_thread() is threading.main_thread():
        signal.signal(signal.SIGTERM, _on_sigterm)
