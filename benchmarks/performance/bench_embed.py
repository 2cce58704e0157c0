"""EMBED-stage throughput: zoorank's Ray Data pipeline against two references in the same run.

For M models × N CIFAR-10 test images (JPEG bytes from ``../shared/data/cifar10/test.parquet``):

- **zoorank**: ``run_embed`` on a local Ray (clean view only), wall time of the whole stage, and its
  steady state (images/s from the first batch an actor starts to the last one it finishes), with
  actor start-up reported apart;
- **bound** (compute bound): the same models' forward passes at the same batch size on tensors
  decoded and preprocessed in advance, in this process, one model after the other (the better of
  torch's default thread count and one thread);
- **naive**: per model, a plain ``torch.utils.data.DataLoader`` (num_workers=0) that decodes and
  preprocesses the images again, then the forward pass.

Images/s count images through *all* M models (N / seconds). A third case embeds 100+ tiny models to
measure the per-model fixed cost: (T(many) − T(1)) / (many − 1) over two zoorank runs. A fourth
(``chunks``) runs C one-model chunks over a few hundred images and prints the stage's wall time and
the part files per (dataset, view, model) entry; run it with ``PYTHONPATH=<an older checkout>`` to
measure that checkout for a before/after figure (``--only chunks``).

Prints, never asserts; not run in CI. Example (the defaults take a few minutes on 2 cores)::

    .venv/bin/python benchmarks/performance/bench_embed.py
    .venv/bin/python benchmarks/performance/bench_embed.py --models 4 --images 1024 --size 64 --tiny 8 \\
        --many 100
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
import numpy as np
from harness import MB, ratio, run_child, timed

import zoorank.runtime  # noqa: F401  (loopback Ray environment)

os.environ.setdefault("RAY_DATA_DISABLE_PROGRESS_BARS", "1")
os.environ.setdefault("ZOORANK_PROGRESS", "0")

import torch  # noqa: E402
from torch import nn  # noqa: E402

from zoorank.config.loading import parse_config  # noqa: E402
from zoorank.data import load_samples
from zoorank.data.images import decode_image
from zoorank.data.views import clean_view
from zoorank.zoo import load_model, resolve_models  # noqa: E402

REPO = Path(__file__).resolve().parents[2]
DATA = Path(os.environ.get("ZOORANK_SHARED_DATA", REPO.parent / "shared" / "data"))
#: every figure line printed, for the results file
REPORT = harness.Report()
say = REPORT.say


def tiny_net(width: int = 8, dim: int = 32) -> nn.Module:
    """A tiny conv net (decoding dominates its cost): (B, 3, H, W) → (B, dim)."""
    return nn.Sequential(
        nn.Conv2d(3, width, 3, stride=2, padding=1), nn.ReLU(),
        nn.AdaptiveAvgPool2d(1), nn.Flatten(), nn.Linear(width, dim),
    )


def save_zoo(directory: Path, arch: str, n: int, size: int) -> list[dict]:
    """n seeded, distinct checkpoints of ``arch`` (a timm name or ``tiny``); model specs."""
    from safetensors.torch import save_file

    directory.mkdir(parents=True, exist_ok=True)
    geometry = {"input_size": size, "interpolation": "bilinear", "crop_pct": 1.0}
    specs = []
    for i in range(n):
        torch.manual_seed(i)
        if arch == "tiny":
            model = tiny_net()
            spec = {"source": "python", "name": "bench_embed:tiny_net"}
        else:
            import timm

            model = timm.create_model(arch, pretrained=False, num_classes=0)
            spec = {"source": "timm", "name": arch}
        path = directory / f"{arch}-{i}.safetensors"
        save_file({k: v.contiguous() for k, v in model.state_dict().items()}, str(path))
        specs.append({"id": f"{arch}-{i}", **spec, "checkpoint": str(path), **geometry})
    return specs


def make_config(store: Path, specs: list[dict], images: int, batch_size: int, **embed) -> object:
    return parse_config({
        "store": str(store),
        "datasets": [{"name": "cifar", "source": "parquet", "limit": images,
                      "path": str(DATA / "cifar10" / "test.parquet")}],
        "models": specs,
        "views": [{"name": "clean"}],
        "embed": {"batch_size": batch_size, **embed},
    })


def run_zoorank(config) -> dict:
    from zoorank.embed import run_embed

    shutil.rmtree(config.store, ignore_errors=True)
    rows, seconds = timed(run_embed, config)
    assert (rows["status"] == "done").all(), rows[rows["status"] != "done"]["error"].tolist()
    stats = rows.attrs["pipelines"]
    return {
        "seconds": seconds,
        "startup": sum(s["startup_seconds"] for s in stats),
        "load": max(s["model_load_seconds"] for s in stats),
        "steady": min(s["steady_images_per_second"] or float("nan") for s in stats),
        # from the first batch an actor started to the last one it finished
        "work": sum(s["steady_seconds"] for s in stats),
    }


def preprocess(config, model) -> torch.Tensor:
    table = load_samples(config.datasets[0], config.seed)
    arrays = [clean_view(decode_image(b), model.geometry) for b in table.images]
    return normalize(torch.from_numpy(np.stack(arrays)), model)


def normalize(u8: torch.Tensor, model) -> torch.Tensor:
    x = u8.permute(0, 3, 1, 2).float() / 255
    mean = torch.tensor(model.normalization.mean).view(1, 3, 1, 1)
    std = torch.tensor(model.normalization.std).view(1, 3, 1, 1)
    return (x - mean) / std


def run_bound(config, batch_size: int) -> float:
    models = resolve_models(config)
    x = preprocess(config, models[0])
    nets = [load_model(m) for m in models]
    seconds = []
    default_threads = torch.get_num_threads()
    # the better of torch's default threads and one thread (on a busy machine one thread wins)

    def forward() -> None:
        with torch.inference_mode():
            for net in nets:
                for i in range(0, len(x), batch_size):
                    net(x[i : i + batch_size])

    for threads in sorted({default_threads, 1}, reverse=True):
        torch.set_num_threads(threads)
        seconds.append(timed(forward)[1])
    torch.set_num_threads(default_threads)
    return min(seconds)


class _Images(torch.utils.data.Dataset):
    def __init__(self, sources, geometry):
        self.sources, self.geometry = sources, geometry

    def __len__(self) -> int:
        return len(self.sources)

    def __getitem__(self, i):
        return torch.from_numpy(clean_view(decode_image(self.sources[i]), self.geometry).copy())


def run_naive(config, batch_size: int) -> float:
    models = resolve_models(config)
    table = load_samples(config.datasets[0], config.seed)

    def loop() -> None:
        with torch.inference_mode():
            for m in models:
                net = load_model(m)
                loader = torch.utils.data.DataLoader(_Images(table.images, m.geometry),
                                                     batch_size=batch_size)
                for u8 in loader:
                    net(normalize(u8, m))

    return timed(loop)[1]


def compare(label: str, config, images: int, batch_size: int, repeat: int) -> None:
    """Interleaved runs (the machine may be shared); each figure is its best of ``repeat``."""
    n_models = len(config.models)
    zs, bounds, naives = [], [], []
    for _ in range(repeat):
        zs.append(run_zoorank(config))
        bounds.append(run_bound(config, batch_size))
        naives.append(run_naive(config, batch_size))
    z = min(zs, key=lambda r: r["seconds"])
    z["steady"] = max(r["steady"] for r in zs)
    z["startup"] = min(r["startup"] for r in zs)
    bound, naive = min(bounds), min(naives)
    zr, br, nr = images / z["seconds"], images / bound, images / naive
    say(f"embed  {label}  {n_models} models  {images} imgs  zoorank {zr:,.0f} img/s  "
        f"naive {nr:,.0f} img/s  bound {br:,.0f} img/s  {zr / br:.2f}× bound  "
        f"{zr / nr:.2f}× naive   (whole stage, {z['seconds']:.1f} s)")
    say(f"embed  {label}  {n_models} models  {images} imgs  steady state {z['steady']:,.0f} img/s"
        f"  {z['steady'] / br:.2f}× bound  {z['steady'] / nr:.2f}× naive   "
        f"start-up {z['startup']:.1f} s (model loading {z['load']:.1f} s of it)")
    say(ratio(f"embed {label}: zoorank's whole stage", z["seconds"], "the compute bound", bound))


def files_per_entry(store: Path) -> float:
    entries = [d for d in (store / "embeddings").glob("*/*/*") if d.is_dir()]
    return sum(len(list(d.glob("part-*.parquet"))) for d in entries) / max(1, len(entries))


def chunks_case(tmp: Path, args, embed: dict) -> None:
    """C one-model chunks (C = --chunks) of --arch at --chunks-size px over --chunks-images."""
    import zoorank

    specs = save_zoo(tmp / "zoo-chunks", args.arch, args.chunks, args.chunks_size)
    config = make_config(tmp / "store-chunks", specs, args.chunks_images, args.batch_size,
                         models_per_actor=1, **embed)
    runs = []
    for _ in range(args.repeat):
        r = run_zoorank(config)
        r["files"] = files_per_entry(Path(config.store))
        runs.append(r)
    best = min(runs, key=lambda r: r["seconds"])
    where = Path(zoorank.__file__).resolve().parents[1]
    each = ", ".join(f"{r['seconds']:.1f}" for r in runs)
    say(f"embed  chunks  {args.arch}@{args.chunks_size}px  {args.chunks} chunks × 1 model  "
        f"{args.chunks_images} imgs  batch {args.batch_size}  whole stage {best['seconds']:.1f} s "
        f"(runs: {each})  "
        f"files per entry {best['files']:.1f}   [zoorank from {where}]")


_MEASURE = """
import sys
sys.path.insert(0, {bench!r})
import zoorank.runtime
from zoorank.config.loading import load_config
from zoorank.embed import run_embed
rows = run_embed(load_config({cfg!r}))
print("DONE", int((rows["status"] == "done").sum()))
"""


def driver_memory_case(tmp: Path, args) -> None:
    """The driver's peak RSS embedding N images of cifar10/train.parquet, each N in a fresh process.
    """
    import yaml

    specs = save_zoo(tmp / "zoo-mem", "tiny", 1, 32)
    results = {}
    for n in args.memory_images:
        cfg = tmp / f"mem-{n}.yaml"
        cfg.write_text(yaml.safe_dump({
            "store": str(tmp / f"store-mem-{n}"),
            "datasets": [{"name": "cifar", "source": "parquet", "limit": n,
                          "path": str(DATA / "cifar10" / "train.parquet")}],
            "models": specs, "views": [{"name": "clean"}],
            "embed": {"batch_size": 256, "device": "cpu"},
        }))
        code = _MEASURE.format(bench=str(Path(__file__).parent), cfg=str(cfg))
        r = results[n] = run_child([sys.executable, "-c", code],
                                   env=dict(os.environ, ZOORANK_PROGRESS="0"))
        done = next(x.split()[1] for x in r.output.splitlines() if x.startswith("DONE "))
        say(f"embed  driver memory  tiny@32px  {n} imgs (cifar10 train)  peak RSS "
            f"{r.peak_rss / MB:,.0f} MiB  whole process {r.seconds:.1f} s  {done} entries done")
    lo, hi = min(results), max(results)
    say(f"embed  driver memory  {hi} vs {lo} imgs  peak RSS {results[hi].peak_rss / MB:,.0f} "
        f"vs {results[lo].peak_rss / MB:,.0f} MiB  "
        f"{results[hi].peak_rss / results[lo].peak_rss:.2f}×  (images {hi / lo:.0f}×)")


def main(argv=None) -> None:
    p = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    p.add_argument("--arch", default="resnet18")
    p.add_argument("--size", type=int, default=64)
    p.add_argument("--models", type=int, default=4)
    p.add_argument("--images", type=int, default=1024)
    p.add_argument("--tiny", type=int, default=8, help="tiny models for the decode-bound case")
    p.add_argument("--tiny-images", type=int, default=1024)
    p.add_argument("--many", type=int, default=100, help="tiny models for the per-model cost")
    p.add_argument("--many-images", type=int, default=256)
    p.add_argument("--batch-size", type=int, default=64)
    p.add_argument("--num-actors", type=int, default=None)
    p.add_argument("--repeat", type=int, default=2, help="interleaved repetitions (best of)")
    p.add_argument("--chunks", type=int, default=4, help="one-model chunks in the chunks case")
    p.add_argument("--chunks-images", type=int, default=512)
    p.add_argument("--chunks-size", type=int, default=32)
    p.add_argument("--memory-images", type=int, nargs="+", default=[10_000, 50_000])
    cases = ["resnet", "tiny", "many", "chunks", "driver-memory"]
    p.add_argument("--skip", nargs="*", default=[], choices=cases)
    p.add_argument("--only", nargs="*", default=None, choices=cases)
    harness.results_option(p, "bench_embed")
    args = p.parse_args(argv)
    if args.only is not None:
        args.skip = [c for c in cases if c not in args.only]
    if not (DATA / "cifar10" / "test.parquet").is_file():
        sys.exit(f"needs {DATA}/cifar10/test.parquet (set ZOORANK_SHARED_DATA)")
    sys.path.insert(0, str(Path(__file__).parent))  # bench_embed:tiny_net for the actors

    from zoorank.runtime import ensure_ray

    tmp = Path(tempfile.mkdtemp(prefix="bench-embed-"))
    embed = {"num_actors": args.num_actors} if args.num_actors else {}
    try:
        if set(cases) - set(args.skip) - {"driver-memory"}:  # that case runs its own processes
            ensure_ray()
        say(f"torch threads {torch.get_num_threads()}, load average {harness.load():.1f}")
        bs = args.batch_size
        if "resnet" not in args.skip:
            specs = save_zoo(tmp / "zoo", args.arch, args.models, args.size)
            config = make_config(tmp / "store", specs, args.images, bs, **embed)
            compare(f"{args.arch}@{args.size}px", config, args.images, bs, args.repeat)
            say(f"load average {harness.load():.1f}")
        if "tiny" not in args.skip:
            specs = save_zoo(tmp / "zoo", "tiny", max(args.tiny, args.many), 32)
            config = make_config(tmp / "store", specs[: args.tiny], args.tiny_images, bs, **embed)
            compare("tiny@32px", config, args.tiny_images, bs, args.repeat)
            say(f"load average {harness.load():.1f}")
        if "many" not in args.skip:
            specs = save_zoo(tmp / "zoo", "tiny", args.many, 32)
            one_cfg = make_config(tmp / "store", specs[:1], args.many_images, bs, **embed)
            many_cfg = make_config(tmp / "store", specs, args.many_images, bs, **embed)
            runs = [(run_zoorank(one_cfg), run_zoorank(many_cfg)) for _ in range(args.repeat)]
            one = min((r[0] for r in runs), key=lambda r: r["seconds"])
            many = min((r[1] for r in runs), key=lambda r: r["seconds"])
            per_model = (many["seconds"] - one["seconds"]) / (args.many - 1)
            # the same without the start-up's jitter: model loading + work after the first batch
            per_model_work = (many["work"] + many["load"] - one["work"] - one["load"]) / (
                args.many - 1)
            say(f"embed  tiny@32px  {args.many} models  {args.many_images} imgs  "
                f"{many['seconds']:.1f} s  vs 1 model {one['seconds']:.1f} s  "
                f"per-model overhead {per_model * 1000:,.0f} ms (wall)  "
                f"{per_model_work * 1000:,.0f} ms (loading + steady work)  "
                f"model loading {many['load']:.1f} s for {args.many} in the actor")
        if "chunks" not in args.skip:
            chunks_case(tmp, args, embed)
            say(f"load average {harness.load():.1f}")
        if "driver-memory" not in args.skip:
            driver_memory_case(tmp, args)
        REPORT.write(args.markdown, "bench_embed — EMBED throughput")
    finally:
        shutil.rmtree(tmp, ignore_errors=True)


if __name__ == "__main__":
    main()
