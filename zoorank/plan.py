"""What a config's night costs, before it runs (``zoorank plan CONFIG``): the models, images and
views, the forward passes (images × models × views), and an estimate of GPU-hours per
architecture.

Conventions
-----------
* **Forward passes** of a model: the sum over its (dataset, view) entries of the images the view
  covers × its views per image (:func:`zoorank.catalog.plan_entries`, the plan EMBED runs).
* **Throughput** (images per second on one GPU), per architecture, from one of:
  ``configured``: the value given (``--throughput N`` for every architecture, or
  ``ARCH=N`` for one); ``measured``: a forward of :data:`MEASURE_BATCH` random inputs at the
  model's input size through the network EMBED builds (:func:`zoorank.zoo.load_model`), on
  this machine's CPU (the fastest of :data:`MEASURE_REPEATS` after one warm-up: other work on
  the machine only slows a forward down), multiplied by ``gpu_speedup`` (an assumption, stated
  in the output; :data:`DEFAULT_GPU_SPEEDUP`).
* **GPU-hours** = forward passes / throughput / 3600. Not counted: decoding, Ray start-up,
  SCORE and RANK. It is an estimate: time a few batches on the cluster's GPU and pass
  ``--throughput`` for a better one.
* Nothing is written: the zoo is resolved and the datasets indexed without a store.
"""

from __future__ import annotations

import json
import time
from collections import defaultdict
from collections.abc import Mapping
from typing import TYPE_CHECKING, Any

if TYPE_CHECKING:
    from zoorank.config import RunConfig
    from zoorank.zoo import ResolvedModel

#: images per timed forward, and how many timed forwards (after one warm-up)
MEASURE_BATCH = 8
MEASURE_REPEATS = 5
#: how many times faster than this CPU a GPU is assumed to run a forward, unless told
#: (``--gpu-speedup``); an assumption, printed as one
DEFAULT_GPU_SPEEDUP = 20.0


def architecture_key(model: ResolvedModel) -> str:
    """The architecture a model's throughput is shared with: source, name, kwargs, input size."""
    spec = model.spec
    kwargs = ",".join(f"{k}={json.dumps(v)}" for k, v in sorted(spec.model_kwargs.items()))
    from zoorank.config.model_spec import source_traits

    name = spec.name  # an architecture or a factory; a file or folder: its last part
    if source_traits(spec.source).name_is_path != "no":
        name = str(spec.name).rstrip("/").rsplit("/", 1)[-1]
    return f"{spec.source}:{name}" + (f"({kwargs})" if kwargs else "") + \
        f" @{model.geometry.input_size}px"


def gpu_hours(passes: int, images_per_s: float) -> float:
    """Forward passes at ``images_per_s`` as hours."""
    return passes / images_per_s / 3600.0


def measure_cpu(model: ResolvedModel, batch: int = MEASURE_BATCH,
                repeats: int = MEASURE_REPEATS) -> float:
    """Images per second of ``model``'s forward on this machine's CPU (conventions above)."""
    import torch

    from zoorank.zoo import load_model

    net = load_model(model, device="cpu")
    size = model.geometry.input_size
    x = torch.randn(batch, 3, size, size, generator=torch.Generator().manual_seed(0))
    times = []
    with torch.inference_mode():
        for i in range(repeats + 1):
            start = time.perf_counter()
            net(x)
            if i:  # the first is the warm-up
                times.append(time.perf_counter() - start)
    return batch / max(min(times), 1e-9)


def plan(config: RunConfig, throughput: Mapping[str, float] | None = None,
         every: float | None = None, gpu_speedup: float = DEFAULT_GPU_SPEEDUP) -> dict[str, Any]:
    """The night's plan of ``config`` (conventions above), JSON-ready.

    ``throughput``: images/s per GPU by :func:`architecture_key`; ``every``: for the other
    architectures; those without either are measured.
    """
    from zoorank.catalog import plan_entries
    from zoorank.data.sources import index_samples
    from zoorank.store.uris import DigestCache
    from zoorank.zoo import resolve_models

    digests = DigestCache()  # no store: nothing is written
    models = [m for m in resolve_models(config, digests) if not m.unreadable]
    indexes = {spec.name: index_samples(spec, config.seed, digests) for spec in config.datasets}
    entries = plan_entries(config, models, indexes)
    passes: dict[str, int] = defaultdict(int)
    for e in entries:
        passes[e.model.model_id] += e.expected_rows
    archs: dict[str, list[ResolvedModel]] = defaultdict(list)
    for m in models:
        archs[architecture_key(m)].append(m)
    rows = []
    for key, members in archs.items():
        n = sum(passes[m.model_id] for m in members)
        row: dict[str, Any] = {"architecture": key, "models": len(members), "forward_passes": n}
        given = (throughput or {}).get(key, every)
        if given is not None:
            row.update(images_per_s=float(given), throughput_source="configured")
        else:
            try:
                cpu = measure_cpu(members[0])
            except Exception as err:  # noqa: BLE001 (a model that cannot be built is reported)
                row.update(images_per_s=None, throughput_source="not measured",
                           error=f"{type(err).__name__}: {str(err).splitlines()[0] if str(err) else ''}")
                rows.append(row)
                continue
            row.update(cpu_images_per_s=cpu, images_per_s=cpu * gpu_speedup,
                       throughput_source="measured")
        row["gpu_hours"] = gpu_hours(n, row["images_per_s"])
        rows.append(row)
    views = [{"name": v.name, "per_sample": v.per_sample, "samples": v.samples} for v in config.views]
    known = [r["gpu_hours"] for r in rows if r.get("gpu_hours") is not None]
    return {
        "models": len(models),
        "images": {name: int(len(index.sample_id)) for name, index in indexes.items()},
        "views": views,
        "forward_passes": int(sum(passes.values())),
        "architectures": rows,
        "gpu_hours": sum(known),
        "gpu_speedup": gpu_speedup,
        "threads": _threads(),
        "estimate": True,
    }


def _threads() -> int:
    import torch

    return int(torch.get_num_threads())


def plan_text(doc: Mapping[str, Any], config_name: str) -> str:
    """The plan as the console prints it."""
    images = ", ".join(f"{name} {n:,}" for name, n in doc["images"].items())
    views = ", ".join(
        f"{v['name']} ({'every image' if v['samples'] is None else format(v['samples'], ',')}"
        f"{'' if v['samples'] is None else ' images'} × {v['per_sample']})" for v in doc["views"])
    lines = [f"Plan for {config_name} (an estimate of the forward passes' cost, not a measurement "
             "of the night)",
             f"  models:         {doc['models']} ({len(doc['architectures'])} architecture(s))",
             f"  images:         {images}",
             f"  views:          {views}",
             f"  forward passes: {doc['forward_passes']:,} (images × models × views)", ""]
    width = max([len("architecture")] + [len(r["architecture"]) for r in doc["architectures"]])
    head = f"  {'architecture':<{width}}  models  forward passes   {'images/s/GPU':>20}"
    lines.append(head + "  GPU-hours")
    measured = False
    for r in doc["architectures"]:
        if r.get("images_per_s") is None:
            lines.append(f"  {r['architecture']:<{width}}  {r['models']:>6}  "
                         f"{r['forward_passes']:>14,}   not measured: {r.get('error')}")
            continue
        measured |= r["throughput_source"] == "measured"
        rate = f"{r['images_per_s']:,.0f} ({r['throughput_source']})"
        lines.append(f"  {r['architecture']:<{width}}  {r['models']:>6}  {r['forward_passes']:>14,}"
                     f"   {rate:>20}  {r['gpu_hours']:.3g}")
    lines.append(f"  total: {doc['gpu_hours']:.3g} GPU-hours")
    lines.append("")
    if measured:
        lines.append(f"Throughput 'measured': a forward of {MEASURE_BATCH} random images per "
                     f"architecture on this machine's CPU ({doc['threads']} threads), scaled by "
                     f"--gpu-speedup {doc['gpu_speedup']:g} (an assumption, not a measurement of "
                     "your GPU).")
    if any(r.get("throughput_source") == "configured" for r in doc["architectures"]):
        lines.append("Throughput 'configured': the --throughput value given.")
    lines.append("For a better estimate, time a few batches on one of the cluster's GPUs and pass "
                 "--throughput IMAGES_PER_S. Not counted: decoding, Ray start-up, SCORE and RANK.")
    return "\n".join(lines)
