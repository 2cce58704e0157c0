"""Cost of the top set (issue 24): the Model Confidence Set on fold-bootstrap replicates.

A synthetic zoo of n models with F = 8 paired folds (values spread over a range, one model in three
noisy) → B fold-bootstrap replicates (:func:`zoorank.stats.uncertainty.fold_bootstrap`) →
:func:`~zoorank.stats.uncertainty.rank_uncertainty` (ranks, intervals, p_best and the top set)
and, alone, :func:`~zoorank.stats.uncertainty.top_set`. Baseline in the same process:
``arch.bootstrap.MCS(method="max")`` on the equivalent F × n loss matrix (its own bootstrap, block
size 1), which runs all n − 1 elimination steps. Prints, never asserts::

    .venv/bin/python benchmarks/performance/bench_top_set.py --models 60,400,2000 --resamples 1000
"""

from __future__ import annotations

import argparse
import sys
import warnings
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parents[1]))  # benchmarks/: the harness
import harness
import numpy as np
from harness import ratio, table, timed


def zoo(n: int, n_folds: int, seed: int) -> tuple[np.ndarray, np.ndarray]:
    rng = np.random.default_rng(seed)
    true = np.linspace(3.0, 0.0, n)
    noise = np.where(np.arange(n) % 3 == 0, 0.4, 0.03)
    folds = true[:, None] + rng.normal(size=(n, n_folds)) * noise[:, None]
    return folds.mean(axis=1), folds


def main() -> None:
    from arch.bootstrap import MCS

    from zoorank.stats.uncertainty import (
        fold_bootstrap,
        fold_scale,
        model_confidence_set,
        rank_uncertainty,
    )

    p = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    p.add_argument("--models", default="60,400,2000")
    p.add_argument("--resamples", type=int, default=1000)
    p.add_argument("--folds", type=int, default=8)
    p.add_argument("--arch-max", type=int, default=2000, help="skip arch above this many models")
    harness.results_option(p, "bench_top_set")
    args = p.parse_args()
    rows, lines = [], []
    for n in [int(v) for v in args.models.split(",")]:
        point, folds = zoo(n, args.folds, 0)
        reps = fold_bootstrap(point, folds, args.resamples, 0, fold_scale(args.folds, 1.0))
        (inside, pv), mcs_s = timed(model_confidence_set, point, reps, 0.05, repeat=3)
        u, unc_s = timed(rank_uncertainty, point, reps, 0.95, repeat=3)
        steps = int(np.isfinite(pv).sum() - inside.sum())
        arch_s = float("nan")
        if n <= args.arch_max:
            losses = -(point[None, :] + fold_scale(args.folds, 1.0)
                       * (folds - folds.mean(axis=1, keepdims=True)).T)
            ref = MCS(losses, 0.05, reps=args.resamples, block_size=1, method="max",
                      bootstrap="cbb", seed=0)
            with warnings.catch_warnings():
                warnings.simplefilter("ignore", RuntimeWarning)
                _, arch_s = timed(ref.compute, repeat=3)
        rows.append([n, args.resamples, int(inside.sum()), steps, int(u.in_top_set.sum()),
                     f"{mcs_s:.3f}", f"{unc_s:.3f}", f"{args.resamples * n * 8 / 2**20:.0f}",
                     f"{arch_s:.3f}"])
        lines.append(ratio(f"arch MCS(max) {n} models", arch_s, f"zoorank MCS ({steps} steps)", mcs_s))
        print(lines[-1], flush=True)
    text = "\n".join([table(["models", "B", "MCS", "steps", "top set", "MCS s", "rank_uncertainty s",
                             "B × n float64 MiB", "arch s"], rows), "", *lines])
    print(text)
    harness.write_results(args.markdown, "bench_top_set — the Model Confidence Set on fold-"
                          "bootstrap replicates", text)


if __name__ == "__main__":
    main()
