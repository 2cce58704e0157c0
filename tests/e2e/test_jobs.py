"""Cluster paths on loopback: `ray job submit` of the rank pipeline, and a store on S3."""

from __future__ import annotations

import contextlib
import json
import os
import shutil
import signal
import subprocess
import sys
import tempfile
import time
import urllib.request
from pathlib import Path

import pandas as pd
import pytest
import yaml
from deltalake import DeltaTable
from loopback_cluster import free_ports, wait_http

from zoorank.store import Store

REPO = Path(__file__).resolve().parents[2]
BIN = Path(sys.executable).parent

TINY_CONFIG = {
    "seed": 0,
    "datasets": [{"name": "digits", "source": "sklearn_digits", "limit": 120}],
    "models": [
        {"id": "cnn-w8", "source": "python", "name": "zoorank.tune.models:small_cnn",
         "model_kwargs": {"width": 8}, "input_size": 8},
        {"id": "cnn-w16", "source": "python", "name": "zoorank.tune.models:small_cnn",
         "model_kwargs": {"width": 16}, "input_size": 8},
        {"id": "cnn-w16-d2", "source": "python", "name": "zoorank.tune.models:small_cnn",
         "model_kwargs": {"width": 16, "depth": 2}, "input_size": 8},
    ],
    "views": [{"name": "clean"}, {"name": "simclr", "samples": 30, "per_sample": 4}],
    # a clean-view, an augmented-view and a pool metric: the store's paths, not the metrics, are
    # under test (those run in tests/e2e/test_pipeline_e2e.py)
    "metrics": ["rankme", "lidar", "clid"],
    "oracle": {"knn": True},
    "rank": {"bootstrap": 10},
}
#: what `ray job submit` runs: the same three models, one view, two metrics and no oracle (the job
#: path, not the metrics, is under test).
JOB_CONFIG = {**{k: v for k, v in TINY_CONFIG.items() if k != "oracle"},
              "views": [{"name": "clean"}], "metrics": ["rankme", "twonn_id"]}


@pytest.mark.slow
@pytest.mark.timeout(900)
def test_ray_job_submit_runs_the_rank_pipeline(tmp_path):
    gcs, dash, client, agent, agent_grpc, runtime_env, metrics = free_ports(7)
    env = {
        **os.environ,
        "PATH": f"{BIN}{os.pathsep}{os.environ['PATH']}",
        "RAY_AUTH_MODE": "disabled",
        "RAY_ENABLE_WINDOWS_OR_OSX_CLUSTER": "0",
        "RAY_USAGE_STATS_ENABLED": "0",
        "RAY_DATA_DISABLE_PROGRESS_BARS": "1",
        "PYTHONPATH": str(REPO),
    }
    env.pop("RAY_ADDRESS", None)
    # Ray's AF_UNIX socket paths must stay under 107 bytes: pytest's tmp_path is too deep.
    ray_tmp = tempfile.mkdtemp(prefix="zr-", dir="/tmp")
    # --block keeps the head in a process group of its own that we end ourselves: a bare `ray stop`
    # would also stop every other Ray on the machine (such as the test session's).
    head = subprocess.Popen(
        [str(BIN / "ray"), "start", "--head", "--block", "--num-cpus=2", f"--port={gcs}",
         "--node-ip-address=127.0.0.1", "--include-dashboard=true", "--dashboard-host=127.0.0.1",
         f"--dashboard-port={dash}", f"--ray-client-server-port={client}",
         f"--dashboard-agent-listen-port={agent}", f"--dashboard-agent-grpc-port={agent_grpc}",
         f"--runtime-env-agent-port={runtime_env}", f"--metrics-export-port={metrics}",
         f"--temp-dir={ray_tmp}"],
        # no drain on SIGTERM (Ray waits up to 30 s by default): the job is over by then
        env={**env, "RAY_GRACEFUL_SHUTDOWN_DRAIN_TIMEOUT_S": "0"},
        stdout=open(tmp_path / "head.log", "w"), stderr=subprocess.STDOUT,
        start_new_session=True,
    )
    try:
        try:
            wait_http(f"http://127.0.0.1:{dash}/api/version", timeout=300)
        except TimeoutError:
            raise AssertionError((tmp_path / "head.log").read_text()[-3000:]) from None
        work = tmp_path / "job"
        (work / "pipelines").mkdir(parents=True)
        shutil.copy(REPO / "pipelines" / "rank_zoo.py", work / "pipelines" / "rank_zoo.py")
        store = tmp_path / "store"
        job_id = f"zoorank-test-{os.getpid()}-{int(time.time())}"
        (work / "tiny.yaml").write_text(yaml.safe_dump({**JOB_CONFIG, "store": str(store)}))
        proc = subprocess.run(
            [str(BIN / "ray"), "job", "submit", "--address", f"http://127.0.0.1:{dash}",
             "--submission-id", job_id, "--working-dir", str(work), "--",
             "python", "pipelines/rank_zoo.py", "tiny.yaml"],
            env=env, capture_output=True, text=True, timeout=720,
        )
        assert proc.returncode == 0, proc.stdout[-3000:] + proc.stderr[-3000:]
        # the job's status from the head's Jobs REST API (what the job SDK asks; no auth here)
        with urllib.request.urlopen(f"http://127.0.0.1:{dash}/api/jobs/{job_id}", timeout=60) as r:
            job = json.load(r)
        assert job["status"] == "SUCCEEDED", job
        leaderboard = DeltaTable(str(store / "leaderboard")).to_pandas()
        assert set(leaderboard["model_id"]) == {m["id"] for m in JOB_CONFIG["models"]}
        assert (store / "report" / "index.html").is_file()
    finally:
        # SIGTERM to `ray start --block` alone: it drains and stops its node while the GCS is up (a
        # SIGTERM to the whole group ends the GCS first and leaves it waiting out a GCS timeout);
        # whatever is left of the group is then killed.
        head.send_signal(signal.SIGTERM)
        with contextlib.suppress(subprocess.TimeoutExpired):
            head.wait(timeout=60)
        with contextlib.suppress(ProcessLookupError):
            os.killpg(head.pid, signal.SIGKILL)
        head.wait()
        shutil.rmtree(ray_tmp, ignore_errors=True)


@pytest.mark.slow
@pytest.mark.timeout(900)
def test_store_on_s3_gives_the_same_leaderboard_as_local_disk(tmp_path, s3_server, ray_session):
    from zoorank.config.loading import parse_config
    from zoorank.pipeline import run_all

    local = parse_config({**TINY_CONFIG, "store": str(tmp_path / "local")})
    remote = parse_config({**TINY_CONFIG, "store": s3_server("zoorank-s3-test/run")})
    run_all(local)
    run_all(remote)
    a = Store(local.store).read_frame("leaderboard")
    b = Store(remote.store).read_frame("leaderboard")
    assert len(a) == 3
    pd.testing.assert_frame_equal(a.reset_index(drop=True), b.reset_index(drop=True))
    assert Store(remote.store).exists("report/index.html")
