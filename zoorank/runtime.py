"""Starting or joining Ray the same way everywhere (CLI, pipelines, tests).

Ray's own output stays out of the user's console unless ``--debug`` (:data:`ENV_DEBUG`): its
start-up notes and warnings (the local-instance line, the token-auth notice, Ray Data's
progress-bar note) are below the level its loggers show, and worker and raylet output is not
forwarded to the driver (it stays in Ray's session logs). A worker's exception reaches zoorank
as the task's error (:mod:`zoorank.tasks.runner`), so failures are still recorded in the failed table.
With ``--debug`` Ray logs at INFO and forwards worker output as it does by default.
"""

from __future__ import annotations

import logging
import os
import sys
import warnings

from zoorank.tasks import retry

# Ray binds to the machine's interface address by default; these keep a local Ray on loopback and
# quiet. They must be set before Ray starts, so they are set on import of this module.
_RAY_ENV = {
    "RAY_ENABLE_WINDOWS_OR_OSX_CLUSTER": "0",
    "RAY_USAGE_STATS_ENABLED": "0",
    "RAY_DEDUP_LOGS": "0",
}
for _k, _v in _RAY_ENV.items():
    os.environ.setdefault(_k, _v)


#: set to ``1`` (by ``zoorank --debug``): Ray's own logs and worker output on the console.
ENV_DEBUG = "ZOORANK_DEBUG"
#: Ray's Python loggers whose records zoorank keeps off the console (``ray`` covers its children
#: except those with their own handlers, as Ray Data's).
RAY_LOGGERS = ("ray", "ray.data", "ray.data._internal.execution.streaming_executor", "ray.tune",
               "ray.train", "ray.air")


#: tries at starting a local Ray when its node misses Ray's start-up deadline (a loaded machine).
LOCAL_START_ATTEMPTS = retry.RAY_START.attempts


def debug_enabled() -> bool:
    """Whether ``--debug`` asked for Ray's own output (:data:`ENV_DEBUG`)."""
    return os.environ.get(ENV_DEBUG, "") not in ("", "0")


def quiet_ray_logging() -> None:
    """Ray's loggers at ERROR (INFO with ``--debug``), and Ray's Python warnings (deprecations
    of Ray Data and Tune) ignored unless ``--debug``."""
    level = logging.INFO if debug_enabled() else logging.ERROR
    for name in RAY_LOGGERS:
        logging.getLogger(name).setLevel(level)
    if not debug_enabled():
        warnings.filterwarnings("ignore", module=r"ray(\.|$)")


def ensure_ray(address: str | None = None, num_cpus: int | None = None) -> None:
    """Start a local Ray on demand (``address=None``) or join one (``"auto"`` / ``ray://...``).

    A Ray that is already initialised in this process (a test session, a Ray job) is reused.
    Ray's own output is kept off the console unless ``--debug`` (see the module docstring).
    """
    import ray

    if ray.is_initialized():
        quiet_ray_logging()
        return
    if address is None:
        address = os.environ.get("RAY_ADDRESS") or None
    debug = debug_enabled()
    kwargs: dict = {"include_dashboard": False, "log_to_driver": debug,
                    "logging_level": "INFO" if debug else "ERROR"}
    if address is None:
        kwargs["num_cpus"] = num_cpus or os.cpu_count() or 1
    handlers = _signal_handlers()
    if address is None:
        # Ray gives a local node a fixed 30 s to register, and a busy machine can miss it: its
        # bare Exception for that is tried again under the one retry policy (zoorank.tasks.retry)
        def again(state) -> None:
            ray.shutdown()
            print(f"zoorank: the local Ray did not start in Ray's 30 s (busy machine?); "
                  f"starting it again ({state.attempt_number + 1}/{retry.RAY_START.attempts})",
                  file=sys.stderr)

        retry.call(ray.init, policy=retry.RAY_START, on=retry.ray_start_timeout,
                   before_sleep=again, **kwargs)
    else:
        ray.init(address=address, **kwargs)
    _reinstall_signal_handlers(handlers)
    quiet_ray_logging()  # after init: it sets the "ray" logger's level from logging_level


def _signal_handlers() -> dict[int, object]:
    """The SIGTERM/SIGINT handlers of the main thread (none from another thread)."""
    import signal
    import threading

    if threading.current_thread() is not threading.main_thread():
        return {}
    return {s: signal.getsignal(s) for s in (signal.SIGTERM, signal.SIGINT)}


def _reinstall_signal_handlers(handlers: dict[int, object]) -> None:
    """Put back the Python handlers that ``ray.init`` replaced.

    ``ray.init`` sets the driver's SIGTERM handler to ``sys.exit(signum)`` (exit 15, and for a
    local head, after killing Ray's processes): zoorank's own handlers (the CLI's exit 143, the
    watch's clean stop) would be lost. Only Python callables are put back: where the process had
    the default action, Ray's handler stays, so its local processes are still cleaned up. Ray's
    ``atexit`` hook shuts a local Ray down on any exit, ours included.
    """
    import signal

    for signum, handler in handlers.items():
        if callable(handler) and signal.getsignal(signum) is not handler:
            signal.signal(signum, handler)


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
