"""SCALE: a zoo of N small CNN checkpoints, through one glob, through the ``zoorank`` CLI (issue 23).

Setup (the target's): 2,000 Fashion-MNIST test images (``/work/shared/data/fashion_mnist``), a
200 × 4 augmented view, the default metrics, the kNN oracle; N seeded random-init ``small_cnn``
checkpoints (width 8, 28 px), written once under ``/tmp/zoorank-bench-scale/zoo`` and named by one
glob in the config.

Per size, in a fresh store, against one local Ray started here (its start-up timed apart):

1. the four stages as ``zoorank embed|score|rank|report CONFIG`` (each its own driver process):
   wall, CPU seconds (the driver's own, exact from ``wait4`` through ``harness.run_child``, plus
   the Ray workers', sampled), the driver's peak RSS (exact, ``wait4``) and its console lines;
2. ``zoorank run CONFIG`` on the finished store: the rerun, against the first run's wall;
3. the store: data files and commits of the ``manifest``, ``metrics`` and ``oracle`` tables.

``--baseline-tree PATH``: every size also through the ``zoorank`` of another checkout (the tree
before a change), in the same run against the same Ray and zoo, alternating which tree goes first
each of ``--rounds`` rounds; the results file shows both, and this tree's figures as a ratio
against the baseline's (per stage: the best wall of the rounds). The CLI drivers run with the tree
as their working directory and ``PYTHONPATH``; Ray puts a driver's working directory first on its
workers' path, so the workers import the same tree.

``--s3``: the same on a moto S3 server on 127.0.0.1 behind ``tests/s3_faults.FaultyProxy`` adding
``--latency-ms`` to every request (store and checkpoints in the bucket), after the same sizes on
local disk in this process: the per-model overhead of object storage is the difference.

Prints, never asserts; not run in CI::

    .venv/bin/python benchmarks/performance/bench_scale.py --models 50 100
    .venv/bin/python benchmarks/performance/bench_scale.py --models 100 1000 2000
    .venv/bin/python benchmarks/performance/bench_scale.py --models 300 --s3 --latency-ms 20
    .venv/bin/python benchmarks/performance/bench_scale.py --models 1000 --baseline-tree ../before --rounds 2
"""

from __future__ import annotations

import argparse
import contextlib
import os
import shutil
import sys
import threading
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parents[1]))  # benchmarks/: the harness
import harness
import psutil
import yaml
from harness import MB, ratio, run_child, table, timed

REPO = Path(__file__).resolve().parents[2]
sys.path.insert(0, str(REPO / "tests"))  # the fault proxy (a test helper)
sys.path.insert(0, str(REPO))
import zoorank.runtime  # noqa: E402,F401  (loopback Ray environment, set before Ray starts)

WORK = Path("/tmp/zoorank-bench-scale")
DATA = Path("/work/shared/data/fashion_mnist/test.parquet")
STAGES = ("embed", "score", "rank", "report")


def write_zoo(n: int, directory: Path) -> None:
    """N seeded random-init small_cnn safetensors checkpoints (kept between runs)."""
    import torch
    from safetensors.torch import save_file

    from zoorank.tune.models import small_cnn

    directory.mkdir(parents=True, exist_ok=True)
    for i in range(n):
        path = directory / f"cnn{i:04d}.safetensors"
        if not path.is_file():
            torch.manual_seed(i)
            state = small_cnn(width=8, depth=3).state_dict()
            save_file({k: v.contiguous() for k, v in state.items()}, str(path))


def config(store: str, checkpoints: str) -> dict:
    return {
        "store": store, "seed": 0,
        "datasets": [{"name": "fashion", "source": "parquet", "path": str(DATA),
                      "image_column": "image", "label_column": "label", "limit": 2000}],
        "models": [{"source": "python", "name": "zoorank.tune.models:small_cnn",
                    "model_kwargs": {"width": 8, "depth": 3}, "checkpoint": checkpoints,
                    "input_size": 28, "mean": [0.5] * 3, "std": [0.25] * 3, "crop_pct": 1.0,
                    "interpolation": "bilinear"}],
        "views": [{"name": "clean"}, {"name": "simclr", "samples": 200, "per_sample": 4}],
        "oracle": {"knn": True},
    }


class RayTreeCPU:
    """CPU seconds of this process's descendants but the ``zoorank`` drivers (Ray's), sampled."""

    def __init__(self, interval: float = 0.25) -> None:
        self.cpu: dict[int, float] = {}
        self._stop = threading.Event()
        self._thread = threading.Thread(target=self._run, daemon=True)
        self._thread.start()

    def sample(self) -> float:
        for p in psutil.Process().children(recursive=True):
            with contextlib.suppress(psutil.Error):
                if p.cmdline()[1:3] != ["-m", "zoorank"]:
                    t = p.cpu_times()
                    self.cpu[p.pid] = t.user + t.system
        return sum(self.cpu.values())

    def _run(self) -> None:
        while not self._stop.wait(0.25):
            self.sample()


def cli(*args: str, tree: RayTreeCPU, env: dict, cwd: Path = REPO) -> dict:
    """One ``zoorank`` command (the checkout ``cwd``'s): wall, CPU (driver exact + Ray sampled),
    driver peak RSS, lines."""
    before = tree.sample()
    child = run_child([sys.executable, "-m", "zoorank", *args], env=env, cwd=cwd, check=False)
    if child.returncode not in (0, 3):
        sys.exit(f"bench_scale: zoorank {' '.join(args[:1])} exited {child.returncode}:\n"
                 f"{child.output[-3000:]}")
    return {"wall": child.seconds, "cpu": child.cpu + tree.sample() - before,
            "rss": child.peak_rss, "lines": len(child.output.splitlines())}


def table_files(store: str) -> dict[str, tuple[int, int]]:
    """table → (data files in its snapshot, commits)."""
    from zoorank.store import Store

    s, out = Store(store), {}
    for name in ("manifest", "metrics", "oracle"):
        from deltalake import DeltaTable

        loc = s.table(name)
        delta = DeltaTable(loc.uri, storage_options=loc.storage_options or None)
        out[name] = (len(delta.file_uris()), int(delta.version()) + 1)
    return out


def run_size(n: int, store: str, checkpoints: str, address: str, tree: RayTreeCPU,
             env: dict, checkout: Path = REPO) -> dict:
    """One size through the ``zoorank`` CLI of ``checkout`` (this tree by default)."""
    cfg = WORK / f"config-{abs(hash(store))}.yaml"
    cfg.write_text(yaml.safe_dump(config(store, checkpoints)))
    env = {**env, "PYTHONPATH": str(checkout)}
    stages = {s: cli(s, str(cfg), "--address", address, tree=tree, env=env, cwd=checkout)
              for s in STAGES}
    rerun = cli("run", str(cfg), "--address", address, tree=tree, env=env, cwd=checkout)
    return {"n": n, "stages": stages, "rerun": rerun, "tables": table_files(store),
            "first": sum(s["wall"] for s in stages.values())}


def size_section(where: str, r: dict) -> str:
    """One size's markdown: a row per stage and the rerun, the totals, the tables' files."""
    n = r["n"]
    rows = [[name, f"{s['wall']:.1f}", f"{s['wall'] / n:.3f}", f"{s['cpu']:.1f}",
             f"{s['cpu'] / n:.3f}", f"{s['rss'] / MB:.0f}", s["lines"]]
            for name, s in [*r["stages"].items(), ("rerun", r["rerun"])]]
    lines = sum(s["lines"] for s in r["stages"].values())
    peak = max(s["rss"] for s in r["stages"].values())
    text = "\n".join([
        f"## {where}: {n} models", "",
        table(["stage", "wall s", "s/model", "CPU s", "CPU/model", "driver RSS MB", "lines"], rows),
        "", f"first run {r['first']:.1f} s ({r['first'] / n:.3f} s/model), driver peak "
        f"{peak / MB:.0f} MB, {lines} console lines; "
        + ratio("rerun", r["rerun"]["wall"], "the first run", r["first"]),
        "tables (data files, commits): " + ", ".join(
            f"{t} {f} files / {c} commits" for t, (f, c) in r["tables"].items())])
    print(text, flush=True)
    return text


def tree_commit(checkout: Path) -> str:
    """The short commit of a checkout."""
    import subprocess

    return subprocess.run(["git", "rev-parse", "--short", "HEAD"], cwd=checkout, text=True,
                          capture_output=True, check=True).stdout.strip()


def against_baseline(n: int, runs: dict[str, list[dict]], names: dict[str, str]) -> str:
    """This tree against the baseline tree at one size: per stage the best wall of the rounds,
    the ratio, and the driver peak RSS of each."""
    def best(label: str, stage: str, key: str = "wall") -> float:
        return min((r["rerun"] if stage == "rerun" else r["stages"][stage])[key]
                   for r in runs[label])

    rows = []
    for stage in [*STAGES, "rerun"]:
        b, a = best("baseline", stage), best("this", stage)
        rows.append([stage, f"{b:.1f}", f"{a:.1f}", f"{a / b:.2f}",
                     f"{best('baseline', stage, 'rss') / MB:.0f}",
                     f"{best('this', stage, 'rss') / MB:.0f}"])
    first_b = min(r["first"] for r in runs["baseline"])
    first_a = min(r["first"] for r in runs["this"])
    rows.append(["first run", f"{first_b:.1f}", f"{first_a:.1f}", f"{first_a / first_b:.2f}",
                 "", ""])
    walls = "; ".join(f"{names[label]}: " + ", ".join(f"{r['first']:.1f}" for r in runs[label])
                      for label in ("baseline", "this"))
    text = "\n".join([
        f"## {n} models: {names['this']} against the baseline {names['baseline']}", "",
        table(["stage", "baseline wall s", "this wall s", "ratio", "baseline RSS MB",
               "this RSS MB"], rows), "",
        f"best of {len(runs['this'])} round(s), alternating which tree goes first; first-run walls "
        f"of each round, in order: {walls}.",
        ratio(f"first run at {n} models, {names['this']}", first_a,
              f"{names['baseline']}", first_b)])
    print(text, flush=True)
    return text


@contextlib.contextmanager
def loopback_s3(latency_s: float):
    """(store URI maker, checkpoint upload) on moto behind the fault proxy with ``latency_s``."""
    import logging

    import boto3
    from moto.server import ThreadedMotoServer
    from s3_faults import FaultyProxy

    logging.getLogger("werkzeug").setLevel(logging.ERROR)  # one log line per request otherwise
    server = ThreadedMotoServer(ip_address="127.0.0.1", port=0, verbose=False)
    server.start()
    host, port = server.get_host_and_port()
    client = boto3.client("s3", endpoint_url=f"http://{host}:{port}", region_name="us-east-1",
                          aws_access_key_id="testing", aws_secret_access_key="testing")
    client.create_bucket(Bucket="bench")
    with FaultyProxy(host, port, latency_s=latency_s) as proxy:
        def uri(path: str) -> str:
            return (f"s3://testing:testing@bench/{path}?endpoint_override={proxy.endpoint}"
                    "&scheme=http&region=us-east-1")

        yield uri, client, proxy
    server.stop()


def main(argv: list[str] | None = None) -> None:
    global WORK  # --work: run_size writes its configs there too
    parser = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    parser.add_argument("--models", type=int, nargs="+", default=[100])
    parser.add_argument("--s3", action="store_true", help="also on a loopback S3 (see docstring)")
    parser.add_argument("--latency-ms", type=float, default=20.0)
    parser.add_argument("--baseline-tree", type=Path,
                        help="another checkout whose zoorank runs each size too (see docstring)")
    parser.add_argument("--rounds", type=int, default=1,
                        help="with --baseline-tree: rounds of both trees, alternating the order")
    parser.add_argument("--work", type=Path, default=WORK,
                        help="zoo, stores and configs (default: %(default)s)")
    harness.results_option(parser, "bench_scale")
    args = parser.parse_args(argv)
    WORK = args.work

    import ray

    # the CLI drivers join the Ray started here: no token to hand them on loopback
    env = {**os.environ, "RAY_USAGE_STATS_ENABLED": "0", "HF_HUB_OFFLINE": "1",
           "RAY_AUTH_MODE": "disabled",
           "RAY_DATA_DISABLE_PROGRESS_BARS": "1", "AWS_ACCESS_KEY_ID": "testing",
           "AWS_SECRET_ACCESS_KEY": "testing", "AWS_DEFAULT_REGION": "us-east-1",
           "PYTHONPATH": str(REPO)}
    os.environ.update({k: env[k] for k in ("AWS_ACCESS_KEY_ID", "AWS_SECRET_ACCESS_KEY",
                                           "AWS_DEFAULT_REGION", "RAY_USAGE_STATS_ENABLED",
                                           "RAY_AUTH_MODE")})
    WORK.mkdir(parents=True, exist_ok=True)
    zoo = WORK / "zoo"
    _, zoo_s = timed(write_zoo, max(args.models), zoo)
    _, ray_s = timed(ray.init, num_cpus=os.cpu_count(), include_dashboard=False,
                     log_to_driver=False)
    address = ray.get_runtime_context().gcs_address
    tree = RayTreeCPU()
    sections = [f"zoo: {max(args.models)} checkpoints ({zoo_s:.1f} s); local Ray: {os.cpu_count()} "
                f"CPUs, started in {ray_s:.1f} s (not in the figures below)."]
    print(sections[0])
    names = {"this": f"this tree `{harness.commit()}`"}
    if args.baseline_tree:
        base = args.baseline_tree.resolve()
        names["baseline"] = f"`{tree_commit(base)}` ({base})"
        sections.append(f"Baseline: the zoorank of {names['baseline']}, {args.rounds} round(s) "
                        "per size, alternating which tree goes first.")

    local: dict[int, dict] = {}
    for n in args.models:
        sub = WORK / f"zoo-{n}"  # the first n checkpoints, one glob
        shutil.rmtree(sub, ignore_errors=True)
        sub.mkdir()
        for i in range(n):
            (sub / f"cnn{i:04d}.safetensors").symlink_to(zoo / f"cnn{i:04d}.safetensors")
        if not args.baseline_tree:
            store = WORK / f"store-{n}"
            shutil.rmtree(store, ignore_errors=True)
            local[n] = run_size(n, str(store), str(sub / "*.safetensors"), address, tree, env)
            sections.append(size_section("local disk", local[n]))
            continue
        runs: dict[str, list[dict]] = {"this": [], "baseline": []}
        for k in range(args.rounds):
            order = ["baseline", "this"] if k % 2 == 0 else ["this", "baseline"]
            for label in order:
                store = WORK / f"store-{n}-{label}"
                shutil.rmtree(store, ignore_errors=True)
                checkout = base if label == "baseline" else REPO
                runs[label].append(run_size(n, str(store), str(sub / "*.safetensors"), address,
                                            tree, env, checkout))
                sections.append(size_section(f"local disk, round {k + 1}, {names[label]}, "
                                             f"load {harness.load():.1f}", runs[label][-1]))
        local[n] = min(runs["this"], key=lambda r: r["first"])
        sections.append(against_baseline(n, runs, names))
    if len(args.models) > 1:
        a, b = min(args.models), max(args.models)
        sections.append(ratio(f"per-model wall of the first run at {b} models (goal ≤ 1.1)",
                              local[b]["first"] / b, f"at {a}", local[a]["first"] / a))
        print(sections[-1])

    if args.s3:
        with loopback_s3(args.latency_ms / 1000) as (uri, client, proxy):
            for n in args.models:
                for i in range(n):
                    client.upload_file(str(zoo / f"cnn{i:04d}.safetensors"), "bench",
                                       f"zoo-{n}/cnn{i:04d}.safetensors")
                before = proxy.counts["requests"]
                r = run_size(n, uri(f"store-{n}"), uri(f"zoo-{n}/*.safetensors"), address,
                             tree, env)
                sections.append(size_section(f"loopback S3, {args.latency_ms:g} ms per request", r))
                extra = (r["first"] - local[n]["first"]) / n
                sections.append(f"S3 requests {proxy.counts['requests'] - before:,}; per-model "
                                f"overhead over local disk {extra:+.3f} s (goal ≤ 1 s)")
                print(sections[-1])
    ray.shutdown()
    harness.write_results(args.markdown, "bench_scale — a zoo of N checkpoints through the "
                          "`zoorank` CLI", "\n\n".join(sections))


if __name__ == "__main__":
    main()
