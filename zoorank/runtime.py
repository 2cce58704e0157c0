"""Starting or joining Ray the same way everywhere (CLI, pipelines, tests)."""

from __future__ import annotations

import os

# Ray binds to the machine's interface address by default; these keep a local Ray on loopback and
# quiet. They must be set before Ray starts, so they are set on import of this module.
_RAY_ENV = {
    "RAY_ENABLE_WINDOWS_OR_OSX_CLUSTER": "0",
    "RAY_USAGE_STATS_ENABLED": "0",
    "RAY_DEDUP_LOGS": "0",
}
for _k, _v in _RAY_ENV.items():
    os.environ.setdefault(_k, _v)


def ensure_ray(address: str | None = None, num_cpus: int | None = None) -> None:
    """Start a local Ray on demand (``address=None``) or join one (``"auto"`` / ``ray://...``).

    A Ray that is already initialised in this process (a test session, a Ray job) is reused.
    """
    import ray

    if ray.is_initialized():
        return
    if address is None:
        address = os.environ.get("RAY_ADDRESS") or None
    kwargs: dict = {"include_dashboard": False, "log_to_driver": True, "logging_level": "WARNING"}
    if address is None:
        kwargs["num_cpus"] = num_cpus or os.cpu_count() or 1
    ray.init(address=address, **kwargs)


def cluster_gpus() -> float:
    """GPUs the current Ray cluster has (0 on CPU machines)."""
    import ray

    return float(ray.cluster_resources().get("GPU", 0.0))
