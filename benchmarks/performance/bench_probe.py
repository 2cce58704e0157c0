"""The probe API's cost (issue 18): ``zoorank.probe.evaluate`` for a ResNet-18 on CPU, 1k × 4 views.

Builds the probe set once (CIFAR-10 test images from ``../shared/data`` when present, else digits
upsampled to 32 px), then times ``evaluate`` for timm ``resnet18`` (random init, its own stem) at
32 px: embedding (1k clean + 4k views) and the whole per-model metric suite, split. The baseline is
a bare forward of the same network over the same 5k images (no metrics): the compute bound of the
embedding part. Prints, never asserts::

    .venv/bin/python benchmarks/performance/bench_probe.py                 # 1000 × 4, 3 repeats
    .venv/bin/python benchmarks/performance/bench_probe.py --samples 256 --repeats 1
"""

from __future__ import annotations

import os
import sys
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parents[1]))  # benchmarks/: the harness
import harness
import numpy as np
import torch
from harness import ratio, table, timed

from zoorank.probe import build_probe_set, evaluate

REPO = Path(__file__).resolve().parents[2]
_CANDIDATES = [Path(os.environ.get("ZOORANK_SHARED_DATA", REPO.parent / "shared" / "data")),
               REPO.parents[1] / "shared" / "data"]
SHARED = next((p / "cifar10" / "test.parquet" for p in _CANDIDATES
               if (p / "cifar10" / "test.parquet").is_file()), _CANDIDATES[0] / "cifar10")


def main() -> None:
    args = harness.options(__doc__, "bench_probe", samples=1000, per_sample=4, repeats=3, threads=2,
                           arch="resnet18")
    torch.set_num_threads(args.threads)
    if SHARED.is_file():
        dataset = {"name": "cifar10", "source": "parquet", "path": str(SHARED),
                   "image_column": "image", "limit": args.samples}
    else:
        dataset = {"name": "digits", "source": "sklearn_digits", "limit": args.samples}
    probe, build = timed(build_probe_set, dataset, input_size=32, samples=args.samples,
                         per_sample=args.per_sample, seed=0)
    import timm

    torch.manual_seed(0)
    model = timm.create_model(args.arch, pretrained=False, num_classes=0).eval()
    images = np.concatenate([probe.clean, probe.views.reshape(-1, 32, 32, 3)])
    x = torch.from_numpy(images).permute(0, 3, 1, 2).float() / 255.0

    def forward() -> None:
        with torch.inference_mode():
            for i in range(0, len(x), 256):
                model(x[i:i + 256])

    _, bare = timed(forward, repeat=args.repeats)
    runs = [evaluate(model, probe) for _ in range(args.repeats)]
    embed = min(r.seconds["embed"] for r in runs)
    metrics = min(r.seconds["metrics"] for r in runs)
    total = min(r.seconds["total"] for r in runs)
    r = runs[-1]
    slow = sorted(((p.get("seconds", 0.0), m) for m, p in r.params.items()), reverse=True)[:4]
    lines = [table(["what", "seconds"], [[name, f"{value:.2f}"] for name, value in [
                 ("probe set build (once)", build), ("bare forward (bound)", bare),
                 ("evaluate: embed", embed), ("evaluate: metrics", metrics),
                 ("evaluate: total", total)]]), "",
             "slowest metrics: " + ", ".join(f"{m} {s:.2f}s" for s, m in slow),
             f"probe  {args.arch}@32px  {dataset['name']}  {len(probe.clean)} clean + "
             f"{probe.n}×{probe.q} views  d={r.dim}  {args.threads} threads  "
             f"flags {[k for k, v in r.flags.items() if v] or 'none'}",
             ratio("evaluate: embed", embed, "bare forward", bare)]
    print("\n".join(lines))
    harness.write_results(args.markdown, "bench_probe — zoorank.probe.evaluate against a bare "
                          "forward", "\n".join(lines))


if __name__ == "__main__":
    main()
