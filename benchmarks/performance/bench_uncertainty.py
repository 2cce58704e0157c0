"""Cost of rank uncertainty (issue 17): SCORE with and without the resampled fold rows.

The synthetic zoo of ``bench_score.py`` (power-law Gaussian mixtures, seed ensembles, families) is
written into a store; ``run_score`` scores it once with ``score.resample_folds: 0`` (today's
stage), then runs again with the fold settings given (only the fold rows and health rows are new
work: the metric rows are up to date), and RANK is timed with its fold bootstrap. The figure is
the ratio (score without folds + fold work) / (score without folds); the goal is at most 1.5×.

Prints, never asserts. Example (a few minutes on 2 cores)::

    .venv/bin/python benchmarks/performance/bench_uncertainty.py --models 8 --samples 2000 --dim 256
"""

from __future__ import annotations

import argparse
import os
import shutil
import sys
import tempfile
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parents[1]))  # benchmarks/: the harness
import harness
from bench_score import build_store
from harness import ratio, table, timed

import zoorank.runtime  # noqa: F401  (loopback Ray environment)
from zoorank.config.loading import parse_config


def main() -> None:
    p = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    p.add_argument("--models", type=int, default=8)
    p.add_argument("--samples", type=int, default=2000)
    p.add_argument("--dim", type=int, default=256)
    p.add_argument("--n-aug", type=int, default=300)
    p.add_argument("--q", type=int, default=4)
    p.add_argument("--group-size", type=int, default=4)
    p.add_argument("--seed", type=int, default=0)
    p.add_argument("--real", default=None)
    p.add_argument("--folds", default="8:0.5,4:0.5,8:1.0",
                   help="comma-separated folds:fraction settings to measure")
    harness.results_option(p, "bench_uncertainty")
    args = p.parse_args()

    import ray

    from zoorank.rank import run_rank
    from zoorank.score import run_score

    ray.init(num_cpus=os.cpu_count() or 2, include_dashboard=False, logging_level="WARNING")
    rows = []
    root = Path(tempfile.mkdtemp(prefix="bench-uncertainty-"))
    try:
        config_dict, _ = build_store(root, args)
        config_dict["rank"] = {"bootstrap": 0}
        base = parse_config({**config_dict, "score": {"resample_folds": 0}})
        _, base_s = timed(run_score, base)
        _, rank_base_s = timed(run_rank, base, show=False)
        about = (f"zoo: {args.models} models × {args.samples}×{args.dim} (+{args.n_aug}×{args.q} "
                 f"views); score without folds {base_s:.1f} s, rank {rank_base_s:.1f} s")
        print(about)
        for setting in args.folds.split(","):
            folds, fraction = setting.split(":")
            cfg = parse_config({**config_dict, "score": {"resample_folds": int(folds),
                                                         "resample_fraction": float(fraction)}})
            _, extra_s = timed(run_score, cfg)
            _, rank_s = timed(run_rank, cfg, show=False)
            rows.append((int(folds), float(fraction), extra_s, rank_s))
    finally:
        ray.shutdown()
        shutil.rmtree(root, ignore_errors=True)

    text = "\n".join([about, "", table(
        ["folds", "fraction", "fold s", "rank s", "score ratio", "score+rank ratio"],
        [[folds, f"{fraction:.2f}", f"{extra_s:.1f}", f"{rank_s:.1f}",
          f"{(base_s + extra_s) / base_s:.2f}×",
          f"{(base_s + extra_s + rank_s) / (base_s + rank_base_s):.2f}×"]
         for folds, fraction, extra_s, rank_s in rows]), "", *[
        ratio(f"score with folds {folds} × fraction {fraction:.2f} (goal ≤ 1.50)", base_s + extra_s,
              "without", base_s) for folds, fraction, extra_s, _ in rows]])
    print(text)
    harness.write_results(args.markdown, "bench_uncertainty — the cost of rank uncertainty",
                          text)


if __name__ == "__main__":
    main()
