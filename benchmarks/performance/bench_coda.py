"""CODA's cost at classifier-zoo scale: one ``zoorank ask`` round (:func:`coda_next`, k picks, the
product defaults: ``MAX_CANDIDATES`` candidates, ``GRID`` cells, the prior built inside as
``coda_batch`` does) and :func:`coda_belief`, wall time and peak traced memory (tracemalloc: the
numpy arrays allocated during the call, inputs excluded), against a baseline run in the same
process: ``zoorank/metrics/coda.py`` of another git revision (default: the merge base with
``main``) imported from a temp dir, its outputs compared for equality.

Zoo: M models of graded accuracy (``linspace(0.55, 0.85, M)``) on N images of K classes, the
true class uniform; a model's logits are standard normal noise, its target class (the true class
with probability its accuracy, else a uniform other class) lifted above the noise's maximum by an
Exponential(1) gap, then softmax: the target is the top-1. Seeded (``--seed``).

    PYTHONPATH=$PWD .venv/bin/python benchmarks/bench_coda.py --configs 16x10,32x10,16x200 \
        --n 10000 --k 20

``--baseline-k``: picks of the baseline's round when its full round is too slow (its round is then
its prior's time (:func:`coda_prior`, timed apart) plus its per-pick time, the rest, scaled to k
picks, said so in the table; the equality check is on those first picks); 0:
no baseline for that configuration (too slow or too big to run beside the others).
"""

from __future__ import annotations

import argparse
import importlib.util
import subprocess
import sys
import tempfile
import time
import tracemalloc
from pathlib import Path

import numpy as np

from zoorank.metrics import coda


def synthetic_zoo(m: int, n: int, k: int, seed: int) -> np.ndarray:
    """(M, N, K) softmax predictions of M models of graded accuracy (the module's docstring)."""
    rng = np.random.default_rng(seed)
    y = rng.integers(k, size=n)
    out = np.empty((m, n, k))
    for j, acc in enumerate(np.linspace(0.55, 0.85, m)):
        z = rng.standard_normal((n, k))
        target = np.where(rng.random(n) < acc, y, (y + rng.integers(1, k, size=n)) % k)
        z[np.arange(n), target] = z.max(axis=1) + rng.exponential(1.0, size=n)
        z = np.exp(z - z.max(axis=1, keepdims=True), out=z)
        out[j] = z / z.sum(axis=1, keepdims=True)
    return out


def baseline_module(rev: str):
    """``zoorank/metrics/coda.py`` at git revision ``rev``, imported as a module of its own."""
    root = Path(__file__).resolve().parents[1]
    src = subprocess.run(["git", "show", f"{rev}:zoorank/metrics/coda.py"], cwd=root, check=True,
                         capture_output=True, text=True).stdout
    path = Path(tempfile.mkdtemp()) / "coda_baseline.py"
    path.write_text(src)
    spec = importlib.util.spec_from_file_location("coda_baseline", path)
    module = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(module)
    return module


def measured(fn, *args, **kwargs):
    """(result, wall seconds, peak traced MB) of ``fn(*args, **kwargs)``."""
    tracemalloc.start()
    t = time.perf_counter()
    out = fn(*args, **kwargs)
    wall = time.perf_counter() - t
    peak = tracemalloc.get_traced_memory()[1] / 2**20
    tracemalloc.stop()
    return out, wall, peak


def main() -> None:
    p = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    p.add_argument("--configs", default="16x10,32x10,16x200,32x200,16x1000,32x1000",
                   help="MxK pairs, comma-separated")
    p.add_argument("--n", type=int, default=10_000)
    p.add_argument("--k", type=int, default=20, help="picks of a round")
    p.add_argument("--baseline-k", default="", help="MxK=picks,... baseline picks per config")
    p.add_argument("--baseline-rev", default="", help="git revision (default: merge base with main)")
    p.add_argument("--labels", type=int, default=20, help="labelled images (true class)")
    p.add_argument("--seed", type=int, default=0)
    args = p.parse_args()
    root = Path(__file__).resolve().parents[1]
    rev = args.baseline_rev or subprocess.run(["git", "merge-base", "main", "HEAD"], cwd=root,
                                              check=True, capture_output=True, text=True).stdout.strip()
    base = baseline_module(rev)
    base_k = dict(item.split("=") for item in args.baseline_k.split(",") if item)
    print(f"baseline: zoorank/metrics/coda.py at {rev[:10]}; N = {args.n}, k = {args.k}, "
          f"{coda.MAX_CANDIDATES} candidates, grid {coda.GRID}")
    print("| M | K | call | baseline s | this s | speed-up | baseline MB | this MB | equal |")
    print("|---|---|---|---|---|---|---|---|---|")
    for cfg in args.configs.split(","):
        m, kk = (int(v) for v in cfg.split("x"))
        P = synthetic_zoo(m, args.n, kk, args.seed)
        labelled = np.arange(args.labels)
        labels = P.mean(axis=0)[labelled].argmax(axis=1)
        kb = int(base_k.get(cfg, args.k))
        got, t, mem = measured(coda.coda_next, P, labelled, labels, k=args.k, seed=1)
        if not kb:
            _, tb, mb = measured(coda.coda_belief, coda.coda_prior(P), labelled, labels)
            print(f"| {m} | {kk} | coda_next k={args.k} | not run | {t:.2f} | | | {mem:.0f} | |")
            print(f"| {m} | {kk} | coda_belief | not run | {tb:.2f} | | | {mb:.0f} | |", flush=True)
            continue
        got_b, t_b, mem_b = measured(base.coda_next, P, labelled, labels, k=kb, seed=1)
        prior_b, t_prior, _ = measured(base.coda_prior, P)
        if kb == args.k:
            equal = np.array_equal(got_b, got)
            scaled = ""
        else:
            equal = np.array_equal(got_b, coda.coda_next(P, labelled, labels, k=kb, seed=1))
            t_b = t_prior + (t_b - t_prior) * args.k / kb
            scaled = f" (prior {t_prior:.1f} + {kb} picks scaled)"
        print(f"| {m} | {kk} | coda_next k={args.k} | {t_b:.2f}{scaled} | {t:.2f} | {t_b / t:.1f}× | "
              f"{mem_b:.0f} | {mem:.0f} | {'identical picks' if equal else 'PICKS DIFFER'} |",
              flush=True)
        prior = coda.coda_prior(P)
        (pb_b, _), tb_b, mb_b = measured(base.coda_belief, prior_b, labelled, labels)
        (pb, _), tb, mb = measured(coda.coda_belief, prior, labelled, labels)
        diff = np.abs(pb_b - pb).max()
        print(f"| {m} | {kk} | coda_belief | {tb_b:.2f} | {tb:.2f} | {tb_b / tb:.1f}× | {mb_b:.0f} | "
              f"{mb:.0f} | {'identical' if diff == 0 else f'max |Δ| {diff:.1e}'} |", flush=True)
        del P, prior_b, prior
    sys.stdout.flush()


if __name__ == "__main__":
    main()
