"""COMMITS: what one store commit costs, per batch size, and what the retry policy adds (issues 23, 26).

1. A metrics table holding ``--files`` (40) one-model files (as a per-model writer leaves it); then commits of
   K new models (25 metric rows each) for K in 1, 8, 32, 128: seconds per commit and per model,
   and the files each merge read (delta-rs merge metrics). This is what ``BATCH_MODELS`` (K) was
   chosen from.
2. The same per-model commits with the code of another checkout (``--baseline DIR``, e.g. a
   ``git archive`` of the commit before), in a subprocess: the old against the new cost of one
   model's commit.
3. ``zoorank.tasks.retry.call`` around a call that succeeds, against the bare call: the policy's cost
   on the path where nothing fails.

Prints, never asserts::

    git archive 6aea0a2 zoorank | tar -x -C /tmp/zoorank-base
    .venv/bin/python benchmarks/performance/bench_commits.py --baseline /tmp/zoorank-base
"""

from __future__ import annotations

import argparse
import json
import os
import sys
import tempfile
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parents[1]))  # benchmarks/: the harness
import harness
from harness import ratio, run_child, table, timed

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
    done = run_child([sys.executable, "-c", MEASURE, str(files), *map(str, sizes)], env=env)
    return {int(k): v for k, v in json.loads(done.output.splitlines()[-1]).items()}


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
    parser.add_argument("--sizes", default="1,8,32,128", help="K: models per commit (with 1 and 32)")
    harness.results_option(parser, "bench_commits")
    args = parser.parse_args(argv)
    sizes = sorted({1, 32, *(int(k) for k in args.sizes.split(","))})

    new = commit_costs(str(harness.REPO), args.files, sizes)
    lines = [f"One commit of K models (25 metric rows each) into a {args.files}-file table, local "
             "disk (best of 3):", "",
             table(["K", "s/commit", "ms/model"], [[k, f"{new[k]:.3f}", f"{1000 * new[k] / k:.2f}"]
                                                   for k in sizes]), "",
             ratio("commit per model at K = 1", new[1], "at K = 32", new[32] / 32),
             f"files a merge of 1 / 8 matching models reads out of 40: {files_read(1)} / "
             f"{files_read(8)} (streamed_exec=False prunes by key range)"]
    if args.baseline:
        old = commit_costs(args.baseline, args.files, [1, 32])
        lines += [ratio("one model per commit: baseline", old[1], "now", new[1]),
                  ratio("a 32-model commit: baseline", old[32], "now", new[32])]

    from zoorank.tasks import retry

    n = 20000
    _, bare = timed(lambda: [len("x") for _ in range(n)])
    _, wrapped = timed(lambda: [retry.call(len, "x") for _ in range(n)])
    lines.append(f"retry policy on a call that succeeds: {1e6 * (wrapped - bare) / n:.1f} µs per "
                 f"call ({(wrapped - bare) / n / new[1]:.2%} of one single-model commit)")
    print("\n".join(lines))
    harness.write_results(args.markdown, "bench_commits — one store commit",
                          "\n".join(lines))


if __name__ == "__main__":
    main()
