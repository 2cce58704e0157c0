"""Cost of RANK alone as the zoo grows (issue 23 item 1): time and memory per model.

Synthetic long tables stand in for a finished SCORE: n models on one dataset, 7 ranked label-free
metrics (values from a latent quality plus noise), the kNN and linear-probe oracle, 8 fold rows per
ranked metric (the rank-uncertainty resamples), healthy health rows, and two model families (so the
agreement table has 'all' + 2 families × 8 candidates × 2 oracles = 48 bootstrapped rows), and
few-label cells (LogME at 5 labels per class, 2 seeds: 6 more bootstrapped rows of the label-budget
curve). RANK's real functions run on them, as ``zoorank.rank.write_rank_outputs`` calls them:
``build_leaderboard``, ``decide`` (fold bootstrap, rank intervals, consensus), ``build_agreement``
(Kendall τ-b, Spearman, Pearson with their bootstrap intervals), ``budget.with_budget_rows`` and
the input fingerprint that lets a rerun skip it all.

Each size runs in a fresh child process, so its peak RSS (``ru_maxrss``) is RANK's alone (above
the RSS after imports and table building, printed beside it). In the same child the old quadratic
``kendall_tau_b_rows`` (a copy below: B × n × n sign arrays, chunked by 256 replicates) is run as
the baseline on a few replicates of one agreement row, beside today's τ on all of them
(``ResampledKendall``, and ``scipy.stats.kendalltau`` per replicate for reference); its time
per 1,000 replicates is extrapolated (it is linear in the replicates) and its memory is measured
at the replicates it ran (it grows with min(B, 256) · n²).

Prints, never asserts. Example (about 3 minutes on 2 busy cores)::

    .venv/bin/python benchmarks/bench_rank.py --models 100,1000,2000
"""

from __future__ import annotations

import argparse
import json
import os
import resource
import subprocess
import sys
import time
import tracemalloc
from types import SimpleNamespace

import numpy as np
import pandas as pd

METRICS = ["rankme", "alpha_req", "twonn_id", "mle_id", "uniformity", "coding_rate",
           "cluster_learnability"]
ORACLES = ["knn_accuracy", "linear_probe_accuracy"]
DATASET = "synth"
FOLDS = 8
BUDGET_K = (5,)
BUDGET_SEEDS = 2
MB = 1 << 20


def kendall_tau_b_rows_quadratic(x: np.ndarray, y: np.ndarray, chunk: int = 256) -> np.ndarray:
    """The baseline: zoorank's τ-b rows before issue 23 (B × n × n sign arrays per chunk)."""
    x, y = np.atleast_2d(np.asarray(x, np.float64)), np.atleast_2d(np.asarray(y, np.float64))
    out = np.empty(x.shape[0])
    for start in range(0, x.shape[0], chunk):
        xs, ys = x[start:start + chunk], y[start:start + chunk]
        sx = np.sign(xs[:, :, None] - xs[:, None, :])
        sy = np.sign(ys[:, :, None] - ys[:, None, :])
        num = (sx * sy).sum(axis=(1, 2))
        den = np.sqrt(np.abs(sx).sum(axis=(1, 2)) * np.abs(sy).sum(axis=(1, 2)))
        with np.errstate(invalid="ignore", divide="ignore"):
            out[start:start + chunk] = np.where(den > 0, num / den, np.nan)
    return out


def tables(n: int, seed: int = 0) -> dict[str, pd.DataFrame]:
    """Long metric, oracle, fold and health rows of n synthetic models (SCORE's schema)."""
    from zoorank.oracle.budget import budget_metric_name
    from zoorank.oracle.resample import HEALTH_COLUMNS, RESAMPLES_COLUMNS
    from zoorank.store.schema import METRICS_COLUMNS

    rng = np.random.default_rng(seed)
    ids = [f"m{i:05d}" for i in range(n)]
    quality = rng.normal(size=n)

    def long(names, values_of) -> pd.DataFrame:
        rows = [{"model_id": m, "dataset": DATASET, "metric": name, "value": float(v),
                 "params": "{}", "n": 2000, "dim": 512, "seed": 0, "zoorank_version": "bench",
                 "fingerprint": f"{m}-{name}"}
                for name in names for m, v in zip(ids, values_of(name))]
        return pd.DataFrame(rows, columns=METRICS_COLUMNS)

    scale = {name: rng.uniform(0.5, 2.0) for name in METRICS}
    metric_values = {name: quality * scale[name] + rng.normal(0, 1.0, n) for name in METRICS}
    metrics = long(METRICS, lambda name: metric_values[name])
    oracle = long(ORACLES, lambda name: 1 / (1 + np.exp(-(quality + rng.normal(0, 0.5, n)))))
    # few-label cells of the label-budget curve: LogME on k labels per class, seeds 0 and 1
    cells = [budget_metric_name("logme", k, s) for k in BUDGET_K for s in range(BUDGET_SEEDS)]
    oracle = pd.concat([oracle, long(cells, lambda name: quality + rng.normal(0, 1.5, n))],
                       ignore_index=True)
    fold_noise = rng.normal(0, 0.3, (len(METRICS), n, FOLDS))
    folds = pd.DataFrame({
        "model_id": np.tile(np.repeat(ids, FOLDS), len(METRICS)),
        "dataset": DATASET,
        "metric": np.repeat(METRICS, n * FOLDS),
        "fold": np.tile(np.arange(FOLDS), n * len(METRICS)),
        "value": np.concatenate([(metric_values[name][:, None] + fold_noise[k]).ravel()
                                 for k, name in enumerate(METRICS)]),
        "fingerprint": "f"}, columns=RESAMPLES_COLUMNS)
    health = pd.DataFrame({"model_id": ids, "dataset": DATASET, "n": 2000, "dim": 512,
                           "non_finite_fraction": 0.0, "relative_spread": 1.0,
                           "effective_rank": 200.0, "duplicate_fraction": 0.0,
                           "fingerprint": "h"}, columns=HEALTH_COLUMNS)
    manifest = pd.DataFrame({"dataset": DATASET, "view": "clean", "model_id": ids,
                             "status": "done", "error": None, "fingerprint": "e"})
    return {"ids": ids, "metrics": metrics, "oracle": oracle, "folds": folds, "health": health,
            "manifest": manifest}


def child(n: int, bootstrap: int, baseline_replicates: int) -> dict:
    """One size in this (fresh) process: RANK's phases, then the τ baseline."""
    from zoorank.catalog.stage_inputs import rank_inputs
    from zoorank.config.loading import parse_config
    from zoorank.decide.decision import decide
    from zoorank.metrics.agreement import (
        ResampledKendall,
        bootstrap_indices,
        draw_counts,
        kendall_tau_b_rows,
    )
    from zoorank.oracle import budget
    from zoorank.rank.agreement_table import build_agreement
    from zoorank.rank.board import build_leaderboard

    config = parse_config({
        "store": "/nonexistent-bench-store", "seed": 0,
        "datasets": [{"name": DATASET, "source": "sklearn_digits"}],
        "models": [{"id": "bench", "source": "python", "name": "bench:unused"}],
        "metrics": METRICS, "oracle": {"knn": True, "linear_probe": True},
        "score": {"resample_folds": FOLDS},
        "rank": {"bootstrap": bootstrap, "resamples": bootstrap}})
    t = tables(n)
    models = [SimpleNamespace(model_id=m, family=("simclr", "vicreg")[i % 2], group=None,
                              datasets=None) for i, m in enumerate(t["ids"])]
    rss0 = resource.getrusage(resource.RUSAGE_SELF).ru_maxrss * 1024
    seconds = {}
    start = time.perf_counter()
    oracle, cells = budget.split_oracle(t["oracle"])
    board, settings = build_leaderboard(config, models, t["metrics"], oracle)
    seconds["leaderboard"] = time.perf_counter() - start
    start = time.perf_counter()
    board, _ = decide(config, board, settings, t["metrics"], t["folds"], t["health"])
    seconds["decide"] = time.perf_counter() - start
    start = time.perf_counter()
    agree = build_agreement(config, board, t["metrics"], oracle)
    seconds["agreement"] = time.perf_counter() - start
    start = time.perf_counter()
    agree = budget.with_budget_rows(agree, board, cells, {o: 1 for o in ORACLES},
                                    config.rank.bootstrap, config.seed)
    seconds["budget"] = time.perf_counter() - start
    start = time.perf_counter()
    assert rank_inputs(config, models, t["metrics"], t["oracle"], t["folds"], t["health"],
                       t["manifest"], {DATASET: "labels"}).fingerprint
    seconds["skip check"] = time.perf_counter() - start
    peak = resource.getrusage(resource.RUSAGE_SELF).ru_maxrss * 1024

    # one agreement row's τ bootstrap: today's (all replicates) against the old quadratic one
    x, y = board[f"{DATASET}/rankme"].to_numpy(), board[f"{DATASET}/knn_accuracy"].to_numpy()
    idx = bootstrap_indices(n, bootstrap, seed=0)
    tracemalloc.start()
    start = time.perf_counter()
    new = ResampledKendall(x, y)(draw_counts(idx, n))
    new_s = time.perf_counter() - start
    new_peak = tracemalloc.get_traced_memory()[1]
    tracemalloc.stop()
    start = time.perf_counter()
    by_scipy = kendall_tau_b_rows(x[idx], y[idx])
    scipy_s = time.perf_counter() - start
    assert np.allclose(new, by_scipy, equal_nan=True)
    few = idx[:baseline_replicates]
    tracemalloc.start()
    start = time.perf_counter()
    old = kendall_tau_b_rows_quadratic(x[few], y[few])
    old_s = time.perf_counter() - start
    old_peak = tracemalloc.get_traced_memory()[1]
    tracemalloc.stop()
    assert np.allclose(old, new[:baseline_replicates], equal_nan=True)
    return {"models": n, "agreement_rows": len(agree), "seconds": seconds,
            "rss_setup": rss0, "rss_peak": peak, "tau_new_s": new_s, "tau_new_peak": new_peak,
            "tau_scipy_s": scipy_s, "tau_old_s": old_s, "tau_old_peak": old_peak,
            "tau_old_replicates": baseline_replicates, "bootstrap": bootstrap}


def main() -> None:
    p = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    p.add_argument("--models", default="100,1000,2000", help="comma-separated zoo sizes")
    p.add_argument("--bootstrap", type=int, default=1000, help="rank.bootstrap and resamples")
    p.add_argument("--baseline-replicates", type=int, default=8,
                   help="replicates the quadratic baseline runs (memory grows with them · n²)")
    p.add_argument("--child", type=int, help=argparse.SUPPRESS)
    args = p.parse_args()
    if args.child:
        print(json.dumps(child(args.child, args.bootstrap, args.baseline_replicates)))
        return
    results = []
    for n in [int(v) for v in args.models.split(",")]:
        out = subprocess.run([sys.executable, __file__, "--child", str(n), "--bootstrap",
                              str(args.bootstrap), "--baseline-replicates",
                              str(args.baseline_replicates)],
                             capture_output=True, text=True, check=True, env=os.environ)
        results.append(json.loads(out.stdout.strip().splitlines()[-1]))
        r = results[-1]
        print(f"{n} models done: RANK {sum(r['seconds'].values()):.1f} s", flush=True)
    print()
    head = ["models", "agreement rows", "leaderboard s", "decide s", "agreement s", "budget s",
            "skip check s", "RANK s", "RANK s/model", "RSS setup MB", "RSS peak MB"]
    print(" | ".join(head))
    for r in results:
        s = r["seconds"]
        total = s["leaderboard"] + s["decide"] + s["agreement"] + s["budget"]
        print(f"{r['models']} | {r['agreement_rows']} | {s['leaderboard']:.2f} | "
              f"{s['decide']:.2f} | {s['agreement']:.2f} | {s['budget']:.2f} | "
              f"{s['skip check']:.3f} | {total:.1f} | "
              f"{total / r['models'] * 1000:.1f} ms | {r['rss_setup'] / MB:.0f} | "
              f"{r['rss_peak'] / MB:.0f}")
    print()
    for r in results:
        b, k = r["bootstrap"], r["tau_old_replicates"]
        old_full = r["tau_old_s"] / k * b
        print(f"tau  {r['models']} models  {b} replicates  zoorank {r['tau_new_s']:.2f} s "
              f"(peak {r['tau_new_peak'] / MB:.0f} MB)  scipy.stats.kendalltau per replicate "
              f"{r['tau_scipy_s']:.2f} s  quadratic {old_full:.1f} s "
              f"(extrapolated from {k} replicates in {r['tau_old_s']:.2f} s; peak "
              f"{r['tau_old_peak'] / MB:.0f} MB at {k}, ×{min(b, 256) / k:.0f} at chunk "
              f"{min(b, 256)})  {old_full / r['tau_new_s']:.0f}× faster")
    base = results[0]
    for r in results[1:]:
        per = lambda x: sum(v for k, v in x["seconds"].items()  # noqa: E731
                            if k != "skip check") / x["models"]
        print(f"rank  {r['models']} vs {base['models']} models  time per model "
              f"{per(r) * 1000:.1f} ms vs {per(base) * 1000:.1f} ms  ratio {per(r) / per(base):.2f}"
              f"  peak RSS {r['rss_peak'] / MB:.0f} MB")


if __name__ == "__main__":
    main()
