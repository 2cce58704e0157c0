"""Several real `zoorank` processes on one store (local and loopback S3): no lock, no lost row.

Every store write is one Delta commit with conflict detection (zoorank.store.tables); a row
computed from the same inputs is never rewritten (zoorank.store.schema.UPDATE_RULES). So two runs started
together end like one run, a writer stopped (SIGSTOP) past any conflict window and resumed commits
nothing over what the other finished, and `zoorank report` during a run reads one snapshot.
"""

from __future__ import annotations

import json
import os
import shutil
import signal
import subprocess
import sys
import time
from pathlib import Path

import numpy as np
import pandas as pd
import pytest
import yaml

from zoorank.store import Store

pytestmark = [pytest.mark.slow, pytest.mark.timeout(900)]

REPO = Path(__file__).resolve().parents[2]

#: a run of a few seconds of compute: 2 tiny CNNs on 120 digits, clean view, 2 metrics, kNN oracle.
TINY = {
    "seed": 0,
    "datasets": [{"name": "digits", "source": "sklearn_digits", "limit": 120}],
    "models": [
        {"id": f"cnn-w{w}", "source": "python", "name": "zoorank.tune.models:small_cnn",
         "model_kwargs": {"width": w}, "input_size": 8} for w in (4, 8)
    ],
    "views": [{"name": "clean"}],
    "metrics": ["rankme", "twonn_id"],
    "oracle": {"knn": True},
    "rank": {"bootstrap": 20},
}


def _config(tmp_path: Path, store: str, name: str) -> Path:
    path = tmp_path / f"{name}.yaml"
    path.write_text(yaml.safe_dump({**TINY, "store": store}))
    return path


def _zoorank(args: list[str], tmp_path: Path, name: str) -> subprocess.Popen:
    """`zoorank ARGS` in a process of its own with its own local Ray (a short temp dir)."""
    env = {**os.environ, "PYTHONPATH": str(REPO), "ZOORANK_PROGRESS": "0",
           "RAY_TMPDIR": f"/tmp/zr-{os.getpid()}-{name}"}
    env.pop("RAY_ADDRESS", None)
    log = open(tmp_path / f"{name}.log", "w")
    return subprocess.Popen([sys.executable, "-m", "zoorank", *args], env=env, stdout=log,
                            stderr=subprocess.STDOUT, start_new_session=True)


def _log(tmp_path: Path, name: str) -> str:
    return (tmp_path / f"{name}.log").read_text()[-4000:]


def _finish(proc: subprocess.Popen, tmp_path: Path, name: str, timeout: float = 600) -> int:
    try:
        return proc.wait(timeout=timeout)
    except subprocess.TimeoutExpired:
        os.killpg(proc.pid, signal.SIGKILL)
        raise AssertionError(f"{name} did not finish:\n{_log(tmp_path, name)}") from None


def _untimed(params: object) -> str:
    """A ``params`` JSON cell without its wall-clock timing (differs between equal runs)."""
    if not isinstance(params, str):
        return str(params)
    data = json.loads(params)
    if isinstance(data, dict):
        data.pop("seconds", None)
    return json.dumps(data, sort_keys=True)


def _state(store: Store) -> dict[str, pd.DataFrame]:
    """What a run leaves, without what differs between two equal runs (timings, shard names)."""
    manifest = store.read_manifest().drop(columns=["seconds", "shards"])
    metrics = store.read_metrics().drop(columns=["zoorank_version"])
    metrics["params"] = metrics["params"].map(_untimed)
    board = store.read_frame("leaderboard")
    return {
        "manifest": manifest.sort_values(["dataset", "view", "model_id"]).reset_index(drop=True),
        "metrics": metrics.sort_values(["model_id", "dataset", "metric"]).reset_index(drop=True),
        "oracle": store.read_frame("oracle").drop(columns=["zoorank_version"])
        .assign(params=lambda f: f["params"].map(_untimed))
        .sort_values(["model_id", "dataset", "metric"]).reset_index(drop=True),
        "leaderboard": board.sort_values("model_id").reset_index(drop=True),
    }


def _assert_same(got: dict[str, pd.DataFrame], want: dict[str, pd.DataFrame]) -> None:
    for name in want:
        a, b = got[name], want[name]
        assert list(a.columns) == list(b.columns), name
        assert len(a) == len(b), (name, len(a), len(b))
        for col in a.columns:
            if pd.api.types.is_float_dtype(b[col]):
                np.testing.assert_allclose(a[col].to_numpy(float), b[col].to_numpy(float),
                                           rtol=1e-5, atol=1e-6, equal_nan=True, err_msg=name)
            else:
                assert a[col].astype(str).tolist() == b[col].astype(str).tolist(), (name, col)


def _no_duplicates(store: Store) -> None:
    m, x = store.read_manifest(), store.read_metrics()
    assert not m.duplicated(["dataset", "view", "model_id"]).any()
    assert not x.duplicated(["model_id", "dataset", "metric"]).any()
    assert set(m["status"]) == {"done"}


def _run_here(cfg: Path) -> int:
    """`zoorank run CFG` in this (the test) process, on the session's Ray: for a run that needs no
    process of its own (one that is never stopped or killed, nor started together with another);
    what it leaves is what a `zoorank` process leaves, at a fraction of the start-up cost (imports,
    a local Ray, worker start-up)."""
    from zoorank.cli import main

    with pytest.MonkeyPatch.context() as mp:
        mp.setenv("ZOORANK_PROGRESS", "0")
        return main(["run", str(cfg)])


@pytest.fixture(scope="module")
def single_run(ray_session, tmp_path_factory) -> Path:
    """One `zoorank run` alone on a fresh local store (in this process: :func:`_run_here`); its
    store's path (never written again: tests that start from a finished run take a copy,
    :func:`_finished_store`)."""
    tmp = tmp_path_factory.mktemp("single")
    assert _run_here(_config(tmp, str(tmp / "store"), "single")) == 0
    return tmp / "store"


@pytest.fixture(scope="module")
def reference(single_run) -> dict[str, pd.DataFrame]:
    """What the single run left: what every concurrent scenario must equal."""
    store = Store(single_run)
    _no_duplicates(store)
    return _state(store)


def _finished_store(single_run: Path, tmp_path: Path) -> str:
    """A copy of the single run's store at ``tmp_path / "store"``: what a first `zoorank run` of
    the config there leaves (the store holds no absolute path), without paying for that run."""
    shutil.copytree(single_run, tmp_path / "store")
    return str(tmp_path / "store")


@pytest.mark.parametrize("where", ["local", "s3"])
def test_two_runs_started_together_end_like_one_run(where, reference, tmp_path, request):
    if where == "local":
        uri = str(tmp_path / "store")
    else:
        uri = request.getfixturevalue("s3_server")(f"conc-{tmp_path.name.lower()[:30]}/store")
    cfg = _config(tmp_path, uri, "run")
    a, b = (_zoorank(["run", str(cfg)], tmp_path, n) for n in ("a", "b"))
    codes = {_finish(a, tmp_path, "a"), _finish(b, tmp_path, "b")}
    assert codes in ({0}, {0, 2}), (_log(tmp_path, "a"), _log(tmp_path, "b"))
    store = Store(uri)
    _no_duplicates(store)
    _assert_same(_state(store), reference)
    # every done entry's rows are readable from exactly the shards its manifest row names
    for r in store.read_manifest().itertuples(index=False):
        emb = store.read_embeddings(r.dataset, r.view, r.model_id)
        assert len(emb.sample_id) == r.rows == 120


def test_a_writer_stopped_then_resumed_overwrites_nothing_the_other_committed(reference,
                                                                               ray_session,
                                                                               tmp_path):
    uri = str(tmp_path / "store")
    cfg = _config(tmp_path, uri, "run")
    store = Store(uri)
    slow = _zoorank(["run", str(cfg)], tmp_path, "slow")
    deadline = time.monotonic() + 300
    while store.read_manifest().empty:  # the slow writer has committed its pending rows
        assert slow.poll() is None, _log(tmp_path, "slow")
        assert time.monotonic() < deadline, _log(tmp_path, "slow")
        time.sleep(0.2)
    os.killpg(slow.pid, signal.SIGSTOP)
    try:
        # the other writer: a whole run while the slow one is stopped (this process, the
        # session's Ray: the slow writer is the process that must be stopped and resumed)
        assert _run_here(cfg) == 0
        committed = {
            "manifest": store.read_manifest().sort_values("model_id").reset_index(drop=True),
            "metrics": store.read_metrics().sort_values(["model_id", "metric"])
            .reset_index(drop=True),
            "leaderboard": store.table_version("leaderboard"),
        }
    finally:
        os.killpg(slow.pid, signal.SIGCONT)
    assert _finish(slow, tmp_path, "slow") in (0, 2), _log(tmp_path, "slow")
    # the resumed writer re-did its work but committed none of it over the finished rows
    pd.testing.assert_frame_equal(
        store.read_manifest().sort_values("model_id").reset_index(drop=True),
        committed["manifest"])
    pd.testing.assert_frame_equal(
        store.read_metrics().sort_values(["model_id", "metric"]).reset_index(drop=True),
        committed["metrics"])
    assert store.table_version("leaderboard") == committed["leaderboard"]
    _no_duplicates(store)
    _assert_same(_state(store), reference)


def test_report_while_a_run_writes_reads_one_snapshot(single_run, tmp_path):
    uri = _finished_store(single_run, tmp_path)
    cfg = _config(tmp_path, uri, "run")
    # a second run re-ranks with a different bootstrap (new leaderboard commits) while reports run
    data = yaml.safe_load(cfg.read_text())
    data["rank"]["bootstrap"] = 30
    cfg2 = tmp_path / "run2.yaml"
    cfg2.write_text(yaml.safe_dump(data))
    writer = _zoorank(["run", str(cfg2)], tmp_path, "writer")
    store = Store(uri)
    reads = 0
    while writer.poll() is None or reads == 0:
        board, meta = store.read_table_metadata("leaderboard", "zoorank")
        settings = json.loads(meta)
        # the rows and the settings of one commit: the settings describe exactly these rows
        assert sorted(board["model_id"]) == ["cnn-w4", "cnn-w8"]
        assert "metrics_fingerprint" in settings, settings
        reader = subprocess.run([sys.executable, "-m", "zoorank", "report", str(cfg)],
                                capture_output=True, text=True, timeout=300,
                                env={**os.environ, "PYTHONPATH": str(REPO)})
        # the report of the old config: either it reads a leaderboard built from it, or it
        # refuses with exit 2 (the store now holds the other config's leaderboard); never a crash
        assert reader.returncode in (0, 2), reader.stderr[-3000:]
        reads += 1
    assert writer.wait() == 0, _log(tmp_path, "writer")
    assert reads >= 1
    _no_duplicates(store)


def test_a_truncated_shard_is_re_embedded_by_the_next_run(single_run, reference, tmp_path):
    uri = _finished_store(single_run, tmp_path)
    cfg = _config(tmp_path, uri, "run")
    store = Store(uri)
    _assert_same(_state(store), reference)  # the copy is a finished run's store
    row = store.read_manifest().iloc[0]
    key = (row["dataset"], row["view"], row["model_id"])
    old = store.shard_names(*key)
    victim = Path(store.path(Store.embedding_dir(*key), old[0]))
    victim.write_bytes(victim.read_bytes()[: victim.stat().st_size // 2])  # a torn write
    assert _run_here(cfg) == 0  # the next run (this process: nothing stops or races it)
    new = store.shard_names(*key)
    assert new and not set(new) & set(old)  # new files; the torn one is only unreferenced
    assert victim.exists()
    _no_duplicates(store)
    _assert_same(_state(store), reference)
