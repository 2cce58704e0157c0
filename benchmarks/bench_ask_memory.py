"""ASK MEMORY: the driver's peak RSS of ``zoorank ask`` and ``zoorank label`` on the zoo of
``benchmarks/bench_scale.py`` with labels (issue 32, item 5).

Setup: bench_scale's zoo (N seeded random-init ``small_cnn`` checkpoints, width 8, 28 px) on
2,000 Fashion-MNIST test images, without the dataset's own labels (the class names come from the
config) so that labels arrive through ``zoorank label``; the clean view only, one metric (RankMe).
The store is made once per size (``zoorank embed``, ``score``, ``rank`` against one local Ray
started here) and kept under ``/tmp/zoorank-bench-ask``.

Then, on that store, for each code base (``--baseline-src``: a checkout of the code before the
change, e.g. ``git archive 80dfd23 | tar -x -C /tmp/zoorank-80dfd23``; and this checkout), each command its
own driver process:

1. ``zoorank label CONFIG FILE --no-rank``: 40 labels (the true classes of 40 seeded samples);
2. ``zoorank ask CONFIG --budget 40 --round 1``.

Prints wall seconds and the driver's peak RSS (exact, from ``wait4``). Never asserts; not run in
CI::

    .venv/bin/python benchmarks/bench_ask_memory.py --models 1000 --baseline-src /tmp/zoorank-80dfd23
"""

from __future__ import annotations

import argparse
import os
import shutil
import subprocess
import sys
import time
from pathlib import Path

import numpy as np
import pandas as pd
import yaml

REPO = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(REPO / "benchmarks"))
sys.path.insert(0, str(REPO))
from bench_scale import DATA, write_zoo  # noqa: E402

import zoorank.runtime  # noqa: E402,F401  (loopback Ray environment, set before Ray starts)

WORK = Path("/tmp/zoorank-bench-ask")
MB = 1024**2
CLASSES = ["T-shirt/top", "Trouser", "Pullover", "Dress", "Coat", "Sandal", "Shirt", "Sneaker",
           "Bag", "Ankle boot"]
LABELS = 40


def config(store: str, checkpoints: str) -> dict:
    return {
        "store": store, "seed": 0,
        "datasets": [{"name": "fashion", "source": "parquet", "path": str(DATA),
                      "image_column": "image", "limit": 2000, "classes": CLASSES}],
        "models": [{"source": "python", "name": "zoorank.tune.models:small_cnn",
                    "model_kwargs": {"width": 8, "depth": 3}, "checkpoint": checkpoints,
                    "input_size": 28, "mean": [0.5] * 3, "std": [0.25] * 3, "crop_pct": 1.0,
                    "interpolation": "bilinear"}],
        "views": [{"name": "clean"}],
        "metrics": ["rankme"],  # one label-free metric: the leaderboard is what ask reads
    }


def cli(args: list[str], env: dict, src: Path) -> dict:
    """One ``zoorank`` command run from ``src``: wall, the driver's peak RSS (``wait4``), output."""
    t0 = time.perf_counter()
    proc = subprocess.Popen([sys.executable, "-m", "zoorank", *args], stdout=subprocess.PIPE,
                            stderr=subprocess.STDOUT, env={**env, "PYTHONPATH": str(src)}, cwd=src)
    out = proc.stdout.read().decode(errors="replace")
    _, status, usage = os.wait4(proc.pid, 0)
    code = os.waitstatus_to_exitcode(status)
    wall = time.perf_counter() - t0
    if code not in (0, 3):
        sys.exit(f"bench_ask_memory: zoorank {args[0]} ({src}) exited {code}:\n{out[-3000:]}")
    return {"wall": wall, "rss": usage.ru_maxrss * 1024, "out": out}


def label_file(path: Path, cfg: Path, seed: int) -> Path:
    """A filled labels CSV: the true classes of ``LABELS`` seeded samples of the dataset (its
    sample ids are the Parquet rows, :mod:`zoorank.catalog`)."""
    from zoorank.catalog import build_catalog
    from zoorank.config.loading import load_config

    ids = np.asarray(build_catalog(load_config(cfg)).indexes["fashion"].sample_id)
    truth = pd.read_parquet(DATA, columns=["label"])["label"].to_numpy()
    rng = np.random.default_rng(seed)
    ids = np.sort(rng.choice(ids, LABELS, replace=False))
    pd.DataFrame({"sample_id": ids, "label": [CLASSES[int(truth[i])] for i in ids]}
                 ).to_csv(path, index=False)
    return path


def build_store(n: int, env: dict) -> Path:
    """The store of ``n`` models, embedded, scored and ranked (kept between runs)."""
    import ray

    sub = WORK / f"zoo-{n}"
    store = WORK / f"store-{n}"
    cfg = WORK / f"config-{n}.yaml"
    cfg.write_text(yaml.safe_dump(config(str(store), str(sub / "*.safetensors"))))
    if (store / "leaderboard").is_dir():
        print(f"store of {n} models: kept ({store})")
        return cfg
    zoo = Path("/tmp/zoorank-bench-scale/zoo")
    t0 = time.perf_counter()
    write_zoo(n, zoo)
    shutil.rmtree(sub, ignore_errors=True)
    sub.mkdir(parents=True)
    for i in range(n):
        (sub / f"cnn{i:04d}.safetensors").symlink_to(zoo / f"cnn{i:04d}.safetensors")
    shutil.rmtree(store, ignore_errors=True)
    ray.init(num_cpus=os.cpu_count(), include_dashboard=False, log_to_driver=False)
    address = ray.get_runtime_context().gcs_address
    for stage in ("embed", "score", "rank"):
        r = cli([stage, str(cfg), "--address", address], env, REPO)
        print(f"  {stage}: {r['wall']:.1f} s, driver {r['rss'] / MB:.0f} MB", flush=True)
    ray.shutdown()
    print(f"store of {n} models built in {time.perf_counter() - t0:.1f} s", flush=True)
    return cfg


def synthetic_config(store: str, n: int) -> dict:
    return {"store": store, "seed": 0,
            "datasets": [{"name": "fashion", "source": "parquet", "path": str(DATA),
                          "image_column": "image", "limit": 2000, "classes": CLASSES}],
            "models": [{"id": f"m{i:04d}", "source": "python", "name": "synthetic:unused"}
                       for i in range(n)],
            "views": [{"name": "clean"}], "metrics": ["rankme"]}


def build_synthetic_store(n: int, dim: int) -> Path:
    """A store of ``n`` models without Ray: each model's clean embedding of the 2,000 images is a
    seeded Gaussian projection of their pixels to ``dim`` dimensions plus seeded noise of its own
    scale (float32 shards, manifest rows with the catalog's fingerprints), and a leaderboard whose
    p(best) falls geometrically with the noise, its top set the models holding 95% of it."""
    import io

    from PIL import Image

    from zoorank.catalog import build_catalog
    from zoorank.config.loading import parse_config
    from zoorank.store import Store
    from zoorank.store.layout import LEADERBOARD

    store_dir = WORK / f"synthetic-{n}-{dim}"
    cfg_path = WORK / f"synthetic-{n}-{dim}.yaml"
    cfg = synthetic_config(str(store_dir), n)
    cfg_path.write_text(yaml.safe_dump(cfg))
    if (store_dir / "leaderboard").is_dir():
        print(f"synthetic store of {n} models × {dim} dims: kept ({store_dir})")
        return cfg_path
    t0 = time.perf_counter()
    shutil.rmtree(store_dir, ignore_errors=True)
    catalog = build_catalog(parse_config(cfg, "<synthetic>"))
    ids = np.asarray(catalog.indexes["fashion"].sample_id, dtype=np.int64)
    images = pd.read_parquet(DATA, columns=["image"])["image"]
    pixels = np.stack([np.asarray(Image.open(io.BytesIO(
        v["bytes"] if isinstance(v, dict) else v)).convert("L"), dtype=np.float32).ravel()
        for v in images.iloc[ids]]) / 255.0
    store = Store(str(store_dir))
    manifest, noise = [], np.linspace(0.0, 4.0, n)
    for i, m in enumerate(f"m{i:04d}" for i in range(n)):
        rng = np.random.default_rng(i)
        Z = pixels @ rng.normal(size=(pixels.shape[1], dim)).astype(np.float32)
        Z += rng.normal(scale=noise[i] * Z.std() + 1e-6, size=Z.shape).astype(np.float32)
        store.write_shard("fashion", "clean", m, 0, ids, np.zeros(len(ids), np.int32),
                          Z.astype(np.float32))
        manifest.append({"dataset": "fashion", "view": "clean", "model_id": m,
                         "fingerprint": catalog.entries[("fashion", "clean", m)][0],
                         "status": "done", "error": None, "rows": len(ids), "dim": dim,
                         "seconds": 0.1, "bad_images": 0})
    store.update_manifest(manifest)
    p = 0.7 ** np.arange(n)
    p /= p.sum()
    top = np.arange(n) < int(np.searchsorted(np.cumsum(p), 0.95)) + 1
    store.replace_table(LEADERBOARD, pd.DataFrame({
        "model_id": [f"m{i:04d}" for i in range(n)], "rank": np.arange(1, n + 1), "p_best": p,
        "in_top_set": top}))
    print(f"synthetic store of {n} models × {dim} dims ({int(top.sum())} in the top set) "
          f"written in {time.perf_counter() - t0:.1f} s", flush=True)
    return cfg_path


def main(argv: list[str] | None = None) -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    parser.add_argument("--models", type=int, nargs="+", default=[100])
    parser.add_argument("--baseline-src", type=Path, default=None,
                        help="a checkout of the code before the change (measured first)")
    parser.add_argument("--build-only", action="store_true")
    parser.add_argument("--synthetic-dim", type=int, default=None, metavar="D",
                        help="skip EMBED/SCORE/RANK: write D-dim embeddings and a leaderboard "
                             "directly (build_synthetic_store)")
    args = parser.parse_args(argv)
    env = {**os.environ, "RAY_USAGE_STATS_ENABLED": "0", "HF_HUB_OFFLINE": "1",
           "RAY_AUTH_MODE": "disabled", "RAY_DATA_DISABLE_PROGRESS_BARS": "1",
           "ZOORANK_PROGRESS": "0"}
    os.environ.update({k: env[k] for k in ("RAY_USAGE_STATS_ENABLED", "RAY_AUTH_MODE")})
    WORK.mkdir(parents=True, exist_ok=True)
    sources = ([("before", args.baseline_src)] if args.baseline_src else []) + [("after", REPO)]
    for n in args.models:
        cfg = (build_synthetic_store(n, args.synthetic_dim) if args.synthetic_dim
               else build_store(n, env))
        if args.build_only:
            continue
        print(f"\n== {n} models, {LABELS} labels per `zoorank label`, `zoorank ask --budget 40` ==")
        print(f"{'code':8} {'command':7} {'wall s':>8} {'driver peak RSS':>16}")
        for i, (name, src) in enumerate(sources):
            labels = label_file(WORK / f"labels-{n}-{name}.csv", cfg, seed=i)
            for cmd in (["label", str(cfg), str(labels), "--no-rank"],
                        ["ask", str(cfg), "--budget", "40", "--round", "1"]):
                r = cli(cmd, env, src)
                print(f"{name:8} {cmd[0]:7} {r['wall']:8.1f} {r['rss'] / MB:13.0f} MB", flush=True)
            print("  " + "\n  ".join(r["out"].strip().splitlines()[:3]))


if __name__ == "__main__":
    main()
