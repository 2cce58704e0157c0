"""EMBED's resources: the device (``embed.device: auto`` is ``cuda`` when the cluster has GPUs or its
autoscaler can add some), the precision, how many embedding tasks run at once and with how many
threads, and the wait for GPU workers to join."""

from __future__ import annotations

import logging
import os
from dataclasses import dataclass

from zoorank.catalog import planned_precision
from zoorank.config import EmbedOptions
from zoorank.embed.work_plan import choose_device
from zoorank.errors import ConfigError

log = logging.getLogger("zoorank.embed")


@dataclass
class Resources:
    """What one EMBED run uses: the device and precision, the embedding tasks that run at once,
    and the CPUs, GPUs and threads of each."""

    device: str
    precision: str
    num_workers: int  # embedding tasks that run at once (GPUs, or CPU workers)
    num_threads: int
    num_cpus: float
    num_gpus: float
    allow_cpu_torch: bool = False
    total_cpus: float = 1.0


def cluster_resources(options: EmbedOptions) -> Resources:
    """The :class:`Resources` for ``options`` on the Ray cluster as it is (or can grow to)."""
    import ray

    from zoorank.runtime import autoscaler_gpus, cluster_gpus

    gpus, possible = cluster_gpus(), autoscaler_gpus()
    device = choose_device(options.device, gpus, possible)
    if device == "cuda" and gpus == 0 and possible == 0:
        raise ConfigError("embed.device: 'cuda' but the Ray cluster has no GPU and its autoscaler "
                          "config cannot add any")
    precision = planned_precision(options, device)
    cpus = float(ray.cluster_resources().get("CPU", os.cpu_count() or 1))
    allow_cpu = options.allow_cpu_torch or os.environ.get("ZOORANK_GPU_AS_CPU") == "1"
    if device == "cuda":
        workers = options.num_actors or max(1, int(gpus if gpus > 0 else min(possible, 64)))
        threads = max(1, int(options.num_cpus_per_actor))
        return Resources(device, precision, workers, threads, options.num_cpus_per_actor, 1.0,
                          allow_cpu, cpus)
    # On CPU, parallel batches beat parallel threads: intra-op threads wait on each other at every
    # layer (badly so on a shared machine), so up to 4 workers share the cores.
    workers = options.num_actors or max(1, min(4, int(cpus)))
    threads = max(1, int(cpus // workers))
    return Resources(device, precision, workers, threads, options.num_cpus_per_actor, 0.0,
                      allow_cpu, cpus)


def wait_for_gpus(res: Resources, options: EmbedOptions) -> None:
    """Wait until the GPU workers the stage needs joined (ConfigError naming the setting if not)."""
    from zoorank import runtime

    try:
        have = runtime.wait_for_gpus(res.num_workers, options.gpu_wait_seconds)
    except TimeoutError:
        raise ConfigError(
            f"embed.device: {options.device!r} needs GPUs, but none joined the Ray cluster within "
            f"embed.gpu_wait_seconds={options.gpu_wait_seconds:g} s (the autoscaler was asked for "
            f"{res.num_workers} GPU worker(s)); check the GPU node type of the cluster config, or "
            "set embed.device: cpu") from None
    log.info("embed: %g GPU(s) in the cluster", have)
