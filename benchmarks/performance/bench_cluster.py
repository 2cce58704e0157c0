"""EMBED on a simulated multi-node cluster (issue 9): scaling over worker nodes, files per entry,
and the driver's peak memory against the dataset size.

The cluster is ``tests/loopback_cluster.py``: a head without GPUs and k worker nodes that each
declare one GPU, all processes on 127.0.0.1 of this one machine. Torch is CPU here, so embedding
tasks run CPU torch (``embed.allow_cpu_torch``); the figures measure zoorank's distribution and
its overheads, not GPU speed. All k nodes share the machine's cores, so on a 2-core machine the
scaling figure shows what adding nodes costs there, not what a real cluster gains.

1. Scaling: the same zoo (seeded tiny timm models) on the same images with k = 1, 2, 4 worker
   nodes; wall time of ``zoorank embed`` (the driver process, joining the cluster, from start to
   exit) and scaling efficiency T1 / (k · Tk); files per (dataset, view, model) entry.
2. Driver memory: ``zoorank embed`` of one tiny model over the first 10k and all 50k images of
   ``../shared/data/cifar10/train.parquet``; the driver's peak RSS (``ru_maxrss`` of the driver
   process itself, from ``wait4`` through ``harness.run_child``) at each size and their ratio.

Inputs are local files (every node of this cluster sees the same disk; tests/e2e/test_cluster.py
covers S3), so the figures hold no moto server's CPU.

    .venv/bin/python benchmarks/performance/bench_cluster.py                  # about 10 min on 2 idle cores
    .venv/bin/python benchmarks/performance/bench_cluster.py --workers 1,2 --rss-sizes 10000
"""

from __future__ import annotations

import argparse
import sys
import tempfile
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parents[1]))  # benchmarks/: the harness
import harness
import pyarrow.parquet as pq
import yaml
from harness import MB, ratio, run_child, table, timed

REPO = Path(__file__).resolve().parents[2]
sys.path.insert(0, str(REPO / "tests"))  # the loopback cluster lives beside the tests that use it

from loopback_cluster import BIN, LoopbackCluster, base_env  # noqa: E402

DATA = REPO.parent / "shared" / "data" / "cifar10"
#: (timm architecture, seeds): the scaling zoo, 8 models of 3 architectures
ZOO = [("test_resnet", range(4)), ("test_efficientnet", range(2)), ("test_convnext", range(2))]
EMBED = {"device": "cuda", "allow_cpu_torch": True, "precision": "fp32", "batch_size": 128,
         "models_per_actor": 1, "num_cpus_per_actor": 0.5}


def write_zoo(root: Path) -> list[dict]:
    """Seeded random-weight checkpoints as safetensors; their model entries."""
    import timm
    import torch
    from safetensors.torch import save_file

    models = []
    for arch, seeds in ZOO:
        for seed in seeds:
            torch.manual_seed(seed)
            net = timm.create_model(arch, pretrained=False, num_classes=0)
            path = root / f"{arch}-s{seed}.safetensors"
            save_file({k: v.contiguous() for k, v in net.state_dict().items()}, path)
            models.append({"id": f"{arch}-s{seed}", "source": "timm", "name": arch,
                           "checkpoint": str(path), "input_size": 32})
    return models


def write_images(source: Path, rows: int, path: Path) -> Path:
    table = pq.read_table(source, columns=["image", "label"])
    pq.write_table(table.slice(0, rows), path, row_group_size=1000)
    return path


def run_embed(cluster: LoopbackCluster, config: dict, root: Path, name: str,
              timeout: float) -> dict:
    """``zoorank embed`` as a driver process joining ``cluster``: wall s, peak RSS MB, files."""
    store = root / f"store-{name}"
    cfg = root / f"{name}.yaml"
    cfg.write_text(yaml.safe_dump({**config, "store": str(store)}))
    driver = run_child([str(BIN / "python"), "-m", "zoorank", "embed", str(cfg), "--address",
                        cluster.address], env=base_env(), cwd=root, timeout=timeout)
    files = {}
    for part in (store / "embeddings").rglob("part-*.parquet"):
        files[part.parent] = files.get(part.parent, 0) + 1
    rows = sum(pq.read_metadata(p).num_rows for p in (store / "embeddings").rglob("part-*.parquet"))
    return {"wall": driver.seconds, "rss_mb": driver.peak_rss / MB, "entries": len(files),
            "files_max": max(files.values(), default=0), "rows": rows}


def start_cluster(k: int, root: Path) -> tuple[LoopbackCluster, float]:
    cluster = LoopbackCluster(root / f"logs-{k}", head_cpus=1, workers=[(1, 1)] * k)
    _, seconds = timed(cluster.start, timeout=300)
    return cluster, seconds


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--workers", default="1,2,4", help="worker-node counts (default: %(default)s)")
    parser.add_argument("--images", type=int, default=2048, help="images for the scaling runs")
    parser.add_argument("--rss-sizes", default="10000,50000",
                        help="dataset sizes for the driver-memory runs ('' to skip)")
    parser.add_argument("--rss-workers", type=int, default=2)
    parser.add_argument("--timeout", type=float, default=900, help="per zoorank run, seconds")
    harness.results_option(parser, "bench_cluster")
    args = parser.parse_args()
    counts = [int(k) for k in args.workers.split(",") if k]
    sizes = [int(n) for n in args.rss_sizes.split(",") if n]

    root = Path(tempfile.mkdtemp(prefix="zr-bench-cluster-"))
    models = write_zoo(root)
    scaling_cfg = {
        "seed": 0, "views": [{"name": "clean"}], "models": models, "embed": EMBED,
        "datasets": [{"name": "cifar10", "source": "parquet", "image_column": "image",
                      "path": str(write_images(DATA / "test.parquet", args.images,
                                               root / "test.parquet"))}],
    }
    rss_cfg = {**scaling_cfg, "models": models[:1]}
    results: dict[int, dict] = {}
    rss: dict[int, dict] = {}
    for k in counts:
        cluster, started = start_cluster(k, root)
        try:
            results[k] = {**run_embed(cluster, scaling_cfg, root, f"scale-{k}", args.timeout),
                          "start": started}
            print(f"  k={k}: {results[k]}", flush=True)
            if k == args.rss_workers:
                for n in sizes:
                    path = (DATA / "train.parquet" if n >= 50_000
                            else write_images(DATA / "train.parquet", n, root / f"train-{n}.parquet"))
                    cfg = {**rss_cfg, "datasets": [{**scaling_cfg["datasets"][0], "path": str(path)}]}
                    rss[n] = run_embed(cluster, cfg, root, f"rss-{n}", args.timeout)
                    print(f"  rss n={n}: {rss[n]}", flush=True)
        finally:
            cluster.stop()

    t1 = results.get(1, {}).get("wall")
    lines = [f"EMBED on a loopback cluster: head (1 CPU, 0 GPU) + k workers (1 CPU, 1 declared GPU "
             f"each, CPU torch), {len(models)} models × {args.images} CIFAR-10 images, clean view; "
             "all nodes share this machine's cores.", "",
             table(["workers", "start s", "embed s", "img/s", "efficiency", "entries", "files/entry"],
                   [[k, f"{r['start']:.1f}", f"{r['wall']:.1f}",
                     f"{len(models) * args.images / r['wall']:.0f}",
                     f"{t1 / (k * r['wall']):.2f}" if t1 else "-", r["entries"], r["files_max"]]
                    for k, r in results.items()]), ""]
    lines += [ratio(f"embed on 1 worker (efficiency T1/(k·Tk) {t1 / (k * r['wall']):.2f})", t1,
                    f"on {k} workers", r["wall"]) for k, r in results.items() if t1 and k != 1]
    files = max((r["files_max"] for r in results.values()), default=0)
    lines.append(f"files: at most {files} part file(s) per entry of {args.images} rows")
    if rss:
        lines += ["", f"Driver peak RSS, zoorank embed, 1 model, {args.rss_workers} workers:", "",
                  table(["images", "embed s", "driver peak RSS MB", "rows written"],
                        [[n, f"{r['wall']:.1f}", f"{r['rss_mb']:.0f}", r["rows"]]
                         for n, r in rss.items()])]
        if len(rss) >= 2:
            (n0, a), (n1, b) = sorted(rss.items())[0], sorted(rss.items())[-1]
            lines.append(f"memory: driver peak RSS {b['rss_mb']:.0f} MB at {n1} images vs "
                         f"{a['rss_mb']:.0f} MB at {n0}: {b['rss_mb'] / a['rss_mb']:.2f}× for "
                         f"{n1 / n0:.0f}× the images")
    print("\n".join(lines))
    harness.write_results(args.markdown, "bench_cluster — EMBED on a simulated multi-node "
                          "cluster", "\n".join(lines))


if __name__ == "__main__":
    main()
