"""TUNE-stage figures: the label-free objective's cost, and how well it picks hyperparameters.

1. **Overhead** (in this process, no Ray): for each SSL method, one epoch of training against one
   evaluation of the label-free objective (embed the n × q probe set + the metric) with the
   config's one-thread-per-trial setting. Goal: objective < 10% of an epoch. Each metric is also
   timed alone (CLID's k-means and k-NN cost more than the spectral metrics).
2. **Selection** (Ray Tune, FIFO so every trial trains the same number of epochs): one search per
   SSL method over that method's own hyperparameters × lr, reporting LiDAR, RankMe, RankMe(aug) and
   CLID every epoch, with the kNN and linear-probe oracle on each trial's final backbone. For each
   metric: the oracle accuracy of the trial it picks against the oracle-best (regret) and Kendall
   τ-b (95% bootstrap CI over trials) between the metric and the oracle, within each method (LiDAR
   is only comparable within a method) and over the pooled trials.

Prints, never asserts; figures are what the run measured, whichever way they point. Examples::

    .venv/bin/python benchmarks/performance/bench_tune.py                       # digits, CPU, ~10-20 min
    .venv/bin/python benchmarks/performance/bench_tune.py --quick               # a smoke run
    .venv/bin/python benchmarks/performance/bench_tune.py --dataset cifar10 --limit 2000 --epochs 3
"""

from __future__ import annotations

import argparse
import os
import sys
import tempfile
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parents[1]))  # benchmarks/: the harness
import harness
import numpy as np
import pandas as pd
from harness import frame_table, timed

import zoorank.runtime  # noqa: F401  (loopback Ray environment)

os.environ.setdefault("RAY_DATA_DISABLE_PROGRESS_BARS", "1")

import torch  # noqa: E402

from zoorank.metrics.label_free.clid import clid  # noqa: E402
from zoorank.stats.agreement import agreement  # noqa: E402
from zoorank.tune.config import ObjectiveSpec, parse_tune_config  # noqa: E402
from zoorank.tune.objective import evaluate_probe  # noqa: E402
from zoorank.tune.search import prepare_search, run_search  # noqa: E402
from zoorank.tune.trial import make_trainer  # noqa: E402

REPO = Path(__file__).resolve().parents[2]
SHARED = Path(os.environ.get("ZOORANK_SHARED_DATA", REPO.parent / "shared" / "data"))
METRICS = ["lidar", "rankme", "rankme_aug", "clid"]
ORACLES = ["knn_accuracy", "linear_probe_accuracy"]
REPORT = harness.Report()
say = REPORT.say

#: per method: its own hyperparameter grid (× lr), as in the LiDAR paper's per-method sweeps
METHOD_SPACES = {
    "simclr": {"temperature": [0.05, 0.2, 1.0]},
    "vicreg": {"var_weight": [0.0, 5.0, 25.0]},
    "byol": {"ema": [0.9, 0.99, 0.999]},
}


def base_config(args, store: str) -> dict:
    if args.dataset == "digits":
        dataset = {"name": "digits", "source": "sklearn_digits"}
        if args.limit:
            dataset["limit"] = args.limit
        backbone = {"name": "small_cnn", "width": args.width, "depth": 3}
        oracle_dataset = None
    else:
        path = SHARED / "cifar10"
        if not path.is_dir():
            sys.exit(f"bench_tune: CIFAR-10 not found at {path} (set ZOORANK_SHARED_DATA)")
        dataset = {"name": "cifar10", "source": "parquet", "path": str(path / "train.parquet"),
                   "label_column": "label", "limit": args.limit or 5000}
        oracle_dataset = {"name": "cifar10_test", "source": "parquet",
                          "path": str(path / "test.parquet"), "label_column": "label",
                          "limit": args.oracle_limit}
        backbone = {"name": "small_cnn", "width": args.width, "depth": 4, "input_size": 32}
    data = {
        "store": store,
        "dataset": dataset,
        "backbone": backbone,
        "epochs": args.epochs,
        "batch_size": 128,
        "proj_hidden": 256,
        "proj_dim": 64,
        "probe": {"samples": args.probe_n, "per_sample": args.probe_q},
        "objective": {"metric": "lidar", "report": METRICS[1:]},
        "search": {"scheduler": "fifo", "cpus_per_trial": args.cpus_per_trial},
        "oracle": {"knn": True, "linear_probe": True},
    }
    if oracle_dataset:
        data["oracle_dataset"] = oracle_dataset
    return data


# --------------------------------------------------------------------------------------------
# 1. overhead


def overhead(args, store: str) -> pd.DataFrame:
    from threadpoolctl import threadpool_limits

    # as in a trial: one torch thread, one BLAS/OpenMP thread
    torch.set_num_threads(1)
    threadpool_limits(1)
    config = parse_tune_config(base_config(args, store), "bench")
    setup = prepare_search(config)
    rows = []
    for method in METHOD_SPACES:
        trainer = make_trainer(setup, config.trial_params({"method": method, "lr": 1e-3}))
        for epoch in range(args.overhead_epochs):
            stats = trainer.train_steps(trainer.steps_per_epoch)
            full = evaluate_probe(trainer, setup.probe, config.objective)
            row = {"method": method, "epoch": epoch + 1, "epoch_seconds": stats["train_seconds"],
                   "all_metrics_seconds": full["objective_seconds"],
                   "probe_embed_seconds": full["probe_embed_seconds"]}
            for metric in METRICS:
                one = ObjectiveSpec(metric=metric)
                row[f"{metric}_seconds"] = evaluate_probe(trainer, setup.probe, one)[
                    "objective_seconds"]
            rows.append(row)
    frame = pd.DataFrame(rows)
    say("\n## Objective overhead per report (one thread, CPU)\n")
    say(frame_table(frame))
    epoch = frame["epoch_seconds"].median()
    n_train = len(setup.images)
    say(f"\nepoch: {n_train} images × 2 views, forward + backward; probe: "
        f"{args.probe_n}×{args.probe_q} views (+{args.probe_n} clean for RankMe/CLID), forward")
    for metric in [*METRICS, "all_metrics", "probe_embed"]:
        t = frame[f"{metric}_seconds"].median()
        goal = "met" if t < 0.1 * epoch else "NOT met"
        say(f"overhead  {args.dataset}  {config.backbone.name} w{args.width}  probe "
            f"{args.probe_n}×{args.probe_q}  {metric:<12} {t:.3f} s/report  epoch {epoch:.3f} s"
            f"  {t / epoch:6.1%} of an epoch  (goal < 10%: {goal})")
    return frame


# --------------------------------------------------------------------------------------------
# 2. selection


def selection_table(frame: pd.DataFrame, pool: str) -> list[dict]:
    rows = []
    for metric in METRICS:
        if metric == "clid":
            ok = frame["final_cluster_learnability"].notna() & frame["final_twonn_id"].notna()
            values = pd.Series(np.nan, index=frame.index)
            if ok.sum() >= 2:
                values[ok] = clid(frame.loc[ok, "final_cluster_learnability"].to_numpy(),
                                  frame.loc[ok, "final_twonn_id"].to_numpy())
        else:
            values = frame[f"final_{metric}"]
        for oracle in ORACLES:
            ok = frame[oracle].notna() & values.notna()
            if ok.sum() < 3:
                continue
            a = agreement(values[ok].to_numpy(float), frame.loc[ok, oracle].to_numpy(float),
                          bootstrap=1000, seed=0)
            rows.append({"pool": pool, "metric": metric, "oracle": oracle, "trials": a["n_models"],
                         "picked": a["top1_oracle"], "best": a["oracle_best"],
                         "regret": a["top1_regret"], "kendall_tau": a["kendall_tau"],
                         "tau_ci_low": a["kendall_ci_low"], "tau_ci_high": a["kendall_ci_high"]})
    return rows


def selection(args, store: str) -> pd.DataFrame:
    frames = []
    for method, own in METHOD_SPACES.items():
        data = base_config(args, store)
        data["method"] = method
        data["space"] = {k: {"grid": v} for k, v in own.items()}
        data["space"]["lr"] = {"grid": args.lrs}
        data["search"]["name"] = f"bench-{args.dataset}-{method}"
        config = parse_tune_config(data, "bench")
        frame, seconds = timed(run_search, config, verbose=False)
        say(f"search {method}: {len(frame)} trials in {seconds:.0f} s; median "
            f"objective overhead in the trials {frame['overhead'].median():.1%}")
        frames.append(frame)
    trials = pd.concat(frames, ignore_index=True)
    cols = ["model_id", "status", "reports", *[f"final_{m}" for m in METRICS if m != "clid"],
            "final_cluster_learnability", "final_twonn_id", *ORACLES]
    say("\n## Trials\n")
    say(frame_table(trials[cols]))
    rows = []
    for method in METHOD_SPACES:
        rows += selection_table(trials[trials["family"] == method].reset_index(drop=True), method)
    rows += selection_table(trials, "all methods")
    picks = pd.DataFrame(rows)
    say("\n## Label-free selection vs the label oracle (regret in accuracy; τ-b with 95% CI)\n")
    say(frame_table(picks))
    for r in picks[picks["oracle"] == "knn_accuracy"].itertuples():
        verdict = ("agrees" if r.tau_ci_low > 0 else "disagrees" if r.tau_ci_high < 0
                   else "no significant agreement")
        if r.trials < 6:
            verdict = "too few trials for a verdict"
        say(f"select  {args.dataset}  {r.pool:<11} {r.metric:<10} picks kNN {r.picked:.3f}  "
            f"oracle-best {r.best:.3f}  regret {r.regret:.3f}  τ {r.kendall_tau:+.3f} "
            f"[{r.tau_ci_low:+.2f}, {r.tau_ci_high:+.2f}]  {verdict}  ({r.trials} trials)")
    return trials


def main() -> None:
    p = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    p.add_argument("--dataset", choices=["digits", "cifar10"], default="digits")
    p.add_argument("--limit", type=int, default=None, help="training images (default: all digits"
                   " / 5000 CIFAR-10 train)")
    p.add_argument("--oracle-limit", type=int, default=2000, help="CIFAR-10 test images (oracle)")
    p.add_argument("--epochs", type=int, default=5)
    p.add_argument("--width", type=int, default=32)
    p.add_argument("--probe-n", type=int, default=256)
    p.add_argument("--probe-q", type=int, default=8)
    p.add_argument("--lrs", type=float, nargs="+", default=[1e-3, 1e-2])
    p.add_argument("--overhead-epochs", type=int, default=3)
    p.add_argument("--cpus-per-trial", type=float, default=0.5)
    p.add_argument("--skip-selection", action="store_true")
    p.add_argument("--quick", action="store_true", help="600 images, 2 epochs, one lr")
    p.add_argument("--store", default=None, help="keep the searches here (default: a temp dir)")
    harness.results_option(p, "bench_tune")
    args = p.parse_args()
    if args.quick:
        args.limit, args.epochs, args.lrs, args.overhead_epochs = 600, 2, [3e-3], 1
    store = args.store or tempfile.mkdtemp(prefix="bench-tune-")
    say(f"bench_tune: {args.dataset}, torch {torch.__version__}")
    overhead(args, store)
    if not args.skip_selection:
        trials = selection(args, store)
        trials.to_csv(Path(store) / f"bench_tune_{args.dataset}_trials.csv", index=False)
    REPORT.write(args.markdown, f"bench_tune — the label-free objective on {args.dataset}")


if __name__ == "__main__":
    main()
