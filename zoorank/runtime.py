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


def autoscaler_gpus() -> float:
    """GPUs the cluster's autoscaler config can bring up (0 without an autoscaler or GPU nodes).

    Read from the cluster config the autoscaler publishes in the GCS (what Ray Train and Ray Data
    read too); a local Ray has none.
    """
    try:
        import ray._private.state as state

        limits = state.state.get_max_resources_from_cluster_config() or {}
    except Exception:  # no autoscaler, or an older/newer Ray without this call
        return 0.0
    return float(limits.get("GPU", 0) or 0)


def wait_for_gpus(wanted: int, timeout_s: float, poll_s: float = 2.0) -> float:
    """Ask the autoscaler for ``wanted`` one-GPU bundles and wait until a GPU joins the cluster.

    Returns the GPUs present. Raises ``TimeoutError`` when none come within ``timeout_s``. The
    request is a floor for the autoscaler; :func:`release_gpu_request` lifts it.
    """
    import time

    have = cluster_gpus()
    if have > 0:
        return have
    from ray.autoscaler.sdk import request_resources

    request_resources(bundles=[{"GPU": 1}] * max(1, int(wanted)))
    deadline = time.monotonic() + timeout_s
    while time.monotonic() < deadline:
        time.sleep(poll_s)
        have = cluster_gpus()
        if have > 0:
            return have
    raise TimeoutError(f"no GPU joined the Ray cluster within {timeout_s:g} s")


def release_gpu_request() -> None:
    """Lift the floor :func:`wait_for_gpus` set, so idle GPU workers can scale down."""
    try:
        from ray.autoscaler.sdk import request_resources

        request_resources(bundles=[])
    except Exception:  # no autoscaler to tell
        pass


def peak_rss_bytes() -> int:
    """This process's peak resident memory so far (Linux/macOS ``getrusage``), in bytes."""
    import resource
    import sys

    peak = resource.getrusage(resource.RUSAGE_SELF).ru_maxrss
    return int(peak if sys.platform == "darwin" else peak * 1024)
