"""Cost of the top set (issue 24): the Model Confidence Set on fold-bootstrap replicates.

A synthetic zoo of n models with F = 8 paired folds (values spread over a range, one model in three
noisy) → B fold-bootstrap replicates (:func:`zoorank.metrics.uncertainty.fold_bootstrap`) →
:func:`~zoorank.metrics.uncertainty.rank_uncertainty` (ranks, intervals, p_best and the top set)
and, alone, :func:`~zoorank.metrics.uncertainty.top_set`. Baseline in the same process:
``arch.bootstrap.MCS(method="max")`` on the equivalent F × n loss matrix (its own bootstrap, block
size 1), which runs all n − 1 elimination steps. Prints, never asserts::

    .venv/bin/python benchmarks/bench_top_set.py --models 60,400,2000 --resamples 1000
"""

from __future__ import annotations

import argparse
import time
import tracemalloc
import warnings

import numpy as np


def zoo(n: int, n_folds: int, seed: int) -> tuple[np.ndarray, np.ndarray]:
    rng = np.random.default_rng(seed)
    true = np.linspace(3.0, 0.0, n)
    noise = np.where(np.arange(n) % 3 == 0, 0.4, 0.03)
    folds = true[:, None] + rng.normal(size=(n, n_folds)) * noise[:, None]
    return folds.mean(axis=1), folds


def timed(fn, *args):
    """(result, best of 3 wall seconds, peak traced bytes of one more call under tracemalloc,
    which slows allocation-heavy code and so is not timed)."""
    seconds = []
    for _ in range(3):
        start = time.perf_counter()
        out = fn(*args)
        seconds.append(time.perf_counter() - start)
    tracemalloc.start()
    fn(*args)
    peak = tracemalloc.get_traced_memory()[1]
    tracemalloc.stop()
    return out, min(seconds), peak


def main() -> None:
    from arch.bootstrap import MCS

    from zoorank.metrics.uncertainty import (
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
    args = p.parse_args()
    print(f"{'models':>7}{'B':>6}{'MCS':>6}{'steps':>7}{'top set':>9}{'mcs s':>8}"
          f"{'rank_unc s':>12}{'peak MiB':>10}{'arch s':>9}{'arch/mcs':>10}")
    lines = []
    for n in [int(v) for v in args.models.split(",")]:
        point, folds = zoo(n, args.folds, 0)
        reps = fold_bootstrap(point, folds, args.resamples, 0, fold_scale(args.folds, 1.0))
        (inside, pv), mcs_s, _ = timed(model_confidence_set, point, reps, 0.05)
        u, unc_s, peak = timed(rank_uncertainty, point, reps, 0.95)
        steps = int(np.isfinite(pv).sum() - inside.sum())
        arch_s = float("nan")
        if n <= args.arch_max:
            losses = -(point[None, :] + fold_scale(args.folds, 1.0)
                       * (folds - folds.mean(axis=1, keepdims=True)).T)
            ref = MCS(losses, 0.05, reps=args.resamples, block_size=1, method="max",
                      bootstrap="cbb", seed=0)
            with warnings.catch_warnings():
                warnings.simplefilter("ignore", RuntimeWarning)
                _, arch_s, _ = timed(ref.compute)
        print(f"{n:>7}{args.resamples:>6}{int(inside.sum()):>6}{steps:>7}"
              f"{int(u.in_top_set.sum()):>9}{mcs_s:>8.3f}{unc_s:>12.3f}{peak / 2**20:>10.1f}"
              f"{arch_s:>9.3f}{arch_s / mcs_s:>9.1f}×")
        lines.append(f"top_set  {n} models  B {args.resamples}  zoorank MCS {mcs_s:.3f} s "
                     f"({steps} steps)  arch MCS(max) {arch_s:.3f} s  "
                     f"{arch_s / mcs_s:.1f}× faster; rank_uncertainty {unc_s:.3f} s, "
                     f"peak {peak / 2**20:.0f} MiB (B × n float64 = "
                     f"{args.resamples * n * 8 / 2**20:.0f} MiB)")
    print()
    print("\n".join(lines))


if __name__ == "__main__":
    main()
