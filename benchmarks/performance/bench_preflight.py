"""The checkpoint check before EMBED (:mod:`zoorank.zoo.preflight`): its cost for many checkpoints,
and as a fraction of EMBED's time on the demo.

- **many**: N distinct Lightning-style checkpoints of a small timm architecture (``test_resnet``,
  0.4 M parameters, seeded noise per file so that every digest differs), under one glob entry:
  the check cold (no cache, the default thread count), cold on one thread (the serial
  reference), and again with the store's cache (every file known: nothing is read).
- **demo**: the demo's zoo (``zoorank demo``'s Ray Tune search at the chosen size, SSL small
  CNNs from ``zoo.yaml``), then, in one process on a fresh store, the check cold and EMBED itself
  (:func:`zoorank.embed.run_embed`, the stage without the check); the fraction is check / EMBED.

Prints, never asserts; not run in CI. Example (a few minutes on 2 cores)::

    .venv/bin/python benchmarks/performance/bench_preflight.py --many 1000 --demo-size tiny
"""

from __future__ import annotations

import shutil
import sys
import tempfile
import time
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parents[1]))  # benchmarks/: the harness
import harness
from harness import Report

ARCH = "test_resnet"


def _checkpoints(folder: Path, n: int) -> None:
    import timm
    import torch

    torch.manual_seed(0)
    base = timm.create_model(ARCH, pretrained=False, num_classes=0).state_dict()
    for i in range(n):
        g = torch.Generator().manual_seed(i)
        state = {f"backbone.{k}": (v + 1e-3 * torch.randn(v.shape, generator=g)
                                   if v.is_floating_point() else v) for k, v in base.items()}
        state["projector.weight"] = torch.randn(16, 8, generator=g)
        run = folder / f"run{i:04d}"
        run.mkdir(parents=True)
        torch.save({"epoch": 0, "state_dict": state,
                    "optimizer_states": [{"state": {}, "param_groups": [{"lr": 0.1}]}]},
                   run / "last.ckpt")


def bench_many(report: Report, n: int, root: Path) -> None:
    from zoorank.config.loading import parse_config
    from zoorank.store import Store
    from zoorank.zoo.preflight import preflight
    from zoorank.zoo.resolve import resolve_models

    folder = root / "runs"
    t0 = time.perf_counter()
    _checkpoints(folder, n)
    report.say(f"many: wrote {n} checkpoints of {ARCH} in {time.perf_counter() - t0:.1f} s "
               f"({sum(f.stat().st_size for f in folder.rglob('*.ckpt')) / harness.MB:.0f} MB)")
    config = parse_config({
        "store": str(root / "store"),
        "datasets": [{"name": "d", "source": "sklearn_digits"}],
        "models": [{"source": "timm", "name": ARCH, "checkpoint": str(folder / "*" / "last.ckpt"),
                    "state_dict_prefix": "lightning", "input_size": 32}]}, "<bench>")
    models, resolve_s = harness.timed(resolve_models, config)
    report.say(f"many: resolve {len(models)} models (digests) {resolve_s:.1f} s")
    serial, serial_s = harness.timed(preflight, models, workers=1)
    cold, cold_s = harness.timed(preflight, models)
    store = Store(config.store)
    harness.timed(preflight, models, store=store)  # fills the cache
    warm, warm_s = harness.timed(preflight, models, store=store)
    rows = [["cold, 1 thread", serial.checked, serial.known, f"{serial_s:.1f}",
             f"{1e3 * serial_s / n:.1f}"],
            ["cold, default threads", cold.checked, cold.known, f"{cold_s:.1f}",
             f"{1e3 * cold_s / n:.1f}"],
            ["cached (store)", warm.checked, warm.known, f"{warm_s:.2f}",
             f"{1e3 * warm_s / n:.2f}"]]
    report.say(harness.table(["check", "loaded", "known", "seconds", "ms per checkpoint"], rows))
    report.say(harness.ratio("many: cold, threads", cold_s, "1 thread", serial_s))
    assert not cold.failed, cold.failed


def bench_demo(report: Report, size: str, root: Path) -> None:
    from zoorank import demo
    from zoorank.catalog.context import RunContext
    from zoorank.config.loading import parse_config
    from zoorank.embed import run_embed
    from zoorank.runtime import ensure_ray
    from zoorank.tune.config import experiment_location
    from zoorank.tune.search import run_search
    from zoorank.zoo.preflight import preflight

    preset = demo.SIZES[size]
    train, evaluate, input_size = demo._datasets("digits", None, preset)
    ensure_ray(None)
    t0 = time.perf_counter()
    tcfg = demo.tune_config(root / "demo", train, input_size, preset)
    store, _, rel = experiment_location(tcfg)
    run_search(tcfg, store=store)
    report.say(f"demo ({size}): the zoo trained in {time.perf_counter() - t0:.0f} s")
    rdict = demo.run_config_dict(root / "demo", evaluate, str(store.local_path(rel)), preset)
    rdict["store"] = str(root / "demo-store")
    config = parse_config(rdict, "<bench demo>")
    context = RunContext(config)
    models = context.catalog.models
    checked, check_s = harness.timed(preflight, models)
    _, embed_s = harness.timed(run_embed, config, context=context)
    report.say(f"demo ({size}): {checked.checked} checkpoints checked in {check_s:.2f} s; "
               f"EMBED of {len(models)} models on {evaluate.limit or 'all'} images "
               f"({len(config.views)} views) {embed_s:.1f} s")
    report.say(harness.ratio(f"demo ({size}): the check", check_s, "EMBED", embed_s)
               + f" ({100 * check_s / embed_s:.1f}% of EMBED; goal ≤ 5%)")


def main(argv: list[str] | None = None) -> None:
    args = harness.options(__doc__, "bench_preflight", argv, many=1000, demo_size="tiny",
                           skip_demo=False)
    report = Report()
    root = Path(tempfile.mkdtemp(prefix="bench-preflight-"))
    try:
        bench_many(report, args.many, root)
        if not args.skip_demo:
            bench_demo(report, args.demo_size, root)
    finally:
        shutil.rmtree(root, ignore_errors=True)
    report.write(args.markdown, "bench_preflight — every checkpoint loaded on CPU before EMBED")


if __name__ == "__main__":
    main()
