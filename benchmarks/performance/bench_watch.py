"""``zoorank run --watch`` (issue 18): delay from a checkpoint's arrival to the leaderboard, and the
work per new model against a full rerun.

A sweep of ``--models`` small CNN checkpoints (digits, clean + simclr views, CLID so pool scores
change as models arrive) lands in a folder one by one, every ``--every`` seconds (written beside
and renamed in, as an atomic upload). ``pipeline.watch`` (``--interval`` polls, settle 0) runs in a
thread on a local Ray started first. Per checkpoint: the delay from its arrival to the end of the
round that put it on the leaderboard. Then one more checkpoint: a round adding it to the watched
pool against a single ``run_all`` over every checkpoint on a fresh store. Prints, never asserts::

    .venv/bin/python benchmarks/performance/bench_watch.py                  # 6 models, one every 10 s
    .venv/bin/python benchmarks/performance/bench_watch.py --models 3 --every 5
"""

from __future__ import annotations

import os
import shutil
import sys
import tempfile
import threading
import time
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parents[1]))  # benchmarks/: the harness
import harness
from harness import ratio, table, timed

import zoorank.runtime  # noqa: F401  (loopback Ray environment)
from zoorank.config.loading import parse_config
from zoorank.pipeline import run_all
from zoorank.watch import watch


def _checkpoint(path: Path, seed: int) -> None:
    import torch
    from safetensors.torch import save_file

    from zoorank.tune.models import small_cnn

    torch.manual_seed(seed)
    net = small_cnn(width=16, depth=2)
    tmp = path.with_name(f".{path.name}.tmp")
    save_file({k: v.contiguous() for k, v in net.state_dict().items()}, str(tmp))
    os.replace(tmp, path)


def _config(store: Path, runs: Path, limit: int) -> dict:
    return {
        "store": str(store), "seed": 0,
        "datasets": [{"name": "digits", "source": "sklearn_digits", "limit": limit}],
        "models": [{"source": "python", "name": "zoorank.tune.models:small_cnn",
                    "model_kwargs": {"width": 16, "depth": 2},
                    "checkpoint": str(runs / "*.safetensors"), "input_size": 8,
                    "interpolation": "bilinear", "crop_pct": 1.0}],
        "views": [{"name": "clean"}, {"name": "simclr", "samples": 100, "per_sample": 4}],
        "metrics": ["rankme", "lidar", "twonn_id", "cluster_learnability", "clid"],
    }


def main() -> None:
    args = harness.options(__doc__, "bench_watch", models=6, every=10.0, interval=1.0, limit=1797)
    os.environ.setdefault("ZOORANK_PROGRESS", "0")
    from zoorank.runtime import ensure_ray

    ensure_ray(num_cpus=2)
    root = Path(tempfile.mkdtemp(prefix="bench-watch-"))
    runs = root / "runs"
    runs.mkdir()
    config = parse_config(_config(root / "store", runs, args.limit))
    lines: list[tuple[float, str]] = []
    summary = {}

    def run_watch() -> None:
        summary["s"] = watch(config, interval=args.interval, until=str(args.models), settle=0.0,
                             out=lambda line: lines.append((time.time(), line)))

    thread = threading.Thread(target=run_watch)
    thread.start()
    arrived: dict[str, float] = {}
    for i in range(args.models):
        time.sleep(args.every)
        _checkpoint(runs / f"run{i}.safetensors", i)
        arrived[f"run{i}"] = time.time()
    thread.join(timeout=1800)
    rounds = summary["s"].rounds
    ranked_at = {}
    for r in rounds:
        for m in r.new:
            ranked_at[m] = r.detected + r.seconds
    delays = [ranked_at[m] - arrived[m] for m in arrived if m in ranked_at]
    # one more checkpoint: a round that adds it to the watched pool vs a full rerun of all of them
    _checkpoint(runs / f"run{args.models}.safetensors", args.models)
    _, incremental = timed(run_all, config)
    _, full = timed(run_all, parse_config(_config(root / "fresh", runs, args.limit)))
    lines = [table(["round", "models", "new", "embedded", "seconds"],
                   [[r.index, len(r.models), len(r.new), len(r.embedded), f"{r.seconds:.1f}"]
                    for r in rounds], "rrrrr"), ""]
    lines += [f"{m}: arrival → leaderboard {ranked_at.get(m, float('nan')) - arrived[m]:.1f} s"
              for m in sorted(arrived)]
    mean_delay = sum(delays) / len(delays)
    # the first round also starts Ray Data's pipelines and imports: the steady state is after it
    steady = rounds[1:] or rounds
    round_s = sum(r.seconds for r in steady) / len(steady)
    new_per_round = sum(len(r.new) for r in steady) / len(steady)
    lines += [f"watch  {args.models} models, one every {args.every:g} s, poll {args.interval:g} s  "
              f"delay arrival→leaderboard mean {mean_delay:.1f} s (max {max(delays):.1f} s)  "
              f"steady round {round_s:.1f} s for {new_per_round:.1f} new model(s) "
              f"({round_s / new_per_round:.1f} s per new model)",
              ratio(f"+1 model to a pool of {args.models}", incremental,
                    f"a full rerun of {args.models + 1} models", full)]
    print("\n".join(lines))
    harness.write_results(args.markdown, "bench_watch — `--watch` rounds as checkpoints "
                          "arrive", "\n".join(lines))
    shutil.rmtree(root, ignore_errors=True)


if __name__ == "__main__":
    main()
