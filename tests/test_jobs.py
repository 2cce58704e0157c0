"""Cluster paths on loopback: `ray job submit` of the rank pipeline, and a store on S3."""

from __future__ import annotations

import os
import shutil
import signal
import subprocess
import sys
import tempfile
import time
from pathlib import Path

import pandas as pd
import pytest
import yaml
from deltalake import DeltaTable
from loopback_cluster import free_ports, wait_http

from zoorank.store import Store

REPO = Path(__file__).resolve().parents[1]
BIN = Path(sys.executable).parent

TINY_CONFIG = {
    "seed": 0,
    "datasets": [{"name": "digits", "source": "sklearn_digits", "limit": 240}],
    "models": [
        {"id": "cnn-w8", "source": "python", "name": "zoorank.tune.models:small_cnn",
         "model_kwargs": {"width": 8}, "input_size": 8},
        {"id": "cnn-w16", "source": "python", "name": "zoorank.tune.models:small_cnn",
         "model_kwargs": {"width": 16}, "input_size": 8},
        {"id": "cnn-w16-d2", "source": "python", "name": "zoorank.tune.models:small_cnn",
         "model_kwargs": {"width": 16, "depth": 2}, "input_size": 8},
    ],
    "views": [{"name": "clean"}, {"name": "simclr", "samples": 60, "per_sample": 4}],
    "metrics": ["rankme", "rankme_aug", "lidar", "twonn_id", "cluster_learnability", "clid"],
    "oracle": {"knn": True},
    "rank": {"bootstrap": 50},
}
#: what `ray job submit` runs: the same three models on fewer samples, one view and two metrics
#: (the job path, not the metrics, is under test; those run in tests/test_pipeline_e2e.py).
JOB_CONFIG = {**TINY_CONFIG, "datasets": [{"name": "digits", "source": "sklearn_digits", "limit": 120}],
              "views": [{"name": "clean"}], "metrics": ["rankme", "twonn_id"],
              "rank": {"bootstrap": 10}}


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
        env=env, stdout=open(tmp_path / "head.log", "w"), stderr=subprocess.STDOUT,
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
        # the job SDK's status, asked with the same environment (auth mode) as the submission
        status = subprocess.run(
            [sys.executable, "-c", "import sys; from ray.job_submission import JobSubmissionClient as C;"
             " print(C(sys.argv[1]).get_job_status(sys.argv[2]).value)",
             f"http://127.0.0.1:{dash}", job_id],
            env=env, capture_output=True, text=True, timeout=120,
        )
        assert status.stdout.strip().splitlines()[-1] == "SUCCEEDED", status.stdout + status.stderr
        leaderboard = DeltaTable(str(store / "leaderboard")).to_pandas()
        assert set(leaderboard["model_id"]) == {m["id"] for m in JOB_CONFIG["models"]}
        assert (store / "report" / "index.html").is_file()
    finally:
        os.killpg(head.pid, signal.SIGTERM)
        try:
            head.wait(timeout=60)
        except subprocess.TimeoutExpired:
            os.killpg(head.pid, signal.SIGKILL)
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
