"""The ``zoorank`` command (contract 1).

Exit status: 0 success (failed models are recorded and reported); 2 a config or input error with a
one-line message naming the field or file; 3 nothing could be ranked (every model failed or is
missing: see the report and the ``failed`` table); 130 Ctrl-C and 143 SIGTERM (finished work stays
in the store, the next run resumes); 1 anything else (traceback only with ``--debug``).
"""

from __future__ import annotations

import argparse
import os
import sys
import traceback
from collections.abc import Sequence

from zoorank import __version__
from zoorank.errors import EXIT_NOTHING_RANKED, NothingRankedError, ZoorankError

STAGES = ("embed", "score", "rank", "report")


def _add_common(p: argparse.ArgumentParser, *, config: bool = True) -> None:
    if config:
        p.add_argument("config", help="run config (YAML)")
    p.add_argument("--store", help="store path or URI (overrides the config)")
    p.add_argument(
        "--address",
        help="Ray address: default starts a local Ray on demand; 'auto' joins a running cluster",
    )


def build_parser() -> argparse.ArgumentParser:
    parser = argparse.ArgumentParser(
        prog="zoorank", description="Rank zoos of vision checkpoints without labels."
    )
    parser.add_argument("--debug", action="store_true", help="show tracebacks and Ray's own logs")
    parser.add_argument("--version", action="version", version=f"zoorank {__version__}")
    sub = parser.add_subparsers(dest="command", required=True)

    p = sub.add_parser("run", help="the whole pipeline: embed → score → rank → report")
    _add_common(p)
    p.add_argument("--watch", action="store_true",
                   help="keep ranking: re-list the checkpoint globs and rank what is new")
    p.add_argument("--interval", type=float, default=60.0, metavar="SECONDS",
                   help="--watch: seconds between polls (default: %(default)s)")
    p.add_argument("--until", metavar="TIME|COUNT",
                   help="--watch: stop at a time (HH:MM, ISO, or 30m / 2h from now) or once "
                        "COUNT models are ranked (default: until Ctrl-C / SIGTERM)")
    p.add_argument("--settle", type=float, default=30.0, metavar="SECONDS",
                   help="--watch: a checkpoint younger than this, or whose size changed since "
                        "the last poll, is not read yet (default: %(default)s)")
    for stage in STAGES:
        p = sub.add_parser(stage, help=f"the {stage.upper()} stage only")
        _add_common(p)

    p = sub.add_parser("gc", help="delete stale metric rows and orphaned embeddings of a store")
    _add_common(p)
    p.add_argument("--dry-run", action="store_true", help="report what would be freed, delete nothing")

    p = sub.add_parser("tune", help="label-free hyperparameter search with Ray Tune")
    _add_common(p)

    p = sub.add_parser("demo", help="build a real demo zoo offline and run the whole pipeline")
    p.add_argument("--out", default="zoorank-demo", help="output directory (default: %(default)s)")
    p.add_argument(
        "--dataset", default="digits", choices=["digits", "cifar10", "fashion_mnist"]
    )
    p.add_argument("--data", help="directory holding the dataset's Parquet files (cifar10, ...)")
    p.add_argument("--size", default="default", choices=["tiny", "small", "default", "large"],
                   help="zoo and data size (tiny is what the test suite runs)")
    p.add_argument("--address", help="Ray address (default: local Ray)")

    p = sub.add_parser("ask", help="choose images to label (a page, a CSV, Label Studio tasks)")
    _add_common(p)
    p.add_argument("--budget", type=int, required=True, metavar="K",
                   help="images to ask for in this round")
    p.add_argument("--round", type=int, default=None, metavar="N",
                   help="round number (default: the next one); writes <store>/asks/N/")
    p.add_argument("--dataset", help="dataset to label (default: the config's first)")
    p.add_argument("--max-labels", type=int, default=None, metavar="N",
                   help="label budget of the stopping rule (default: none)")
    p.add_argument("--sampler", default=None,
                   choices=["committee", "uncertainty", "random", "coda", "model_picker"],
                   help="how the images are chosen: an embedding zoo by committee, uncertainty "
                        "(default) or random; a classifier zoo (heads kept) by coda (default), "
                        "uncertainty, model_picker or random (the heads' accuracy on the labels "
                        "picks either way)")
    p = sub.add_parser("label", help="merge labels back (a filled CSV or a Label Studio export)")
    _add_common(p)
    p.add_argument("labels", help="the filled to_label.csv, the page's saved CSV, or a Label "
                                  "Studio JSON export")
    p.add_argument("--dataset", help="dataset the labels are for (default: the config's first)")
    p.add_argument("--max-labels", type=int, default=None, metavar="N",
                   help="label budget of the stopping rule (default: none)")
    p.add_argument("--no-rank", action="store_true",
                   help="only merge; skip the RANK rerun that refreshes the label oracle")

    p = sub.add_parser("zoo", help="print the resolved zoo (ids, weights, fingerprints, input)")
    _add_common(p)
    p = sub.add_parser("inspect", help="what a checkpoint holds: tensors, state dict, prefixes")
    p.add_argument("checkpoint", help="checkpoint file or URI")
    p.add_argument("--prefix", help="a state_dict_prefix (or preset) to try")
    p.add_argument("--all", action="store_true", help="list every tensor")

    p = sub.add_parser("metrics", help="score one embedding matrix you already have")
    p.add_argument("embeddings", help=".npy / .npz, or Parquet with an embedding column")
    p.add_argument("--views", type=int, default=None, metavar="Q",
                   help="rows are grouped n×q (q views per sample, consecutive) for LiDAR")
    p.add_argument("--labels", default=None, metavar="COLUMN",
                   help="labels: a Parquet column or an .npz key; adds the oracle metrics")
    p.add_argument("--json", action="store_true", help="print JSON instead of a table")
    p.add_argument("--seed", type=int, default=0)
    return parser


def _dispatch(args: argparse.Namespace) -> int:
    if args.command == "metrics":
        from zoorank.score.embeddings_file import main as metrics_main

        return metrics_main(args)
    if args.command in ("zoo", "inspect"):
        from zoorank.zoo.inspect import main as zoo_main

        return zoo_main(args)
    if args.command == "demo":
        from zoorank.demo import run_demo

        run_demo(out=args.out, dataset=args.dataset, data=args.data, size=args.size,
                 address=args.address)
        return 0
    if args.command == "tune":
        from zoorank.tune.search import run_tune

        run_tune(args.config, store=args.store, address=args.address)
        return 0

    from zoorank.config.loading import load_config

    config = load_config(args.config, store=args.store)
    from zoorank import pipeline

    if args.command == "ask":
        pipeline.run_ask(config, budget=args.budget, round_=args.round, dataset=args.dataset,
                         max_labels=args.max_labels, sampler=args.sampler)
        return 0
    if args.command == "label":
        pipeline.run_label(config, args.labels, dataset=args.dataset,
                           max_labels=args.max_labels, rank=not args.no_rank,
                           address=args.address)
        return 0
    if args.command == "run" and args.watch:
        from zoorank.watch import watch

        return watch(config, address=args.address, interval=args.interval,
                     until=args.until, settle=args.settle).exit_status
    elif args.command == "run":
        pipeline.run_all(config, address=args.address)
    elif args.command == "gc":
        pipeline.run_gc(config, address=args.address, dry_run=args.dry_run)
    else:
        getattr(pipeline, f"run_{args.command}")(config, address=args.address)
    return 0


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
    also notes the signal, and :func:`main` ends with 143 however the command returned.
    """
    import signal
    import threading

    if threading.current_thread() is threading.main_thread():
        signal.signal(signal.SIGTERM, _on_sigterm)


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
    if args.debug:  # Ray's own start-up notes and worker output too (zoorank.runtime)
        from zoorank.runtime import ENV_DEBUG

        os.environ[ENV_DEBUG] = "1"
    else:
        # Tune's "new output engine" prints its experiment box and a TensorBoard hint even at
        # verbose=0; its legacy engine honours verbose=0 (`zoorank tune` prints its own lines)
        os.environ.setdefault("RAY_AIR_NEW_OUTPUT", "0")
    _terminate_cleanly()
    install_logging_filter("ray", "ray.data", "ray.tune", "zoorank")
    try:
        status = _dispatch(args)
        if _TERMINATED:  # the handler's exit was swallowed; the command ran to its end
            raise SystemExit(143)
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
    except SystemExit as err:  # SIGTERM: _terminate_cleanly, or zoorank.run.runner mid-task
        if err.code != 143:
            raise
        _error(f"zoorank: terminated (SIGTERM); {_RESUMES}")
        return 143
    except Exception as err:  # a bug: one line, the traceback behind --debug
        if args.debug:
            print(redact(traceback.format_exc()), file=sys.stderr, end="")
        _error(f"zoorank: internal error: {type(err).__name__}: {err} (rerun with --debug)")
        return 1


if __name__ == "__main__":
    entry()
