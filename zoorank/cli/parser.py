"""The ``zoorank`` command line: :func:`build_parser` is every command and option, with a help text
on every option (the docs render the CLI reference from it); :func:`_check_combinations` turns
options that would do nothing together into usage errors."""

from __future__ import annotations

import argparse
from typing import Any

from zoorank import __version__

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


def _add_strict(p: argparse.ArgumentParser) -> None:
    p.add_argument("--strict", action="store_true",
                   help="exit 1 when any configured model failed (decision.json's counts.failed "
                        "is not 0), after ranking the others; without it a failed model is "
                        "recorded and the exit status is 0")


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
    _add_strict(p)
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
            _add_strict(p)

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

    p = _subparser(sub, "plan", help="what a night costs: models, images, views, forward "
                                     "passes and an estimate of GPU-hours per architecture",
                   description="Print the config's models, images and views, its forward passes "
                               "(images × models × views) and an estimate of GPU-hours per "
                               "architecture, from --throughput or from a small forward timed on "
                               "this machine's CPU and scaled by --gpu-speedup (the output says "
                               "which). Runs nothing on Ray and writes nothing.")
    _add_config(p)
    _add_json(p, "the plan")
    p.add_argument("--throughput", action="append", default=[], metavar="[ARCH=]IMAGES_PER_S",
                   help="images per second on one GPU: for every architecture, or ARCH=N for "
                        "one (ARCH as the plan prints it); repeatable. Default: measured")
    p.add_argument("--gpu-speedup", type=float, default=None, metavar="X",
                   help="how many times this CPU's measured forward a GPU runs (an assumption; "
                        "default: 20)")

    p = _subparser(sub, "export", help="write a ranked model's backbone as safetensors, with its "
                                       "preprocessing and provenance",
                   description="Write OUT/model.safetensors (the network's weights, checkpoint "
                               "prefix stripped: they load strictly into the architecture) and "
                               "OUT/zoorank-model.json (architecture, preprocessing, config and "
                               "checkpoint digests, the decision).")
    p.add_argument("store", metavar="STORE", help="the run's store, or its config (*.yaml)")
    p.add_argument("model_id", metavar="MODEL_ID", help="the model to export (`pick`: the pick)")
    p.add_argument("out", metavar="OUT", help="the directory to write")
    p.add_argument("--config", dest="run_config", metavar="CONFIG",
                   help="the run's config, when STORE is a store whose decision.json names none")
    _add_json(p, "the written files")

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

    p = _subparser(sub, "calibrate", help="a calibration record from labelled zoos: the metric "
                                          "and shortlist chosen leaving one unit out",
                   description="From labelled zoos (stores RANK ran on with the label oracle "
                               "on, and/or a per-model Parquet table), choose the metric and the "
                               "shortlist fraction by leave-one-unit-out, measure them against "
                               "the baselines, and write the record a run's `record:` names.")
    p.add_argument("stores", nargs="*", metavar="STORE",
                   help="a labelled store (folder or URI); UNIT=STORE names its unit (stores of "
                        "the same networks on other images share one; default: one unit per "
                        "store, named after its folder)")
    p.add_argument("--table", metavar="PARQUET",
                   help="a per-model table (one row per zoo and model: unit, truth, one column "
                        "per label-free metric), e.g. benchmarks/zoos/validation_zoos.parquet")
    p.add_argument("--out", required=True, metavar="RECORD",
                   help="the record file to write (JSON)")
    p.add_argument("--seed", type=int, default=0,
                   help="seed of the bootstrap over units (default: %(default)s)")
    _add_json(p, "the record")

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
