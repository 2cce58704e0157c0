"""ASK MEMORY: the driver's peak RSS of ``zoorank ask`` and ``zoorank label`` on the zoo of
``benchmarks/performance/bench_scale.py`` with labels (issue 32, item 5).

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

Prints wall seconds and the driver's peak RSS (exact, from ``wait4``: ``harness.run_child``) and
writes them to ``--markdown``. Never asserts; not run in CI::

    .venv/bin/python benchmarks/performance/bench_ask_memory.py --models 1000 \\
        --baseline-src /tmp/zoorank-80dfd23
"""

from __future__ import annotations

import argparse
import os
import shutil
import sys
import time
from pathlib import Path

import bench_scale

sys.path.insert(0, str(Path(__file__).resolve().parents[1]))  # benchmarks/: the harness
import harness
import numpy as np
import pandas as pd
import yaml
from bench_scale import DATA, write_zoo
from harness import MB, REPO, run_child

import zoorank.runtime  # noqa: F401  (loopback Ray environment, set before Ray starts)

WORK = Path("/tmp/zoorank-bench-ask")
CLASSES = ["T-shirt/top", "Trouser", "Pullover", "Dress", "Coat", "Sandal", "Shirt", "Sneaker",
           "Bag", "Ankle boot"]
LABELS = 40


def config(store: str, checkpoints: str) -> dict:
    """bench_scale's zoo without the dataset's labels (the class names instead), the clean view
    and one label-free metric (RankMe): the leaderboard is what ask reads."""
    cfg = bench_scale.config(store, checkpoints)
    del cfg["datasets"][0]["label_column"], cfg["oracle"]
    cfg["datasets"][0]["classes"] = CLASSES
    return {**cfg, "views": [{"name": "clean"}], "metrics": ["rankme"]}


def cli(args: list[str], env: dict, src: Path) -> dict:
    """One ``zoorank`` command run from ``src``: wall, the driver's peak RSS (``wait4``), output."""
    child = run_child([sys.executable, "-m", "zoorank", *args], env={**env, "PYTHONPATH": str(src)},
                      cwd=src, check=False)
    if child.returncode not in (0, 3):
        sys.exit(f"bench_ask_memory: zoorank {args[0]} ({src}) exited {child.returncode}:\n"
                 f"{child.output[-3000:]}")
    return {"wall": child.seconds, "rss": child.peak_rss, "out": child.output}


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
    """:func:`config` with ``n`` models that no code loads (their embeddings are written)."""
    return {**config(store, ""),
            "models": [{"id": f"m{i:04d}", "source": "python", "name": "synthetic:unused"}
                       for i in range(n)]}


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
    harness.results_option(parser, "bench_ask_memory")
    args = parser.parse_args(argv)
    env = {**os.environ, "RAY_USAGE_STATS_ENABLED": "0", "HF_HUB_OFFLINE": "1",
           "RAY_AUTH_MODE": "disabled", "RAY_DATA_DISABLE_PROGRESS_BARS": "1",
           "ZOORANK_PROGRESS": "0"}
    os.environ.update({k: env[k] for k in ("RAY_USAGE_STATS_ENABLED", "RAY_AUTH_MODE")})
    WORK.mkdir(parents=True, exist_ok=True)
    sources = ([("before", args.baseline_src)] if args.baseline_src else []) + [("after", REPO)]
    rows = []
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
                rows.append([n, f"{name} ({src})", f"`zoorank {cmd[0]}`", f"{r['wall']:.1f}",
                             f"{r['rss'] / MB:.0f}"])
            print("  " + "\n  ".join(r["out"].strip().splitlines()[:3]))
    if rows:
        harness.write_results(
            args.markdown, "bench_ask_memory — the driver's peak memory of `zoorank ask` / "
            "`zoorank label`",
            f"{LABELS} labels per `zoorank label --no-rank`, then `zoorank ask --budget 40 --round "
            "1`; each command its own driver process, peak RSS exact from `wait4`.\n\n"
            + harness.table(["models", "code", "command", "wall s", "driver peak RSS (MB)"], rows,
                            "lllrr"))


if __name__ == "__main__":
    main()
