"""The ``zoorank`` command (contract 1).

Exit status: 0 success (failed models are recorded and reported); 2 a config or input error with a
one-line message naming the field or file; 3 nothing could be ranked (every model failed or is
missing: see the report and the ``failed`` table); 130 Ctrl-C and 143 SIGTERM (finished work stays
in the store, the next run resumes); 1 anything else (traceback only with ``--debug``).

Output: results on stdout, progress and notes on stderr. ``--json`` prints the result as one JSON
document on stdout and sends everything else to stderr, so ``zoorank run cfg.yaml --json | jq
.pick`` works; ``--quiet`` prints nothing but errors (and the JSON with ``--json``). ``--debug``
and ``--quiet`` go anywhere on the line. :func:`build_parser` is the whole command line, with a
help text on every option: the docs render the CLI reference from it.
"""

from __future__ import annotations

import contextlib
import os
import sys
import traceback
from collections.abc import Sequence

from zoorank.cli.commands import _dispatch
from zoorank.cli.output import _output, print_json
from zoorank.cli.parser import ENVIRONMENT, STAGES, WATCH_DEFAULTS, _check_combinations, build_parser
from zoorank.cli.signals import _RESUMES, _TERMINATED, _terminate_cleanly
from zoorank.errors import EXIT_NOTHING_RANKED, NothingRankedError, ZoorankError

__all__ = ["ENVIRONMENT", "STAGES", "WATCH_DEFAULTS", "build_parser", "entry", "main", "print_json"]


def _error(message: str) -> None:
    """One line on stderr, redacted (zoorank.store.redact): no secret leaves through the console."""
    from zoorank.store.redact import redact

    print(redact(message), file=sys.stderr)


def entry() -> None:
    """The ``zoorank`` console script and ``python -m zoorank``: :func:`main`, then the process
    ends with its status once every exit handler (Ray's shutdown, logging's flush) has run,
    without the interpreter's own teardown of native extensions.

    Why: a process that used delta-rs and pyarrow can abort in that teardown ("terminate called
    without an active exception", SIGABRT, exit -6) after its work and output are complete
    (delta-io/delta-rs#2184: a native thread pool destroyed while one of its threads is still
    joinable). A command that succeeded must exit 0. The handler is registered before anything
    imports Ray, so exit handlers registered later (Ray's, Tune's) run before it.
    """
    import atexit

    status: list[int] = [1]  # an exception that escapes main (a bug) ends as Python's 1

    def end() -> None:
        import logging

        logging.shutdown()
        for stream in (sys.stdout, sys.stderr):
            try:
                stream.flush()
            except (OSError, ValueError):  # a closed pipe or stream: nothing left to say
                pass
        os._exit(status[0])

    atexit.register(end)
    try:
        code: object = main()
    except SystemExit as err:  # argparse (--help, a usage error), or a re-raised exit
        code = err.code
        status[0] = _status(code)
        raise
    status[0] = _status(code)
    sys.exit(code)


def _status(code: object) -> int:
    """The exit status ``sys.exit(code)`` gives: None is 0, an int itself, anything else 1."""
    if code is None:
        return 0
    return code if isinstance(code, int) else 1


def main(argv: Sequence[str] | None = None) -> int:
    from zoorank.store.redact import install_logging_filter, redact

    parser = build_parser()
    args = parser.parse_args(argv)
    _check_combinations(parser, args)
    args.debug = bool(getattr(args, "debug", False))
    args.quiet = bool(getattr(args, "quiet", False))
    as_json = bool(getattr(args, "json", False))
    from zoorank.runtime import ENV_DEBUG, debug_enabled

    if args.debug:  # Ray's own start-up notes and worker output too (zoorank.runtime)
        os.environ[ENV_DEBUG] = "1"
    args.debug = args.debug or debug_enabled()
    if not args.debug:
        # Tune's "new output engine" prints its experiment box and a TensorBoard hint even at
        # verbose=0; its legacy engine honours verbose=0 (`zoorank tune` prints its own lines)
        os.environ.setdefault("RAY_AIR_NEW_OUTPUT", "0")
    if args.quiet:  # no bars in this process (zoorank.console.progress_enabled)
        os.environ["ZOORANK_PROGRESS"] = "0"
    _terminate_cleanly()
    install_logging_filter("ray", "ray.data", "ray.tune", "zoorank")
    result = None
    try:
        with _output(to_stderr=as_json, silent=args.quiet):
            status, result = _dispatch(args)
        if _TERMINATED:  # the handler's exit was swallowed; the command ran to its end
            raise SystemExit(143)
        if as_json and result is not None:
            print_json(result)
        return status
    except NothingRankedError as err:
        _error(f"zoorank: {err}")
        return EXIT_NOTHING_RANKED
    except ZoorankError as err:
        _error(f"zoorank: error: {err}")
        return 2
    except KeyboardInterrupt:
        _error(f"zoorank: interrupted (Ctrl-C); {_RESUMES}")
        return 130
    except BrokenPipeError:  # the reader went away (`| head`): stop quietly, as SIGPIPE would
        with contextlib.suppress(OSError):
            null = os.open(os.devnull, os.O_WRONLY)
            os.dup2(null, 1)  # the exit's own flush of stdout must not raise again
            os.close(null)
        return 141
    except SystemExit as err:  # SIGTERM: _terminate_cleanly, or zoorank.tasks.runner mid-task
        if err.code != 143:
            raise
        _error(f"zoorank: terminated (SIGTERM); {_RESUMES}")
        return 143
    except Exception as err:  # a bug: one line, the traceback behind --debug
        if args.debug:
            print(redact(traceback.format_exc()), file=sys.stderr, end="")
        _error(f"zoorank: internal error: {type(err).__name__}: {err} (rerun with --debug)")
        return 1

