"""SCORE-stage throughput: models per minute through Ray, time share per metric, versus EMBED.

A synthetic zoo (default 32 models × 10,000 clean samples × d = 512, plus n_aug × q augmented
views for LiDAR / RankMe(aug) / alignment) is written straight into a store, then ``run_score``
scores it on a local Ray. Embeddings are Gaussian mixtures seen through a map with a power-law
spectrum (λ_k ∝ k^−α, α drawn per model in [0.8, 2.0], the range alpha-ReQ reports for trained
networks), so every metric does its real work; ``--real PATH.npy`` uses a real (n, d) embedding
instead (each model a random rotation plus noise of it).

The embed figure is the stage's own benchmark when given (``--embed-seconds-per-model``) or a
direct estimate: a plain forward of timm ``resnet18`` at 32 px over the same number of images
(clean + augmented) on this machine, no decoding, no Ray, i.e. a lower bound on EMBED's time.

Prints, never asserts. Example (the full run takes several minutes on 2 cores)::

    .venv/bin/python benchmarks/performance/bench_score.py --models 32
    .venv/bin/python benchmarks/performance/bench_score.py --models 8 --q 10
"""

from __future__ import annotations

import argparse
import json
import os
import shutil
import sys
import tempfile
import time
from collections import defaultdict
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parents[1]))  # benchmarks/: the harness
import harness
import numpy as np
from harness import ratio, table, timed

import zoorank.runtime  # noqa: F401  (loopback Ray environment)
from zoorank.config import DEFAULT_METRICS
from zoorank.config.loading import parse_config
from zoorank.store import Store


def synthetic_embeddings(
    rng: np.random.Generator, n: int, d: int, n_aug: int, q: int, alpha: float,
    clusters: int = 100, base: np.ndarray | None = None,
) -> tuple[np.ndarray, np.ndarray]:
    """(n × d clean, n_aug × q × d views): a mixture seen through a power-law spectrum."""
    if base is not None:
        rot = np.linalg.qr(rng.normal(size=(base.shape[1], base.shape[1])))[0]
        clean = base @ rot + 0.05 * base.std() * rng.normal(size=base.shape)
        views = clean[:n_aug, None, :] + 0.3 * clean.std() * rng.normal(size=(n_aug, q, d))
        return clean.astype(np.float32), views.astype(np.float32)
    scales = np.arange(1, d + 1, dtype=np.float64) ** (-alpha / 2)  # σ_k, so λ_k ∝ k^-α
    basis = np.linalg.qr(rng.normal(size=(d, d)))[0]
    mix = ((basis * scales) @ np.linalg.qr(rng.normal(size=(d, d)))[0].T).astype(np.float32)
    centres = rng.normal(size=(clusters, d)).astype(np.float32) * 3.0
    labels = rng.integers(0, clusters, size=n)
    latent = centres[labels] + rng.standard_normal((n, d), dtype=np.float32)
    clean = latent @ mix
    clean = np.maximum(clean, 0.0) + 0.1 * clean  # leaky-ReLU features
    # Views: the same latent point with augmentation noise (a third of the within-class spread).
    noisy = latent[:n_aug, None, :] + 0.33 * rng.standard_normal((n_aug, q, d), dtype=np.float32)
    views = noisy @ mix
    views = np.maximum(views, 0.0) + 0.1 * views
    return clean.astype(np.float32), views.astype(np.float32)


def build_store(root: Path, args) -> tuple[dict, float]:
    store = Store(root)
    rng = np.random.default_rng(args.seed)
    base = np.load(args.real).astype(np.float32) if args.real else None
    n = base.shape[0] if base is not None else args.samples
    d = base.shape[1] if base is not None else args.dim
    ids = np.arange(n, dtype=np.int64)
    aug_ids = ids[: args.n_aug]
    models, manifest = [], []
    start = time.perf_counter()  # the store's build, reported beside the figures
    for i in range(args.models):
        mid = f"m{i:02d}"
        # Seed ensembles of --group-size share a spectrum; families of 2 ensembles.
        group = i // args.group_size
        alpha = 0.8 + 1.2 * ((group * 0.618) % 1.0)
        clean, views = synthetic_embeddings(
            np.random.default_rng([args.seed, group, i]), n, d, args.n_aug, args.q, alpha,
            base=base,
        )
        store.write_shard("synthetic", "clean", mid, 0, ids, np.zeros(n), clean)
        store.write_shard("synthetic", "simclr", mid, 0, np.repeat(aug_ids, args.q),
                          np.tile(np.arange(args.q), args.n_aug),
                          views.reshape(-1, d))
        for view, rows in (("clean", n), ("simclr", args.n_aug * args.q)):
            manifest.append({"dataset": "synthetic", "view": view, "model_id": mid,
                             "fingerprint": f"{mid}-{view}-{rng.integers(1 << 30)}",
                             "status": "done", "rows": rows, "dim": d, "seconds": 0.0})
        models.append({"id": mid, "source": "python", "name": "torch.nn:Identity",
                       "group": f"g{group}", "family": f"f{group // 2}"})
    store.update_manifest(manifest)
    config = {
        "store": str(root),
        "seed": args.seed,
        "datasets": [{"name": "synthetic", "source": "numpy", "path": "unused.npz"}],
        "models": models,
        "views": [{"name": "clean"},
                  {"name": "simclr", "samples": args.n_aug, "per_sample": args.q}],
        "metrics": DEFAULT_METRICS,
    }
    stamp(root, config, n)
    return config, time.perf_counter() - start


def stamp(root: Path, config_dict: dict, n: int) -> None:
    """A real (tiny) numpy dataset behind the synthetic store and the manifest fingerprints EMBED
    would record for it, so the stage's freshness check accepts the hand-written entries."""
    from zoorank.catalog import build_catalog
    from zoorank.store import Store

    path = root / "images.npz"
    rng = np.random.default_rng(0)
    np.savez(path, images=rng.integers(0, 255, size=(n, 8, 8, 3), dtype=np.uint8))
    config_dict["datasets"][0]["path"] = str(path)
    expected = build_catalog(parse_config(config_dict)).entries
    store = Store(root)
    manifest = store.read_manifest()
    manifest["fingerprint"] = [next(iter(expected[(d, v, m)]))
                               for d, v, m in zip(manifest["dataset"], manifest["view"],
                                                  manifest["model_id"])]
    store.replace_table("manifest", manifest)


def embed_estimate(n_images: int, batch: int = 256, measure: int = 1024) -> float:
    """Seconds for a plain timm resnet18 forward at 32 px over ``n_images`` (2 threads)."""
    import timm
    import torch

    torch.set_num_threads(os.cpu_count() or 2)
    model = timm.create_model("resnet18", pretrained=False, num_classes=0).eval()
    x = torch.randn(batch, 3, 32, 32)
    with torch.inference_mode():
        model(x)  # warm-up
        _, seconds = timed(lambda: [model(x) for _ in range(-(-measure // batch))])
    return seconds / (-(-measure // batch) * batch) * n_images


def main() -> None:
    p = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    p.add_argument("--models", type=int, default=32)
    p.add_argument("--samples", type=int, default=10_000)
    p.add_argument("--dim", type=int, default=512)
    p.add_argument("--n-aug", type=int, default=1000, help="augmented samples (LiDAR n)")
    p.add_argument("--q", type=int, default=10, help="views per augmented sample (LiDAR q)")
    p.add_argument("--group-size", type=int, default=4, help="seed-ensemble size (NC)")
    p.add_argument("--seed", type=int, default=0)
    p.add_argument("--real", help="an (n, d) .npy embedding to use instead of synthetic data")
    p.add_argument("--store", help="keep the store here (default: a temporary directory)")
    p.add_argument("--embed-seconds-per-model", type=float,
                   help="EMBED's measured seconds per model (else estimated: resnet18 @32px)")
    harness.results_option(p, "bench_score")
    args = p.parse_args()

    root = Path(args.store) if args.store else Path(tempfile.mkdtemp(prefix="bench-score-"))
    try:
        config_dict, build_s = build_store(root, args)
        config = parse_config(config_dict)
        n = config_dict["views"][1]
        about = (f"store: {args.models} models × {args.samples} samples × d={args.dim} "
                 f"(+ {n['samples']}×{n['per_sample']} views) written in {build_s:.1f} s")
        print(about)

        import ray

        from zoorank.score import run_score

        ray.init(num_cpus=os.cpu_count() or 2, include_dashboard=False,
                 logging_level="WARNING")
        scored, stage_s = timed(run_score, config)
        ray.shutdown()

        per_metric: dict[str, float] = defaultdict(float)
        for row in scored.itertuples(index=False):
            params = json.loads(row.params)
            if "seconds" in params:
                # NC's seconds are for the whole ensemble, stored on each member's row.
                share = 1.0 / params.get("members", 1) if row.metric == "nc" else 1.0
                per_metric[row.metric] += params["seconds"] * share
        measured = sum(per_metric.values())
        rows = [[metric, f"{seconds / args.models:.3f}", f"{seconds / measured:.1%}"]
                for metric, seconds in sorted(per_metric.items(), key=lambda kv: -kv[1])]
        rows.append(["(sum, in actors)", f"{measured / args.models:.3f}", ""])

        rate = args.models / stage_s * 60
        n_images = args.samples + args.n_aug * args.q
        if args.embed_seconds_per_model:
            embed_s, how = args.embed_seconds_per_model * args.models, "bench_embed"
        else:
            embed_s = embed_estimate(n_images) * args.models
            how = "resnet18@32px forward, lower bound"
        embed_rate = args.models / embed_s * 60
        verdict = "IS" if stage_s > embed_s else "is not"
        text = "\n".join([
            about, "", table(["metric", "s/model", "share"], rows), "",
            f"score  {args.models} models  {args.samples}×{args.dim} (+{args.n_aug}×{args.q})  "
            f"zoorank {rate:.1f} models/min  embed {embed_rate:.1f} models/min ({how})",
            ratio("SCORE through Ray", stage_s, "EMBED of the same models", embed_s),
            f"scoring {verdict} the bottleneck"])
        print(text)
        harness.write_results(args.markdown, "bench_score — SCORE throughput", text)
    finally:
        if not args.store:
            shutil.rmtree(root, ignore_errors=True)


if __name__ == "__main__":
    main()
