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

import argparse
import contextlib
import os
import sys
import traceback
from collections.abc import Iterator, Sequence
from typing import Any

from zoorank import __version__
from zoorank.errors import EXIT_NOTHING_RANKED, NothingRankedError, ZoorankError

STAGES = ("embed", "score", "rank", "report")
#: ``run --watch``'s options when not given (they mean nothing without ``--watch``).
WATCH_DEFAULTS = {"interval": 60.0, "settle": 30.0}
#: every environment variable zoorank reads: (name, what it does). The epilog of ``zoorank
#: --help`` and ``docs/reference/environment.md`` list them (a test keeps the three in step with
#: the code).
ENVIRONMENT: tuple[tuple[str, str], ...] = (
    ("RAY_ADDRESS", "the Ray cluster to join when --address is not given (`auto`, "
                    "`ray://host:10001`); unset: a local Ray started on demand"),
    ("NO_COLOR", "set (to anything): no colour or styles in the console"),
    ("ZOORANK_PROGRESS", "0: no progress bars; 1: bars even off a terminal; unset: bars when "
                         "stdout and stderr are a terminal"),
    ("ZOORANK_DEBUG", "1: as --debug (Ray's own logs and worker output, tracebacks)"),
    ("ZOORANK_S3_MAX_ATTEMPTS", "tries per S3 request (default 10)"),
    ("ZOORANK_S3_REQUEST_TIMEOUT", "seconds per S3 request (default 20)"),
    ("ZOORANK_POOL_MODELS", "zoorank ask / label: models in the pool that chooses the images "
                            "(default: twice the top set, at least 16)"),
    ("ZOORANK_GC_GRACE_SECONDS", "zoorank gc: files younger than this are kept (default 900)"),
    ("ZOORANK_WRITER_HEARTBEAT_SECONDS", "how often a running stage marks itself alive in "
                                         "the store (default 30)"),
    ("ZOORANK_WRITER_STALE_SECONDS", "a stage silent this long is taken for dead by gc "
                                     "(default 300)"),
    ("ZOORANK_GPU_AS_CPU", "1: GPU-scheduled embedding tasks run on CPU torch (tests only)"),
    ("AWS_ENDPOINT_URL, AWS_ENDPOINT_URL_S3", "an S3-compatible endpoint (MinIO, ...) for s3:// "
                                              "URIs"),
    ("AWS_REGION, AWS_DEFAULT_REGION", "the region of s3:// URIs without ?region="),
    ("HF_HOME, HF_HUB_CACHE, HUGGINGFACE_HUB_CACHE, XDG_CACHE_HOME",
     "where pretrained hub weights are looked for (offline)"),
    ("TUNE_DISABLE_SIGINT_HANDLER", "Ray Tune's own: 1 lets Ctrl-C end zoorank tune at once"),
)


def _global_options(p: argparse.ArgumentParser, *, top: bool) -> None:
    """``--debug`` and ``--quiet`` on the main parser and on every subcommand: a subcommand's
    copies default to SUPPRESS, so a flag given before the subcommand is not reset after it."""
    default: Any = False if top else argparse.SUPPRESS
    p.add_argument("--debug", action="store_true", default=default,
                   help="show tracebacks and Ray's own logs and worker output")
    p.add_argument("-q", "--quiet", action="store_true", default=default,
                   help="print nothing but errors (and the JSON with --json); no progress bars")


def _subparser(sub: Any, name: str, **kwargs: Any) -> argparse.ArgumentParser:
    p = sub.add_parser(name, **kwargs)
    _global_options(p, top=False)
    return p


def _add_config(p: argparse.ArgumentParser) -> None:
    p.add_argument("config", help="the run config (YAML); relative paths in it are taken from "
                                  "its folder")


def _add_store(p: argparse.ArgumentParser) -> None:
    p.add_argument("--store", metavar="PATH_OR_URI",
                   help="the store: a folder or a URI (s3://, gs://); overrides the config's "
                        "(a relative path is taken from the working directory)")


def _add_address(p: argparse.ArgumentParser) -> None:
    p.add_argument("--address", metavar="RAY_ADDRESS",
                   help="the Ray cluster to join: 'auto' (the running one) or ray://HOST:PORT "
                        "(default: $RAY_ADDRESS, else a local Ray started on demand)")


def _add_json(p: argparse.ArgumentParser, what: str) -> None:
    p.add_argument("--json", action="store_true",
                   help=f"print {what} as JSON on stdout (everything else goes to stderr)")


def _epilog() -> str:
    import textwrap

    width = max(len(name) for name, _ in ENVIRONMENT if len(name) <= 32)
    lines = ["environment variables:"]
    for name, what in ENVIRONMENT:
        text = textwrap.wrap(what, 78 - width - 4)
        if len(name) > width:
            lines.append(f"  {name}")
        else:
            lines.append(f"  {name:<{width}}  {text.pop(0)}")
        lines += [f"  {'':<{width}}  {t}" for t in text]
    lines += ["", *textwrap.wrap(
        "exit status: 0 done (failed models are recorded); 2 a config or input error; 3 nothing "
        "could be ranked; 1 anything else; 130 / 143 Ctrl-C / SIGTERM (finished work stays in "
        "the store).", 78)]
    return "\n".join(lines)


def build_parser() -> argparse.ArgumentParser:
    """The whole ``zoorank`` command line (the docs render the CLI reference from it)."""
    parser = argparse.ArgumentParser(
        prog="zoorank", description="Rank zoos of vision checkpoints without labels.",
        epilog=_epilog(), formatter_class=argparse.RawDescriptionHelpFormatter)
    _global_options(parser, top=True)
    parser.add_argument("--version", action="version", version=f"zoorank {__version__}",
                        help="print zoorank's version and exit")
    sub = parser.add_subparsers(dest="command", required=True, metavar="COMMAND")

    p = _subparser(sub, "run", help="the whole pipeline: embed → score → rank → report",
                   description="Embed, score, rank and report: each stage skips the work already "
                               "done. Prints the leaderboard, or with --json the decision.")
    _add_config(p)
    _add_store(p)
    _add_address(p)
    _add_json(p, "the decision (the store's decision.json)")
    p.add_argument("--watch", action="store_true",
                   help="keep ranking: re-list the checkpoint globs and rank what is new")
    p.add_argument("--interval", type=float, default=None, metavar="SECONDS",
                   help=f"--watch: seconds between polls (default: {WATCH_DEFAULTS['interval']:g})")
    p.add_argument("--until", metavar="TIME|COUNT",
                   help="--watch: stop at a time (HH:MM, ISO, or 30m / 2h from now) or once "
                        "COUNT models are ranked (default: until Ctrl-C / SIGTERM)")
    p.add_argument("--settle", type=float, default=None, metavar="SECONDS",
                   help="--watch: a checkpoint younger than this, or whose size changed since "
                        f"the last poll, is not read yet (default: {WATCH_DEFAULTS['settle']:g})")
    for stage in STAGES:
        p = _subparser(sub, stage, help=f"the {stage.upper()} stage only")
        _add_config(p)
        _add_store(p)
        if stage != "report":  # REPORT reads the store only: no Ray
            _add_address(p)
        if stage == "rank":
            _add_json(p, "the decision (the store's decision.json)")

    p = _subparser(sub, "gc", help="delete stale metric rows and orphaned embeddings of a store")
    _add_config(p)
    _add_store(p)
    p.add_argument("--dry-run", action="store_true", help="report what would be freed, delete nothing")

    p = _subparser(sub, "tune", help="label-free hyperparameter search with Ray Tune")
    p.add_argument("config", help="the tune config (YAML); relative paths in it are taken from "
                                  "its folder")
    _add_store(p)
    _add_address(p)

    p = _subparser(sub, "demo", help="build a real demo zoo offline and run the whole pipeline")
    p.add_argument("--out", default="zoorank-demo", metavar="DIR",
                   help="output directory (default: %(default)s)")
    p.add_argument("--dataset", default="digits", choices=["digits", "cifar10", "fashion_mnist"],
                   help="the images: scikit-learn's digits (built in), or CIFAR-10 / "
                        "Fashion-MNIST from --data (default: %(default)s)")
    p.add_argument("--data", metavar="DIR",
                   help="directory holding the dataset's Parquet files (cifar10, fashion_mnist)")
    p.add_argument("--size", default="default", choices=["tiny", "small", "default", "large"],
                   help="zoo and data size (tiny is what the test suite runs; default: "
                        "%(default)s)")
    _add_address(p)

    p = _subparser(sub, "ask", help="choose images to label (a page, a CSV, Label Studio tasks)")
    _add_config(p)
    _add_store(p)
    _add_json(p, "the round (its images, files and stopping rule)")
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

    p = _subparser(sub, "label", help="merge labels back (a filled CSV or a Label Studio export)")
    _add_config(p)
    p.add_argument("labels", help="the filled to_label.csv, the page's saved CSV, or a Label "
                                  "Studio JSON export (a relative path is taken from the "
                                  "working directory)")
    _add_store(p)
    _add_address(p)
    _add_json(p, "the merge (labels added, conflicts, stopping rule)")
    p.add_argument("--dataset", help="dataset the labels are for (default: the config's first)")
    p.add_argument("--max-labels", type=int, default=None, metavar="N",
                   help="label budget of the stopping rule (default: none)")
    p.add_argument("--no-rank", action="store_true",
                   help="only merge; skip the RANK rerun that refreshes the label oracle")

    p = _subparser(sub, "zoo", help="print the resolved zoo (ids, weights, fingerprints, input)")
    _add_config(p)
    _add_store(p)
    _add_json(p, "the resolved models")

    p = _subparser(sub, "inspect", help="what a checkpoint holds: tensors, state dict, prefixes")
    p.add_argument("checkpoint", help="checkpoint file or URI")
    p.add_argument("--prefix", help="a state_dict_prefix (or preset) to try")
    p.add_argument("--all", action="store_true", help="list every tensor")

    p = _subparser(sub, "metrics", help="score one embedding matrix you already have")
    p.add_argument("embeddings", help=".npy / .npz, or Parquet with an embedding column")
    p.add_argument("--views", type=int, default=None, metavar="Q",
                   help="rows are grouped n×q (q views per sample, consecutive) for LiDAR")
    p.add_argument("--labels", default=None, metavar="COLUMN",
                   help="labels: a Parquet column or an .npz key; adds the oracle metrics")
    _add_json(p, "the metrics")
    p.add_argument("--seed", type=int, default=0,
                   help="seed of the random choices (subsets, k-means; default: %(default)s)")

    p = _subparser(sub, "config", help="the run config: its JSON schema, or check a file",
                   description="The run config's JSON schema (for editors: yaml-language-server "
                               "reads it), or a check of a config file.")
    actions = p.add_subparsers(dest="action", required=True, metavar="ACTION")
    q = _subparser(actions, "schema", help="print the run config's JSON schema")
    q.add_argument("--output", "-o", metavar="FILE",
                   help="write the schema to FILE instead of stdout")
    q = _subparser(actions, "validate", help="check a run config; exit 2 naming the field "
                                             "when it is invalid")
    _add_config(q)
    _add_json(q, "the config as it is read (defaults filled in, paths resolved)")

    p = _subparser(sub, "init", help="write a starting config from a folder of checkpoints "
                                     "and images, or timm names",
                   description="Write a commented run config from what FOLDER holds (checkpoint "
                               "files become glob entries, with the state-dict layout "
                               "`zoorank inspect` detects; image folders, Parquet and .npz files "
                               "become datasets) and from --timm names. The file it writes "
                               "validates; check the lines marked TODO.")
    p.add_argument("folder", nargs="?", metavar="FOLDER",
                   help="a folder to look through for checkpoints and datasets")
    p.add_argument("--timm", nargs="+", metavar="NAME", default=[],
                   help="timm architectures to add as models (pretrained weights when the "
                        "local Hugging Face cache has them)")
    p.add_argument("--data", action="append", default=[], metavar="PATH",
                   help="a dataset to add (an image folder, a Parquet or .npz file); repeatable")
    p.add_argument("--arch", metavar="NAME",
                   help="the timm architecture of FOLDER's checkpoints (default: found in "
                        "their metadata or paths, and checked by loading one)")
    p.add_argument("--output", "-o", default="zoorank.yaml", metavar="FILE",
                   help="the config file to write (default: %(default)s)")
    p.add_argument("--force", action="store_true", help="overwrite FILE if it exists")
    return parser


def _check_combinations(parser: argparse.ArgumentParser, args: argparse.Namespace) -> None:
    """Options that would do nothing in this combination are usage errors (exit 2)."""
    sub = next(a for a in parser._actions if isinstance(a, argparse._SubParsersAction))
    parser = sub.choices.get(args.command, parser)  # its usage line in the message
    if args.command == "run":
        given = [f"--{k}" for k in ("interval", "until", "settle") if getattr(args, k) is not None]
        if given and not args.watch:
            parser.error(f"{', '.join(given)}: only with --watch")
        for key, value in WATCH_DEFAULTS.items():
            if getattr(args, key) is None:
                setattr(args, key, value)
    if args.command == "demo" and args.data and args.dataset == "digits":
        parser.error("--data: the digits are built in; --data is for --dataset cifar10 or "
                     "fashion_mnist")


def _dispatch(args: argparse.Namespace) -> tuple[int, Any]:
    """Run the command: (exit status, its result for ``--json``, or None)."""
    command = args.command
    if command == "metrics":
        import numpy as np

        from zoorank.errors import InputError
        from zoorank.score import embeddings_file

        if not args.json:
            return embeddings_file.main(args), None
        Z, labels, q = embeddings_file.load_embeddings(args.embeddings, args.views, args.labels)
        if not np.isfinite(Z).all():
            raise InputError(f"{args.embeddings}: embeddings contain NaN/Inf values")
        return 0, embeddings_file.score_matrix(Z, labels, q, seed=args.seed)
    if command == "inspect":
        from zoorank.zoo.inspect import main as zoo_main

        return zoo_main(args), None
    if command == "config":
        return _config_command(args)
    if command == "init":
        from zoorank.init import init_command

        return init_command(args), None
    if command == "demo":
        from zoorank.demo import run_demo

        run_demo(out=args.out, dataset=args.dataset, data=args.data, size=args.size,
                 address=args.address)
        return 0, None
    if command == "tune":
        from zoorank.tune.search import run_tune

        run_tune(args.config, store=args.store, address=args.address)
        return 0, None

    from zoorank.config.loading import load_config
    from zoorank.decide.next_step import config_path

    config = load_config(args.config, store=args.store)
    if command == "zoo":
        return _zoo(config, args)
    # the verdict's next step (console and decision.json) names the config as the user typed it
    with config_path(args.config):
        return _stage_command(config, args)


def _stage_command(config: Any, args: argparse.Namespace) -> tuple[int, Any]:
    """A command that runs stages on ``config``: (exit status, its result for ``--json``)."""
    from zoorank import pipeline

    command = args.command
    if command == "ask":
        asked = pipeline.run_ask(config, budget=args.budget, round_=args.round,
                                 dataset=args.dataset, max_labels=args.max_labels,
                                 sampler=args.sampler)
        return 0, asked
    if command == "label":
        merged = pipeline.run_label(config, args.labels, dataset=args.dataset,
                                    max_labels=args.max_labels, rank=not args.no_rank,
                                    address=args.address)
        return 0, merged
    if command == "run" and args.watch:
        from zoorank.watch import watch

        status = watch(config, address=args.address, interval=args.interval,
                       until=args.until, settle=args.settle).exit_status
        return status, _decision(config) if args.json else None
    if command == "run":
        pipeline.run_all(config, address=args.address)
    elif command == "gc":
        pipeline.run_gc(config, dry_run=args.dry_run)
    elif command == "report":
        pipeline.run_report(config)
    else:
        getattr(pipeline, f"run_{command}")(config, address=args.address)
    return 0, _decision(config) if getattr(args, "json", False) else None


def _config_command(args: argparse.Namespace) -> tuple[int, Any]:
    if args.action == "schema":
        import json

        from zoorank.config import RunConfig

        text = json.dumps(RunConfig.model_json_schema(), indent=2) + "\n"
        if args.output:
            with open(args.output, "w") as f:
                f.write(text)
            print(f"zoorank: wrote the run config's JSON schema to {args.output}", file=sys.stderr)
        else:
            sys.stdout.write(text)
        return 0, None
    from zoorank.config.loading import load_config

    config = load_config(args.config)
    models = sum(1 for _ in config.models)
    print(f"{args.config}: valid ({len(config.datasets)} dataset(s), {models} model entr"
          f"{'y' if models == 1 else 'ies'}, store {config.store})")
    return 0, config.model_dump(mode="json") if args.json else None


def _decision(config: Any) -> dict[str, Any]:
    """What ``run --json`` / ``rank --json`` print: the store's ``decision.json``; before RANK
    writes one, the leaderboard's first rows and where the outputs are."""
    from zoorank.decide.verdict import read_decision
    from zoorank.store import Store, uris

    store = Store(config.store)
    decision = read_decision(store)
    if decision is not None:
        return decision
    from zoorank.decide.leaderboard import read_leaderboard

    board, _ = read_leaderboard(store)
    top = None if board is None else board.head(10)
    if top is not None and "model_id" not in top.columns:
        top = top.reset_index()
    rows = [] if top is None else top.to_dict("records")
    return {"pick": ({"model_id": rows[0].get("model_id")} if rows else None),
            "leaderboard": rows, "store": uris.redact(config.store),
            "leaderboard_csv": store.uri_of("leaderboard.csv"),
            "report": store.uri_of("report", "index.html")}


def _zoo(config: Any, args: argparse.Namespace) -> tuple[int, Any]:
    from zoorank.zoo.inspect import describe_zoo, head_classes
    from zoorank.zoo.resolve import resolve_models

    models = resolve_models(config)
    if not args.json:
        print(describe_zoo(models))
        return 0, None
    from zoorank.store import uris
    from zoorank.zoo.memory import count_parameters
    from zoorank.zoo.preprocessing import describe_preprocessing

    out = []
    for m in models:
        spec = m.spec
        head: dict[str, Any] = {"kind": None, "classes": None}
        if not m.unreadable:
            try:
                head["kind"], head["classes"] = head_classes(m)
            except Exception as err:  # noqa: BLE001 - the listing goes on; EMBED reports it
                head["error"] = f"{type(err).__name__}: {err}"
        out.append({
            "model_id": m.model_id, "source": spec.source, "name": spec.name,
            "checkpoint": uris.redact(spec.checkpoint) if spec.checkpoint else None,
            "pretrained": spec.pretrained, "weights_revision": m.weights_revision,
            "checkpoint_digest": m.checkpoint_digest, "fingerprint": m.fingerprint,
            "group": m.group, "family": m.family,
            "datasets": list(m.datasets) if m.datasets is not None else None,
            "input": describe_preprocessing(m),
            "input_size": m.geometry.input_size, "interpolation": m.geometry.interpolation,
            "crop_pct": m.geometry.crop_pct, "mean": list(m.normalization.mean),
            "std": list(m.normalization.std),
            "parameters": None if m.unreadable else count_parameters(m),
            "head": head, "unreadable": m.unreadable,
        })
    return 0, {"models": out}


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


if __name__ == "__main__":
    entry()
