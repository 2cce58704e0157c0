"""``zoorank demo``: build a real self-supervised zoo offline, then rank it without labels.

1. TUNE: Ray Tune trains a grid of SSL models (SimCLR and VICReg × learning rates × three seeds,
   so every configuration is a seed ensemble) on an unlabeled image set, reporting LiDAR per epoch.
2. RUN: the trials' checkpoints (``models: {from_tune: ...}``) go through embed → score (with
   seed-ensemble NC) → rank (with the kNN / linear-probe label oracle and agreement) → report.
3. It prints the leaderboard, the Kendall τ of each label-free metric against the oracle, and,
   last, the verdict (the pick, the shortlist, the next step; ``decision.json``) and where the
   HTML report is.

The default (scikit-learn digits, CPU) needs nothing but the installed packages and finishes within
minutes on two cores; ``--dataset cifar10 --data ../shared/data/cifar10`` is the larger variant.
"""

from __future__ import annotations

import time
from dataclasses import dataclass
from pathlib import Path
from typing import TYPE_CHECKING

import numpy as np
import pandas as pd
import yaml

from zoorank.config import DatasetSpec, RunConfig
from zoorank.config.loading import parse_config
from zoorank.errors import InputError
from zoorank.store.layout import AGREEMENT

if TYPE_CHECKING:
    from zoorank.store import Store


@dataclass(frozen=True)
class DemoSize:
    train_limit: int | None  # images the SSL trials train on (None: all)
    eval_limit: int | None  # images the zoo is ranked on
    epochs: int
    methods: tuple[str, ...]
    lrs: tuple[float, ...]
    seeds: tuple[int, ...]
    width: int
    probe: tuple[int, int]  # (samples, per_sample) of the tune objective's probe set
    views: tuple[int, int]  # (samples, per_sample) of the ranking's augmented view
    nc_k: int
    nc_reference: int


SIZES = {
    # what the test suite runs: still ≥ 2 methods and seed ensembles, just very small
    "tiny": DemoSize(300, 300, 2, ("simclr", "vicreg"), (3e-3,), (0, 1), 8, (48, 4), (48, 4), 5, 120),
    "small": DemoSize(None, None, 3, ("simclr", "vicreg"), (1e-3, 1e-2), (0, 1, 2), 16,
                      (128, 6), (150, 6), 10, 600),
    "default": DemoSize(None, None, 6, ("simclr", "vicreg"), (1e-3, 1e-2), (0, 1, 2), 32,
                        (256, 8), (300, 8), 20, 1000),
    "large": DemoSize(None, None, 10, ("simclr", "vicreg", "byol"), (1e-3, 3e-3, 1e-2), (0, 1, 2),
                      32, (512, 8), (1000, 10), 50, 2500),
}

#: (train file, eval file, native input size) of the Parquet demo datasets
PARQUET_SETS = {
    "cifar10": ("train.parquet", "test.parquet", 32),
    "fashion_mnist": ("train.parquet", "test.parquet", 28),
}


def _datasets(dataset: str, data: str | None, size: DemoSize) -> tuple[DatasetSpec, DatasetSpec, int]:
    """(training set, evaluation set, input size) for the demo's dataset."""
    if dataset == "digits":
        train = DatasetSpec(name="digits", source="sklearn_digits", limit=size.train_limit)
        evaluate = DatasetSpec(name="digits", source="sklearn_digits", limit=size.eval_limit)
        return train, evaluate, 8
    if dataset not in PARQUET_SETS:
        raise InputError(f"--dataset: unknown demo dataset {dataset!r}")
    train_file, eval_file, input_size = PARQUET_SETS[dataset]
    if data is None:
        raise InputError(f"--data: the {dataset} demo needs the folder holding {train_file} "
                         f"(e.g. --data ../shared/data/{dataset})")
    root = Path(data)
    for name in (train_file, eval_file):
        if not (root / name).is_file():
            raise InputError(f"--data: {root / name} not found")
    # CPU-sized defaults: 5k training and 2k ranking images unless the size preset says otherwise
    train_limit = size.train_limit or 5000
    eval_limit = size.eval_limit or 2000
    common = {"source": "parquet", "image_column": "image", "label_column": "label"}
    train = DatasetSpec(name=f"{dataset}-train", path=str(root / train_file), limit=train_limit,
                        **common)
    evaluate = DatasetSpec(name=dataset, path=str(root / eval_file), limit=eval_limit, **common)
    return train, evaluate, input_size


def tune_config(out: Path, train: DatasetSpec, input_size: int, size: DemoSize):
    from zoorank.tune.config import TuneConfig

    return TuneConfig.model_validate({
        "store": str(out / "store"),
        "dataset": train.model_dump(),
        "backbone": {"name": "small_cnn", "width": size.width, "depth": 3, "input_size": input_size},
        "epochs": size.epochs,
        "batch_size": 128,
        "probe": {"samples": size.probe[0], "per_sample": size.probe[1], "every": 1},
        "objective": {"metric": "lidar", "report": ["rankme"]},
        "space": {
            "method": {"grid": list(size.methods)},
            "lr": {"grid": list(size.lrs)},
            "seed": {"grid": list(size.seeds)},
        },
        # every trial runs to the end: the demo wants the whole zoo, pruning is shown by `zoorank tune`
        "search": {"name": "demo-zoo", "algorithm": "grid", "scheduler": "fifo",
                   "cpus_per_trial": 0.5},
    })


def run_config_dict(out: Path, evaluate: DatasetSpec, zoo_dir: str, size: DemoSize) -> dict:
    """The demo's run config as written to ``<out>/run.yaml`` (contract 4)."""
    return {
        "store": str(out / "store"),
        "seed": 0,
        "datasets": [evaluate.model_dump(mode="json", exclude_none=True)],
        "models": {"from_tune": zoo_dir},
        "views": [{"name": "clean"},
                  {"name": "simclr", "samples": size.views[0], "per_sample": size.views[1]}],
        "score": {"nc_k": size.nc_k, "nc_reference_size": size.nc_reference},
        "oracle": {"knn": True, "linear_probe": True, **budget_oracle(evaluate, size)},
        # no primary_metric: the default (docs/concepts/primary-metric.md; chosen out
        # of sample, issue 30) orders the demo's zoo, by RankMe.
        "rank": {"bootstrap": 200},
    }


#: labels per class of the demo's label-budget curve (those the oracle's train split can give).
DEMO_LABELS_PER_CLASS = (5, 10, 25, 50)
DIGITS_IMAGES = 1797


def budget_oracle(evaluate: DatasetSpec, size: DemoSize) -> dict:
    """The demo's few-label oracle options: all four scores, 2 seeds, the k a class can give.

    The oracle trains on half of the ranked images (``test_fraction`` 0.5) of about 10 classes
    (digits, CIFAR-10, Fashion-MNIST), so k above a twentieth of them would repeat the full split.
    """
    n = evaluate.limit or size.eval_limit or DIGITS_IMAGES
    ks = [k for k in DEMO_LABELS_PER_CLASS if k <= n // 20] or [DEMO_LABELS_PER_CLASS[0]]
    return {"transferability": ["logme", "h_score", "nleep", "gbc"], "labels_per_class": ks,
            "label_budget_seeds": 2}


def run_config(out: Path, evaluate: DatasetSpec, zoo_dir: str, size: DemoSize) -> RunConfig:
    return parse_config(run_config_dict(out, evaluate, zoo_dir, size), "<demo config>")


def write_run_config(out: Path, data: dict) -> Path:
    """``<out>/run.yaml``: the demo's run config, for ``zoorank run|rank|report`` on its store."""
    path = out / "run.yaml"
    out.mkdir(parents=True, exist_ok=True)
    header = ("# Written by `zoorank demo`: rerun any stage on the demo's store, e.g.\n"
              f"#   zoorank report {path}\n")
    path.write_text(header + yaml.safe_dump(data, sort_keys=False))
    return path


def agreement_table(store: str | Store) -> pd.DataFrame:
    """Kendall τ (with its bootstrap CI) of each label-free metric against each oracle metric
    (``store``: the demo's ``Store``, or its URI)."""
    from zoorank.store import Store

    agree = (store if isinstance(store, Store) else Store(store)).read_frame(AGREEMENT)
    if agree.empty:
        return agree
    agree = agree[agree["family"] == "all"]
    if "labels_per_class" in agree:  # the label-budget rows are printed as crossover lines
        agree = agree[agree["labels_per_class"].isna()]
    if "kind" in agree:  # the priors' rows (params, width): baselines, named as such
        agree = agree.assign(metric=np.where(agree["kind"] == "prior", agree["metric"] + " (prior)",
                                             agree["metric"]))
    return agree[["dataset", "metric", "oracle_metric", "n_models", "kendall_tau",
                  "kendall_ci_low", "kendall_ci_high", "top1_regret"]].reset_index(drop=True)


def _print_agreement(table: pd.DataFrame) -> None:
    from rich import box
    from rich.table import Table

    from zoorank.console import output_console

    console = output_console()
    if table.empty:
        console.print("[yellow]no agreement figures (too few models with oracle scores)[/]")
        return
    oracles = sorted(table["oracle_metric"].unique())
    out = Table(title="Kendall τ of each label-free metric against the label oracle "
                      "(95% bootstrap CI over models)", title_justify="left", pad_edge=False,
                box=box.SIMPLE_HEAD if console.is_terminal else None)
    out.add_column("metric", overflow="fold")
    for o in oracles:
        out.add_column(f"τ vs {o}", justify="right", overflow="fold")
    for metric, rows in table.groupby("metric", sort=False):
        cells = []
        for o in oracles:
            r = rows[rows["oracle_metric"] == o]
            if r.empty or pd.isna(r["kendall_tau"].iloc[0]):
                cells.append("—")
            else:
                r = r.iloc[0]
                cells.append(f"{r.kendall_tau:+.2f} [{r.kendall_ci_low:+.2f}, {r.kendall_ci_high:+.2f}]")
        out.add_row(str(metric), *cells)
    console.print(out)


def run_demo(out: str = "zoorank-demo", dataset: str = "digits", data: str | None = None,
             size: str = "default", address: str | None = None) -> dict:
    """Train the demo zoo with Ray Tune, rank it, print the evidence; returns paths and timings."""
    from zoorank.catalog.context import RunContext
    from zoorank.decide.leaderboard import deferred_verdict, print_verdict
    from zoorank.decide.verdict import read_decision
    from zoorank.pipeline import run_all
    from zoorank.runtime import ensure_ray
    from zoorank.tune.config import experiment_location
    from zoorank.tune.search import run_search

    preset = SIZES[size]
    out_dir = Path(out).resolve()
    train, evaluate, input_size = _datasets(dataset, data, preset)
    ensure_ray(address)
    timings = {}
    t0 = time.perf_counter()
    tcfg = tune_config(out_dir, train, input_size, preset)
    store, _, rel = experiment_location(tcfg)  # the demo's one Store: the zoo's and the ranking's
    run_search(tcfg, address=address, store=store)
    timings["tune"] = time.perf_counter() - t0
    zoo_dir = str(store.local_path(rel))

    t1 = time.perf_counter()
    rdict = run_config_dict(out_dir, evaluate, zoo_dir, preset)
    rcfg = parse_config(rdict, "<demo config>")
    config_path = write_run_config(out_dir, rdict)
    context = RunContext(rcfg, address=address, stores={store.uri: store})
    with deferred_verdict():  # printed last, below the evidence
        report = run_all(rcfg, context=context)
    timings["rank"] = time.perf_counter() - t1
    table = agreement_table(context.store)
    _print_agreement(table)  # the crossover verdicts were printed once, by the report
    print(f"\nzoo: {zoo_dir}/zoo.yaml  store: {rcfg.store}")
    print(f"config: {config_path}  (a rerun skips finished work)")
    print(f"  rerun a stage: zoorank run|score|rank|report {config_path}")
    print(f"time: tune {timings['tune']:.0f} s, embed+score+rank+report {timings['rank']:.0f} s\n")
    decision = read_decision(context.store)
    print_verdict(decision, report=report, config=str(config_path), store=context.store.name)
    return {"store": rcfg.store, "zoo": zoo_dir, "report": report, "agreement": table,
            "timings": timings, "config": str(config_path), "decision": decision}
