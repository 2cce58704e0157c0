"""COMMITS: what one store commit costs, per batch size, and what the retry policy adds (issues 23, 26).

1. A metrics table holding ``--files`` (40) one-model files (as a per-model writer leaves it); then commits of
   K new models (25 metric rows each) for K in 1, 8, 32, 128: seconds per commit and per model,
   and the files each merge read (delta-rs merge metrics). This is what ``BATCH_MODELS`` (K) was
   chosen from.
2. The same per-model commits with the code of another checkout (``--baseline DIR``, e.g. a
   ``git archive`` of the commit before), in a subprocess: the old against the new cost of one
   model's commit.
3. ``zoorank.run.retry.call`` around a call that succeeds, against the bare call: the policy's cost
   on the path where nothing fails.

Prints, never asserts::

    git archive 6aea0a2 zoorank | tar -x -C /tmp/zoorank-base
    .venv/bin/python benchmarks/bench_commits.py --baseline /tmp/zoorank-base
"""

from __future__ import annotations

import argparse
import json
import os
import subprocess
import sys
import tempfile
import time

REPO = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))

MEASURE = r"""
import json, sys, tempfile, time
import pandas as pd
from zoorank.store import Store

def rows(models):
    return pd.DataFrame([{"model_id": f"m{m:05d}", "dataset": "d", "metric": f"x{j}",
                          "value": 1.0, "params": '{"k": 10}', "fingerprint": "f" * 16}
                         for m in models for j in range(25)])

store = Store(tempfile.mkdtemp())
key = ["model_id", "dataset", "metric"]
files, sizes = int(sys.argv[1]), [int(a) for a in sys.argv[2:]]
for m in range(files):
    store.upsert_rows("metrics", rows([m]), key)
out = {}
for k in sizes:
    t, first = [], 1000 * k
    for b in range(3):
        t0 = time.perf_counter()
        store.upsert_rows("metrics", rows(range(first + k * b, first + k * (b + 1))), key)
        t.append(time.perf_counter() - t0)
    out[k] = min(t)
print(json.dumps(out))
"""


def commit_costs(path: str, files: int, sizes: list[int]) -> dict[int, float]:
    """Seconds per commit of K models into a table of ``files`` one-model files, with the
    zoorank found at ``path`` (best of 3)."""
    env = {**os.environ, "PYTHONPATH": path}
    done = subprocess.run([sys.executable, "-c", MEASURE, str(files), *map(str, sizes)], env=env,
                          capture_output=True, text=True, check=True)
    return {int(k): v for k, v in json.loads(done.stdout.splitlines()[-1]).items()}


def files_read(k: int) -> int:
    import pandas as pd

    from zoorank.store import tables

    loc = tables.TableLocation(tempfile.mkdtemp())
    for m in range(40):
        tables.merge(loc, pd.DataFrame([{"model_id": f"m{m:05d}", "metric": "x", "value": 1.0}]),
                     ["model_id", "metric"])
    hit = tables.merge(loc, pd.DataFrame([{"model_id": f"m{m:05d}", "metric": "x", "value": 2.0}
                                          for m in range(k)]), ["model_id", "metric"])
    return int(hit["num_target_files_scanned"])


def main(argv: list[str] | None = None) -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    parser.add_argument("--baseline", help="a directory holding another checkout's zoorank/")
    parser.add_argument("--files", type=int, default=40, help="one-model files in the table")
    args = parser.parse_args(argv)
    sizes = [1, 8, 32, 128]

    new = commit_costs(REPO, args.files, sizes)
    print(f"== one commit of K models (25 metric rows each) into a {args.files}-file table, "
          "local disk ==")
    print(f"{'K':>4} {'s/commit':>9} {'ms/model':>9}")
    for k in sizes:
        print(f"{k:4d} {new[k]:9.3f} {1000 * new[k] / k:9.2f}")
    print(f"commit cost per model, K = 32 against K = 1: {new[1] / (new[32] / 32):.0f}× lower")
    print(f"files a merge of 1 / 8 matching models reads out of 40: {files_read(1)} / "
          f"{files_read(8)} (streamed_exec=False prunes by key range)")
    if args.baseline:
        old = commit_costs(args.baseline, args.files, [1, 32])
        print(f"one model per commit: baseline {1000 * old[1]:.1f} ms, now {1000 * new[1]:.1f} ms "
              f"({old[1] / new[1]:.2f}× faster); a 32-model commit: baseline "
              f"{1000 * old[32]:.0f} ms, now {1000 * new[32]:.0f} ms")

    from zoorank.run import retry

    n = 20000
    t0 = time.perf_counter()
    for _ in range(n):
        len("x")
    bare = (time.perf_counter() - t0) / n
    t0 = time.perf_counter()
    for _ in range(n):
        retry.call(len, "x")
    wrapped = (time.perf_counter() - t0) / n
    print(f"retry policy on a call that succeeds: {1e6 * (wrapped - bare):.1f} µs per call "
          f"({(wrapped - bare) / new[1]:.2%} of one single-model commit)")


if __name__ == "__main__":
    main()
