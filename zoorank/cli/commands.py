"""What each ``zoorank`` command does: :func:`_dispatch` runs the parsed command and returns its
exit status and its result for ``--json``."""

from __future__ import annotations

import argparse
import sys
from typing import Any


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
    if command == "calibrate":
        return _calibrate(args)
    if command == "export":
        return _export(args)
    if command == "tune":
        from zoorank.tune.search import run_tune

        run_tune(args.config, store=args.store, address=args.address)
        return 0, None

    from zoorank.config.loading import load_config
    from zoorank.decide.next_step import config_path

    config = load_config(args.config, store=getattr(args, "store", None))
    if command == "zoo":
        return _zoo(config, args)
    if command == "plan":
        return _plan(config, args)
    # the verdict's next step (console and decision.json) names the config as the user typed it
    with config_path(args.config):
        return _stage_command(config, args)


def _stage_command(config: Any, args: argparse.Namespace) -> tuple[int, Any]:
    """A command that runs stages on ``config``: (exit status, its result for ``--json``)."""
    from zoorank import pipeline
    from zoorank.catalog.context import RunContext

    command = args.command
    # the command's one context: its Store serves the stages and the --json result alike
    context = RunContext(config, address=getattr(args, "address", None))
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
        return _strict(context, args, status), _decision(context) if args.json else None
    if command == "run":
        pipeline.run_all(config, context=context)
    elif command == "gc":
        pipeline.run_gc(config, dry_run=args.dry_run, context=context)
    elif command == "report":
        pipeline.run_report(config, context=context)
    else:
        getattr(pipeline, f"run_{command}")(config, context=context)
    return _strict(context, args, 0), _decision(context) if getattr(args, "json", False) else None


def _strict(context: Any, args: argparse.Namespace, status: int) -> int:
    """``status``, or 1 under ``--strict`` when decision.json counts a failed model (each named
    on stderr with its reason)."""
    if status or not getattr(args, "strict", False):
        return status
    from zoorank.decide.verdict import read_decision

    doc = read_decision(context.store) or {}
    failed = (doc.get("counts") or {}).get("failed") or 0
    if not failed:
        return status
    print(f"zoorank: --strict: {failed} of {doc['counts'].get('configured')} configured models "
          "failed:", file=sys.stderr)
    for f in doc.get("failed") or []:
        print(f"  {f['model_id']} ({f.get('dataset')}, {f.get('stage')}): {f['reason']}",
              file=sys.stderr)
    return 1


def _calibrate(args: argparse.Namespace) -> tuple[int, Any]:
    from zoorank.decide.calibrate import calibrate

    record = calibrate(args.stores, args.out, table=args.table, seed=args.seed)
    for key, entry in record["boards"].items():
        print(f"{key}: {entry['metric'] or 'no metric'} over {entry['units']['n']} units. "
              f"{entry['statement']}")
    print(f"zoorank: wrote the calibration record to {args.out}", file=sys.stderr)
    return 0, record if args.json else None


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


def _decision(context: Any) -> dict[str, Any]:
    """What ``run --json`` / ``rank --json`` print: the store's ``decision.json`` (the command's
    context's store); before RANK writes one, the leaderboard's first rows and where the outputs
    are."""
    from zoorank.decide.verdict import read_decision
    from zoorank.store import uris

    config, store = context.config, context.store
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
    from zoorank.zoo.duplicates import duplicate_lines
    from zoorank.zoo.inspect import describe_zoo, head_classes
    from zoorank.zoo.preflight import preflight, store_if_any
    from zoorank.zoo.resolve import resolve_models

    checked = preflight(resolve_models(config), store=store_if_any(config.store))
    models = checked.models
    if not args.json:
        print(describe_zoo(models))
        for line in duplicate_lines(models) + checked.lines():
            print(line)
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
            "head": head, "unreadable": m.unreadable, "duplicates": list(m.duplicates),
        })
    return 0, {"models": out}


def _plan(config: Any, args: argparse.Namespace) -> tuple[int, Any]:
    """``zoorank plan``: the night's cost, an estimate (:mod:`zoorank.plan`)."""
    from zoorank.errors import InputError
    from zoorank.plan import DEFAULT_GPU_SPEEDUP, plan, plan_text

    every, per = None, {}
    for item in args.throughput:
        arch, _, value = item.rpartition("=")
        try:
            rate = float(value)
        except ValueError:
            raise InputError(f"--throughput {item}: not [ARCH=]IMAGES_PER_S") from None
        if not rate > 0:
            raise InputError(f"--throughput {item}: images per second must be positive")
        if arch:
            per[arch] = rate
        else:
            every = rate
    speedup = args.gpu_speedup if args.gpu_speedup is not None else DEFAULT_GPU_SPEEDUP
    if not speedup > 0:
        raise InputError(f"--gpu-speedup {args.gpu_speedup}: must be positive")
    doc = plan(config, throughput=per, every=every, gpu_speedup=speedup)
    if not args.json:
        print(plan_text(doc, args.config))
    return 0, doc


def _export(args: argparse.Namespace) -> tuple[int, Any]:
    """``zoorank export STORE MODEL_ID OUT`` (:meth:`zoorank.result.Result.export`)."""
    import os

    from zoorank.api import open as open_run
    from zoorank.errors import InputError

    result = open_run(args.store)
    if args.run_config:  # the config, read against the same store
        configured = open_run(args.run_config)
        if not os.path.samefile(configured.store, result.store) if "://" not in result.store \
                else configured.store != result.store:
            raise InputError(f"--config {args.run_config}: its store is {configured.store}, "
                             f"not {result.store}")
        result = configured
    model_id = None if args.model_id == "pick" else args.model_id
    paths = result.export(args.out, model_id=model_id)
    if not args.json:
        print(f"Exported {model_id or result.pick}: {paths['weights']}, {paths['info']}")
    return 0, paths
