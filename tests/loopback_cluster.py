"""A real multi-node Ray cluster on 127.0.0.1, for tests and benchmarks.

:class:`LoopbackCluster` runs ``ray.cluster_utils.Cluster`` (a head and worker nodes, each with its
own raylet and object store) in a server subprocess of its own (``python tests/loopback_cluster.py
SPEC``), a process group that :meth:`LoopbackCluster.stop` ends. Why not ``ray start --address``:
it refuses to join under ``RAY_ENABLE_WINDOWS_OR_OSX_CLUSTER=0``, and with it set to 1 Ray swaps
``--node-ip-address=127.0.0.1`` for the machine's interface address. ``Cluster`` keeps every node on
loopback. Every port is chosen free, and the temp dirs (``RAY_TMPDIR``, where Ray also writes its
"current cluster" file that a bare ``ray.init()`` would join) are private to the cluster, one per
node, so other Ray instances on the machine (the test session's, other people's) neither see nor
meet it.

Object-store credentials reach the cluster the way users give them: in the environment of every
node (``LoopbackCluster.env``, e.g. ``AWS_ACCESS_KEY_ID``, ``AWS_SECRET_ACCESS_KEY``,
``AWS_ENDPOINT_URL`` of the ``s3_server`` fixture), so URIs stay plain ``s3://bucket/key``.
"""

from __future__ import annotations

import json
import os
import shutil
import signal
import socket
import subprocess
import sys
import tempfile
import time
import urllib.request
from dataclasses import dataclass, field
from pathlib import Path

BIN = Path(sys.executable).parent
REPO = Path(__file__).resolve().parents[1]

#: what every Ray process of a loopback cluster runs with (ENVIRONMENT.md: loopback, no token).
RAY_ENV = {
    "RAY_AUTH_MODE": "disabled",
    "RAY_ENABLE_WINDOWS_OR_OSX_CLUSTER": "0",
    "RAY_USAGE_STATS_ENABLED": "0",
    "RAY_DATA_DISABLE_PROGRESS_BARS": "1",
    # nodes register slowly on 2 shared cores; Ray's default wait is too short there
    "RAY_raylet_start_wait_time_s": "180",
    "HF_HUB_OFFLINE": "1",
    "TRANSFORMERS_OFFLINE": "1",
    "PYTHONUNBUFFERED": "1",
}


def free_ports(n: int) -> list[int]:
    """``n`` distinct TCP ports free on 127.0.0.1 right now."""
    socks = []
    for _ in range(n):
        s = socket.socket()
        s.bind(("127.0.0.1", 0))
        socks.append(s)
    ports = [s.getsockname()[1] for s in socks]
    for s in socks:
        s.close()
    return ports


def wait_http(url: str, timeout: float) -> None:
    """Return once ``url`` answers; TimeoutError after ``timeout`` seconds."""
    deadline = time.time() + timeout
    while time.time() < deadline:
        try:
            with urllib.request.urlopen(url, timeout=2):
                return
        except OSError:
            time.sleep(1)
    raise TimeoutError(f"{url} did not answer within {timeout:.0f} s")


def base_env(extra: dict[str, str] | None = None) -> dict[str, str]:
    """This process's environment for a Ray subprocess: loopback Ray, this venv first on PATH."""
    env = {**os.environ, **RAY_ENV, "PATH": f"{BIN}{os.pathsep}{os.environ['PATH']}",
           "PYTHONPATH": str(REPO)}
    env.pop("RAY_ADDRESS", None)
    env.update(extra or {})
    return env


def end_process_group(proc: subprocess.Popen, timeout: float = 90) -> None:
    """SIGTERM the process group ``proc`` leads (started with ``start_new_session``), then SIGKILL."""
    if proc.poll() is not None:
        return
    try:
        os.killpg(proc.pid, signal.SIGTERM)
        proc.wait(timeout=timeout)
    except ProcessLookupError:
        return
    except subprocess.TimeoutExpired:
        os.killpg(proc.pid, signal.SIGKILL)
        proc.wait(timeout=timeout)


def kill_process_group(proc: subprocess.Popen, timeout: float = 60) -> None:
    """SIGKILL the process group ``proc`` leads (started with ``start_new_session``) and wait until
    none of its processes is left (reaped or gone), at most ``timeout`` seconds."""
    try:
        os.killpg(proc.pid, signal.SIGKILL)
    except ProcessLookupError:
        pass
    proc.wait(timeout=timeout)
    deadline = time.time() + timeout
    while _live_members(proc.pid) and time.time() < deadline:
        time.sleep(0.1)


def _live_members(pgid: int) -> list[int]:
    """Processes of group ``pgid`` that are not zombies (Linux ``/proc``; orphaned zombies wait on
    whatever reaps them here, which may be no one in a container)."""
    live = []
    for entry in os.scandir("/proc"):
        if not entry.name.isdigit():
            continue
        try:
            with open(f"/proc/{entry.name}/stat") as f:
                fields = f.read().rsplit(")", 1)[1].split()
        except OSError:
            continue
        if int(fields[2]) == pgid and fields[0] != "Z":  # state, ppid, pgrp
            live.append(int(entry.name))
    return live


def _node_ports() -> dict[str, int]:
    names = ("dashboard_agent_listen_port", "metrics_agent_port", "runtime_env_agent_port",
             "metrics_export_port", "object_manager_port")
    return dict(zip(names, free_ports(len(names)), strict=True))


def _serve(spec: dict) -> None:
    """The server subprocess: build the cluster, print its addresses, block until SIGTERM."""
    from ray.cluster_utils import Cluster

    stop = []
    signal.signal(signal.SIGTERM, lambda *_: stop.append(1))
    # Ray's default temp dir (where it writes "ray_current_cluster") is $RAY_TMPDIR/ray
    temp_dir = os.path.join(spec["temp_dir"], "ray")
    os.makedirs(temp_dir, exist_ok=True)
    common = {"object_store_memory": spec["object_store_bytes"], "temp_dir": temp_dir}
    cluster = Cluster(initialize_head=True, head_node_args={
        **common, **_node_ports(), "num_cpus": spec["head_cpus"], "num_gpus": 0,
        "gcs_server_port": spec["gcs_port"], "include_dashboard": True,
        "dashboard_host": "127.0.0.1", "dashboard_port": spec["dashboard_port"],
        "ray_client_server_port": free_ports(1)[0],
    })
    try:
        for i, (cpus, gpus) in enumerate(spec["workers"]):
            # a temp dir per node, as separate machines have: nodes sharing one would share the
            # runtime_env's working_dir copy, and a worker node's agent deletes it (while the job
            # driver on the head still runs in it) once its own tasks are done
            node_tmp = os.path.join(spec["temp_dir"], f"w{i}")
            os.makedirs(node_tmp, exist_ok=True)
            cluster.add_node(**{**common, "temp_dir": node_tmp}, **_node_ports(), num_cpus=cpus,
                             num_gpus=gpus)
        cluster.wait_for_nodes(timeout=spec["timeout"])
        print("READY", json.dumps({"address": cluster.address}), flush=True)
        while not stop:
            time.sleep(0.5)
    finally:
        # nothing on these nodes needs a graceful drain (30 s per node); a SIGKILL'd raylet takes
        # its workers with it
        for node in [*cluster.worker_nodes, cluster.head_node]:
            cluster.remove_node(node, allow_graceful=False)


@dataclass
class LoopbackCluster:
    """A head without GPUs plus worker nodes on 127.0.0.1, started with :meth:`start`.

    ``workers`` lists each worker node's ``(num_cpus, num_gpus)``. The GPUs are declared resources
    only: Ray schedules on them; torch here is CPU. ``env`` goes to every node (and so to every
    task, actor and job driver on it).
    """

    log_dir: Path
    head_cpus: float = 1
    workers: list[tuple[float, float]] = field(default_factory=lambda: [(1, 1), (1, 1)])
    env: dict[str, str] = field(default_factory=dict)
    object_store_bytes: int = 200 * 1024**2
    address: str = ""  #: the GCS address a driver joins (``ray.init(address=...)``, ``--address``)
    dashboard_port: int = 0
    temp_dir: str = ""
    _proc: subprocess.Popen | None = None

    @property
    def dashboard(self) -> str:
        """The dashboard / job server / state API address."""
        return f"http://127.0.0.1:{self.dashboard_port}"

    def start(self, timeout: float = 300) -> LoopbackCluster:
        """Start every node and return once all are alive and the job server answers."""
        self.temp_dir = tempfile.mkdtemp(prefix="zr-", dir="/tmp")
        gcs_port, self.dashboard_port = free_ports(2)
        spec = {"head_cpus": self.head_cpus, "workers": self.workers, "timeout": timeout,
                "object_store_bytes": self.object_store_bytes, "temp_dir": self.temp_dir,
                "gcs_port": gcs_port, "dashboard_port": self.dashboard_port}
        self.log_dir.mkdir(parents=True, exist_ok=True)
        log = self.log_dir / "cluster.log"
        self._proc = subprocess.Popen(
            [sys.executable, __file__, json.dumps(spec)],
            env=base_env({**self.env, "RAY_TMPDIR": self.temp_dir}),
            stdout=subprocess.PIPE, stderr=open(log, "w"),  # noqa: SIM115 (outlives this call)
            text=True, start_new_session=True,
        )
        try:
            line = self._proc.stdout.readline()  # the server prints READY once every node is up
            if not line.startswith("READY"):
                raise RuntimeError("the cluster server exited before it was ready")
            self.address = json.loads(line.split(" ", 1)[1])["address"]
            wait_http(f"{self.dashboard}/api/version", timeout=timeout)
        except BaseException:
            self.stop()
            raise RuntimeError(f"loopback cluster did not start:\n{log.read_text()[-3000:]}") \
                from None
        return self

    def alive_nodes(self) -> list[dict]:
        """The state API's alive nodes: ``node_id``, ``resources_total``, ``is_head_node``, ..."""
        return [n for n in self._state("nodes") if n["state"] == "ALIVE"]

    def actors(self) -> list[dict]:
        """Every actor the cluster has run, alive and dead: ``class_name``, ``node_id``, ..."""
        return self._state("actors")

    def _state(self, kind: str) -> list[dict]:
        with urllib.request.urlopen(f"{self.dashboard}/api/v0/{kind}?limit=10000&detail=1",
                                    timeout=60) as r:
            return json.load(r)["data"]["result"]["result"]

    def submit(self, working_dir: Path, entrypoint: list[str], timeout: float,
               job_id: str | None = None) -> subprocess.CompletedProcess:
        """``ray job submit --working-dir DIR -- ENTRYPOINT`` against this cluster; waits for it."""
        job_id = job_id or f"zoorank-{os.getpid()}-{time.time_ns()}"
        return subprocess.run(
            [str(BIN / "ray"), "job", "submit", "--address", self.dashboard, "--submission-id",
             job_id, "--working-dir", str(working_dir), "--", *entrypoint],
            env=base_env(), capture_output=True, text=True, timeout=timeout,
        )

    def job_status(self, job_id: str) -> str:
        """The job server's status of ``job_id`` (``SUCCEEDED``, ``FAILED``, ...)."""
        with urllib.request.urlopen(f"{self.dashboard}/api/jobs/{job_id}", timeout=30) as r:
            return json.load(r)["status"]

    def stop(self) -> None:
        """End the cluster, then remove its temp dir.

        Every process of every node (GCS, raylets, agents, workers, job drivers) is in the server's
        process group: it is SIGKILLed at once (nothing on these throwaway nodes needs a drain, and
        removing the nodes one by one costs tens of seconds on 2 cores), and this returns once no
        process of the group is left.
        """
        if self._proc is not None:
            kill_process_group(self._proc)
            self._proc = None
        if self.temp_dir:
            shutil.rmtree(self.temp_dir, ignore_errors=True)


if __name__ == "__main__":
    _serve(json.loads(sys.argv[1]))
