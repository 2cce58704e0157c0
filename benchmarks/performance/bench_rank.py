"""Cost of RANK as the zoo grows (issues 23, 33): the RANK that ships, time and memory per model.

Synthetic long tables stand in for a finished SCORE and oracle: n models on one dataset, 7 ranked
label-free metrics (values from a latent quality plus noise), the kNN and linear-probe oracle, 8
fold rows per ranked metric (the rank-uncertainty resamples), healthy health rows, a manifest
with parameter counts and widths, a ``prior:`` per model, two model families (so the agreement
table has 'all' + 2 families × candidates × 2 oracles rows) and few-label cells (LogME at 5 labels
per class, 2 seeds: the label-budget rows). On them runs RANK's stage function
``zoorank.rank.write_rank_outputs`` on a fresh local store, as ``zoorank rank`` calls it once the
tables are read: leaderboard, priors, decision (fold bootstrap, rank intervals, the oracle's top
sets, consensus), agreement with its bootstrap intervals, label-budget rows, and every table,
CSV and markdown written. Then the input fingerprint that lets a rerun skip it all.

Each size runs in a fresh child process (``harness.run_child``), so its peak RSS is that size's
alone. The baseline is the smallest size of the same run: time per model at n against it.

``--baseline-tree PATH``: each size also with the ``zoorank`` of another checkout (the tree
before a change) on the same tables, in the same run, alternating which goes first; the table
shows both and the ratio of this tree's RANK seconds to the baseline's.

Prints, never asserts. Example (a few minutes on 2 busy cores)::

    .venv/bin/python benchmarks/performance/bench_rank.py --models 100,1000,2000
    .venv/bin/python benchmarks/performance/bench_rank.py --models 100,1000 --baseline-tree ../before
"""

from __future__ import annotations

import argparse
import hashlib
import json
import os
import sys
import tempfile
from pathlib import Path
from types import SimpleNamespace

sys.path.insert(0, str(Path(__file__).resolve().parents[1]))  # benchmarks/: the harness
import harness
import numpy as np
import pandas as pd
from harness import MB, ratio, run_child, table, timed

METRICS = ["rankme", "alpha_req", "twonn_id", "mle_id", "uniformity", "coding_rate",
           "cluster_learnability"]
ORACLES = ["knn_accuracy", "linear_probe_accuracy"]
DATASET = "synth"
FOLDS = 8
BUDGET_K = (5,)
BUDGET_SEEDS = 2


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
                             "status": "done", "error": None, "fingerprint": "e",
                             "param_count": rng.integers(10**5, 10**7, n), "dim": 512})
    return {"ids": ids, "metrics": metrics, "oracle": oracle, "folds": folds, "health": health,
            "manifest": manifest}


def child(n: int, bootstrap: int) -> dict:
    """One size in this (fresh) process: RANK's stage function on a fresh store, then the skip."""
    from zoorank.catalog.stage_inputs import rank_inputs
    from zoorank.config.loading import parse_config
    from zoorank.rank import write_rank_outputs
    from zoorank.store import Store

    t = tables(n)
    with tempfile.TemporaryDirectory(prefix="bench-rank-") as root:
        config = parse_config({
            "store": root, "seed": 0,
            "datasets": [{"name": DATASET, "source": "sklearn_digits"}],
            "models": [{"id": "bench", "source": "python", "name": "bench:unused"}],
            "metrics": METRICS, "oracle": {"knn": True, "linear_probe": True},
            "score": {"resample_folds": FOLDS},
            "rank": {"bootstrap": bootstrap, "resamples": bootstrap}})
        models = [SimpleNamespace(model_id=m, family=("simclr", "vicreg")[i % 2], group=None,
                                  datasets=None, spec=SimpleNamespace(prior={"year": 2000 + i % 20}))
                  for i, m in enumerate(t["ids"])]
        board, rank_s = timed(write_rank_outputs, config, Store(root), models, t["metrics"],
                              t["oracle"], show=False, manifest=t["manifest"], folds=t["folds"],
                              health=t["health"])
        agreement = Store(root).read_frame("agreement")
        uncertainty = Store(root).read_frame("uncertainty")
    # what RANK decided (the leaderboard with its top set, agreement, per-metric intervals), so
    # two trees' runs can be checked to agree; rows sorted (a table read back has no set order)
    digest = hashlib.sha256("\n".join(
        line for f in (board, agreement, uncertainty)
        for line in sorted(f.to_csv(index=False).splitlines())).encode()).hexdigest()[:12]
    _, skip_s = timed(rank_inputs, config, models, t["metrics"], t["oracle"], t["folds"],
                      t["health"], t["manifest"], {DATASET: "labels"})
    return {"models": n, "ranked": int(board["rank"].notna().sum()),
            "agreement_rows": len(agreement), "rank_s": rank_s, "skip_s": skip_s,
            "outputs": digest}


def run_size(n: int, bootstrap: int, tree: Path) -> dict:
    """One size in a fresh child process that imports the ``zoorank`` of ``tree``."""
    env = {**os.environ, "PYTHONPATH": str(tree)}
    run = run_child([sys.executable, __file__, "--child", str(n), "--bootstrap", str(bootstrap)],
                    env=env)
    return {**json.loads(run.output.strip().splitlines()[-1]), "rss": run.peak_rss}


def main() -> None:
    p = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    p.add_argument("--models", default="100,1000,2000", help="comma-separated zoo sizes")
    p.add_argument("--bootstrap", type=int, default=1000, help="rank.bootstrap and resamples")
    p.add_argument("--baseline-tree", type=Path, help="another checkout's zoorank, run beside")
    p.add_argument("--child", type=int, help=argparse.SUPPRESS)
    harness.results_option(p, "bench_rank")
    args = p.parse_args()
    if args.child:
        print(json.dumps(child(args.child, args.bootstrap)))
        return
    trees = {"this": harness.REPO}
    if args.baseline_tree:
        trees["baseline"] = args.baseline_tree.resolve()
    results: dict[str, list[dict]] = {label: [] for label in trees}
    for k, n in enumerate(sorted(int(v) for v in args.models.split(","))):
        for label in (list(trees) if k % 2 else list(trees)[::-1]):
            results[label].append(run_size(n, args.bootstrap, trees[label]))
            print(f"{n} models done ({label}): RANK {results[label][-1]['rank_s']:.1f} s, "
                  f"load {harness.load():.1f}", flush=True)
    lines = []
    for label, tree in trees.items():
        rs, base = results[label], results[label][0]
        if args.baseline_tree:
            name = "this tree" if label == "this" else "the baseline"
            lines += [f"### {name}: `{_tree_commit(tree)}` ({tree})", ""]
        lines += [table(["models", "ranked", "agreement rows", "RANK s", "RANK per model",
                         "skip check s", "peak RSS MB"],
                        [[r["models"], r["ranked"], r["agreement_rows"], f"{r['rank_s']:.2f}",
                          f"{r['rank_s'] / r['models'] * 1000:.1f} ms", f"{r['skip_s']:.3f}",
                          f"{r['rss'] / MB:.0f}"] for r in rs]), "",
                  *[ratio(f"RANK per model at {r['models']} models", r["rank_s"] / r["models"],
                          f"at {base['models']}", base["rank_s"] / base["models"])
                    for r in rs[1:]], ""]
    if args.baseline_tree:
        lines += ["### this tree against the baseline, same run", "",
                  *[ratio(f"RANK at {a['models']} models, this tree", a["rank_s"],
                          "the baseline", b["rank_s"])
                    + f"; outputs {'identical' if a['outputs'] == b['outputs'] else 'DIFFER'} "
                    f"(sha256 {a['outputs']})"
                    for a, b in zip(results["this"], results["baseline"])]]
    print("\n".join(lines))
    harness.write_results(args.markdown, "bench_rank — the RANK that ships as the zoo grows "
                          f"(rank.bootstrap = rank.resamples = {args.bootstrap})", "\n".join(lines))


def _tree_commit(tree: Path) -> str:
    import subprocess

    return subprocess.run(["git", "rev-parse", "--short", "HEAD"], cwd=tree, text=True,
                          capture_output=True, check=True).stdout.strip()


if __name__ == "__main__":
    main()
