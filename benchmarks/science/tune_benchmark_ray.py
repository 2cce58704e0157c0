"""Label-free Tune under real Ray Tune, measured: six search spaces on three datasets, every
trial trained to the full budget (FIFO), the truth taken as kNN accuracy on held labels at every
epoch, ASHA replayed from the per-epoch reports and checked against real ASHA runs; writes
``benchmarks/results/tune_benchmark_ray.md`` (``tune_benchmark.py`` is its in-process companion
on digits-only spaces).

Run (resumable: each space's per-epoch table is cached under
``benchmarks/results/tune_benchmark_ray/`` and a space already there is not run again)::

    PYTHONPATH=$PWD python benchmarks/science/tune_benchmark_ray.py            # collect + report
    PYTHONPATH=$PWD python benchmarks/science/tune_benchmark_ray.py --report   # report from the cache

Spaces: SimCLR / VICReg / BYOL on scikit-learn's digits (8×8), SimCLR on 1,000 Fashion-MNIST
images at 12 px, VICReg on 1,000 CIFAR-10 images at 16 px (``zoorank tune``'s built-in trainer,
a 2-stage small CNN), and a user's own SimCLR loop on digits searched through
``zoorank.integrations.ray_tune.search`` (``tune_user_trainer.py``). 8 configurations × 6 epochs
each. Per (trial, epoch): the values Tune saw on the search's probe set, the same metrics on a
fresh probe set drawn with another seed (what ranking the exported zoo sees), the training loss,
and the kNN accuracy (k = 20) on a stratified held-out split of the labelled images.
"""

from __future__ import annotations

import argparse
import json
import os
import sys
import time
from pathlib import Path

import numpy as np
import pandas as pd

sys.path.insert(0, str(Path(__file__).resolve().parents[1]))
import harness  # noqa: E402,F401  (the benchmarks' shared header and machine facts)

HERE = Path(__file__).resolve().parent
ROOT = HERE.parents[1]
CACHE = ROOT / "benchmarks" / "results" / "tune_benchmark_ray"
STORE = Path(os.environ.get("TUNE_BENCH_STORE", "/tmp/zoorank-tune-benchmark"))
DATA = Path(os.environ.get("ZOORANK_SHARED_DATA", ROOT.parent / "shared" / "data"))
EPOCHS = 6
#: the label-free metrics Tune can report that every space reports (``projector_rankme`` only where
#: the trainer has a projector zoorank sees: the built-in ones)
METRICS = ("rankme", "lidar", "rankme_aug", "twonn_id")
LR = [3e-4, 1e-3, 3e-3, 1e-2]
DIGITS = {"name": "digits", "source": "sklearn_digits"}


def _parquet(name: str, limit: int) -> dict:
    return {"name": name, "source": "parquet", "path": str(DATA / name / "train.parquet"),
            "label_column": "label", "limit": limit}


SPACES: dict[str, dict] = {
    "simclr-digits": {"dataset": DIGITS, "method": "simclr", "input_size": 8,
                      "space": {"lr": LR, "temperature": [0.1, 0.5]}},
    "vicreg-digits": {"dataset": DIGITS, "method": "vicreg", "input_size": 8,
                      "space": {"lr": LR, "var_weight": [25.0, 5.0]}},
    "byol-digits": {"dataset": DIGITS, "method": "byol", "input_size": 8,
                    "space": {"lr": LR, "ema": [0.9, 0.99]}},
    "simclr-fashion": {"dataset": _parquet("fashion_mnist", 1000), "method": "simclr",
                       "input_size": 12, "space": {"lr": LR, "temperature": [0.1, 0.5]}},
    "vicreg-cifar10": {"dataset": _parquet("cifar10", 1000), "method": "vicreg",
                       "input_size": 16, "space": {"lr": LR, "var_weight": [25.0, 5.0]}},
    "user-simclr-digits": {"user": True, "space": {"lr": [0.01, 0.03, 0.1, 0.3],
                                                   "temperature": [0.1, 0.5]}},
}
#: the spaces also searched by real ASHA (one trial at a time, so the run is deterministic)
ASHA_CHECKED = ("simclr-digits", "user-simclr-digits")
ASHA = {"grace_period": 1, "reduction_factor": 2.0}


def tune_config(name: str, scheduler: str = "fifo", objective: str = "rankme") -> dict:
    s = SPACES[name]
    return {
        "store": str(STORE), "dataset": s["dataset"], "method": s["method"], "epochs": EPOCHS,
        "backbone": {"name": "small_cnn", "width": 16, "depth": 2, "input_size": s["input_size"]},
        "batch_size": 128, "proj_hidden": 128, "proj_dim": 64,
        "probe": {"samples": 256, "per_sample": 4},
        "objective": {"metric": objective, "report": [m for m in METRICS if m != objective],
                      "features": "both"},
        "space": {k: {"grid": v} for k, v in s["space"].items()},
        "search": {"name": f"{name}-{scheduler}", "scheduler": scheduler, **ASHA,
                   "max_concurrent_trials": 8 if scheduler == "fifo" else 1,
                   "cpus_per_trial": 0.25},
        "export_epochs": scheduler == "fifo",
    }


def _order(trial_id: str) -> int:
    return int(str(trial_id).rsplit("_", 1)[-1])


def _fresh_probe(dataset: dict, input_size: int, mean, std):
    from zoorank.probe import build_probe_set

    return build_probe_set(dataset, input_size=input_size, samples=256, per_sample=4, seed=1,
                           interpolation="bilinear", mean=mean, std=std)


def _fresh_values(model, probe) -> dict[str, float]:
    from zoorank.probe import evaluate

    result = evaluate(model, probe, metrics=list(METRICS))
    return {f"fresh_{k}": float(result.metrics.get(k, np.nan)) for k in METRICS}


def collect_builtin(name: str) -> pd.DataFrame:
    """FIFO grid with every epoch's checkpoint kept; one row per (trial, epoch)."""
    from zoorank.config import OracleSpec
    from zoorank.tune.config import parse_tune_config
    from zoorank.tune.search import prepare_search, run_search
    from zoorank.tune.trial_oracle import _load_backbone, _oracle_scores, oracle_data

    config = parse_tune_config(tune_config(name), name)
    t0 = time.perf_counter()
    frame = run_search(config, verbose=False)
    train_s = time.perf_counter() - t0
    setup = prepare_search(config)
    labelled = config.model_copy(update={"oracle": OracleSpec(knn=True)})
    images, labels, train, test = oracle_data(labelled, setup)
    probe = _fresh_probe(SPACES[name]["dataset"], SPACES[name]["input_size"], setup.mean,
                         setup.std)
    rows = []
    t1 = time.perf_counter()
    for trial in frame.itertuples():
        progress = pd.read_csv(Path(trial.trial_dir) / "progress.csv")
        progress = progress.sort_values("training_iteration").set_index("training_iteration")
        paths = dict(zip(trial.checkpoint_iterations, trial.checkpoints))
        truth = _oracle_scores(setup, [paths[i] for i in progress.index], images, labels, train,
                               test, labelled.oracle, config.probe_seed)
        for (it, rep), t in zip(progress.iterrows(), truth):
            model = _load_backbone(setup.factory, setup.model_kwargs, paths[it])
            row = {"space": name, "trial_id": trial.trial_id, "order": _order(trial.trial_id),
                   "params": json.dumps({k: getattr(trial, f"param_{k}")
                                         for k in SPACES[name]["space"]}),
                   "epoch": int(it), "train_loss": float(rep["train_loss"]),
                   "knn_accuracy": float(t.get("knn_accuracy", np.nan)),
                   **{f"tune_{k}": float(rep.get(k, np.nan))
                      for k in [*METRICS, "projector_rankme"]},
                   **_fresh_values(model, probe)}
            rows.append(row)
    table = pd.DataFrame(rows)
    table.attrs["seconds"] = {"search": train_s, "scoring": time.perf_counter() - t1}
    return table


def _user_search(name: str, scheduler: str):
    import tune_user_trainer as user
    from ray import tune

    from zoorank.integrations.ray_tune import search
    from zoorank.probe import build_probe_set

    probe = build_probe_set(DIGITS, input_size=8, samples=256, per_sample=4, seed=0,
                            interpolation="bilinear", mean=user.MEAN, std=user.STD)
    space = {k: tune.grid_search(v) for k, v in SPACES[name]["space"].items()}
    space |= {"epochs": EPOCHS, "seed": 0}
    return search(user.train, probe, space, model=user.BACKBONE, metric="rankme", mode="max",
                  max_t=EPOCHS, scheduler=scheduler, storage_path=STORE / "user",
                  name=f"{name}-{scheduler}", cpus_per_trial=0.25, metrics=list(METRICS),
                  max_concurrent_trials=8 if scheduler == "fifo" else 1,
                  keep_checkpoints=None if scheduler == "fifo" else 1, **ASHA), probe


def collect_user(name: str) -> pd.DataFrame:
    import tune_user_trainer as user

    from zoorank.tune.trial_oracle import _load_backbone

    t0 = time.perf_counter()
    outcome, _ = _user_search(name, "fifo")
    train_s = time.perf_counter() - t0
    probe = _fresh_probe(DIGITS, 8, user.MEAN, user.STD)
    factory, kwargs = "small_cnn", user.BACKBONE["model_kwargs"]
    rows = []
    t1 = time.perf_counter()
    for result in outcome.grid:
        history = result.metrics_dataframe.sort_values("training_iteration")
        kept = {m["training_iteration"]: c.path for c, m in result.best_checkpoints}
        for rep in history.itertuples():
            model = _load_backbone(factory, kwargs, f"{kept[rep.training_iteration]}/"
                                   "backbone.safetensors")
            rows.append({
                "space": name, "trial_id": rep.trial_id, "order": _order(rep.trial_id),
                "params": json.dumps({k: result.config[k] for k in SPACES[name]["space"]}),
                "epoch": int(rep.training_iteration), "train_loss": float(rep.train_loss),
                "knn_accuracy": float(rep.knn_accuracy),
                **{f"tune_{k}": float(getattr(rep, k, np.nan)) for k in METRICS},
                "tune_projector_rankme": np.nan, **_fresh_values(model, probe)})
    table = pd.DataFrame(rows)
    table.attrs["seconds"] = {"search": train_s, "scoring": time.perf_counter() - t1}
    return table


def run_real_asha(name: str) -> dict:
    """Real ASHA on ``rankme``, one trial at a time: each trial's reports and objective values."""
    t0 = time.perf_counter()
    if SPACES[name].get("user"):
        outcome, _ = _user_search(name, "asha")
        trials = {}
        for r in outcome.grid:
            h = r.metrics_dataframe.sort_values("training_iteration")
            trials[str(h.trial_id.iloc[0])] = {
                "params": {k: r.config[k] for k in SPACES[name]["space"]},
                "trajectory": [float(v) for v in h["rankme"]]}
    else:
        from zoorank.tune.config import parse_tune_config
        from zoorank.tune.search import run_search

        frame = run_search(parse_tune_config(tune_config(name, "asha"), name), verbose=False)
        trials = {str(r.trial_id): {
            "params": {k: getattr(r, f"param_{k}") for k in SPACES[name]["space"]},
            "trajectory": [float(v) for v in r.trajectory]} for r in frame.itertuples()}
    return {"space": name, "objective": "rankme", **ASHA, "max_t": EPOCHS, "trials": trials,
            "seconds": time.perf_counter() - t0}


def collect(names: list[str], asha: bool = False) -> None:
    """The FIFO grids of ``names`` (or with ``asha`` the real ASHA runs of those checked)."""
    from zoorank.runtime import ensure_ray

    CACHE.mkdir(parents=True, exist_ok=True)
    os.environ["PYTHONPATH"] = os.pathsep.join(
        [str(HERE), str(ROOT), os.environ.get("PYTHONPATH", "")])
    sys.path.insert(0, str(HERE))
    ensure_ray()
    for name in names:
        out = CACHE / f"{name}.parquet"
        if not asha and not out.exists():
            print(f"[{time.strftime('%H:%M:%S')}] grid {name}", flush=True)
            table = collect_user(name) if SPACES[name].get("user") else collect_builtin(name)
            table.to_parquet(out.with_suffix(".tmp"))
            (CACHE / f"{name}.cost.json").write_text(json.dumps(table.attrs["seconds"]))
            out.with_suffix(".tmp").rename(out)
            print(f"[{time.strftime('%H:%M:%S')}] done {name} {table.attrs['seconds']}",
                  flush=True)
        out = CACHE / f"{name}.asha.json"
        if asha and name in ASHA_CHECKED and not out.exists():
            print(f"[{time.strftime('%H:%M:%S')}] asha {name}", flush=True)
            out.write_text(json.dumps(run_real_asha(name), indent=1))


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--report", action="store_true", help="only write the results page")
    parser.add_argument("--asha", action="store_true", help="run the real ASHA checks only")
    parser.add_argument("--spaces", nargs="*", default=["simclr-digits", "user-simclr-digits",
                                                         "vicreg-digits", "byol-digits",
                                                         "simclr-fashion", "vicreg-cifar10"])
    args = parser.parse_args()
    if not args.report:
        collect(args.spaces, asha=args.asha)
    from tune_benchmark_ray_report import write_report  # noqa: E402  (beside this file)

    write_report(CACHE, SPACES, ROOT / "benchmarks" / "results" / "tune_benchmark_ray.md")


if __name__ == "__main__":
    sys.path.insert(0, str(HERE))
    main()
