"""``zoorank run --watch``: ranking a sweep while its checkpoints arrive (zoorank.watch)."""

from __future__ import annotations

import os
import re
import subprocess
import sys
import time
from pathlib import Path

import numpy as np
import pandas as pd
import pytest

from zoorank.config.loading import parse_config
from zoorank.errors import InputError
from zoorank.watch import _manifest_state, parse_until, read_leaderboard, settled_config
from zoorank.zoo import resolve_models


def _checkpoint(path: Path, seed: int) -> None:
    import torch
    from safetensors.torch import save_file

    from zoorank.tune.models import small_cnn

    torch.manual_seed(seed)
    net = small_cnn(width=8, depth=2)
    if seed % 3 == 2:  # a collapsed one: every feature is the same constant
        for p in net.parameters():
            p.data.zero_()
    save_file({k: v.contiguous() for k, v in net.state_dict().items()}, str(path))


def _config(store: str, checkpoints: str) -> dict:
    return {
        "store": store,
        "seed": 0,
        "datasets": [{"name": "digits", "source": "sklearn_digits", "limit": 200}],
        "models": [{"source": "python", "name": "zoorank.tune.models:small_cnn",
                    "model_kwargs": {"width": 8, "depth": 2}, "checkpoint": checkpoints,
                    "input_size": 8, "interpolation": "bilinear", "crop_pct": 1.0,
                    "family": "cnn"}],
        # a per-model metric and a pool one (recomputed over every model each round)
        "metrics": ["rankme", "clid"],
        "embed": {"batch_size": 256},
    }


def test_until_reads_counts_durations_clock_times_and_iso():
    now = 1_000_000.0
    assert parse_until("12", now) == (None, 12)
    assert parse_until("90s", now) == (now + 90, None)
    assert parse_until("2h", now) == (now + 7200, None)
    deadline, _ = parse_until("00:00", now)
    assert now < deadline <= now + 86400
    assert parse_until("2030-01-01T00:00:00+00:00", now)[0] == 1893456000.0
    with pytest.raises(InputError, match="--until"):
        parse_until("soon", now)


def test_settled_files_keep_the_ids_and_fingerprints_of_the_glob(tmp_path):
    for i, run in enumerate(["a", "b", "c"]):
        (tmp_path / "runs" / run).mkdir(parents=True)
        _checkpoint(tmp_path / "runs" / run / "last.safetensors", i)
    config = parse_config(_config(str(tmp_path / "store"), str(tmp_path / "runs/*/last.safetensors")))
    now = time.time() + 100  # every file is old enough
    settled, waiting = settled_config(config, {}, settle=10, now=now)
    expected = {m.model_id: m.fingerprint for m in resolve_models(config)}
    assert {m.model_id: m.fingerprint for m in resolve_models(settled)} == expected
    assert waiting == [] and sorted(expected) == ["a-last", "b-last", "c-last"]


def test_a_young_or_growing_checkpoint_is_not_read(tmp_path):
    runs = tmp_path / "runs"
    runs.mkdir()
    old = time.time() - 100
    for i, name in enumerate(["old", "growing"]):
        _checkpoint(runs / f"{name}.safetensors", i)
        os.utime(runs / f"{name}.safetensors", (old, old))
    config = parse_config(_config(str(tmp_path / "store"), str(runs / "*.safetensors")))
    seen: dict = {}
    settled, waiting = settled_config(config, seen, settle=5)
    assert sorted(m.id for m in settled.models) == ["growing", "old"] and waiting == []
    with open(runs / "growing.safetensors", "ab") as f:  # still being written ...
        f.write(b"\0" * 10)
    os.utime(runs / "growing.safetensors", (old, old))  # ... even with an old mtime
    settled, waiting = settled_config(config, seen, settle=5)
    assert [m.id for m in settled.models] == ["old"] and len(waiting) == 1
    settled, waiting = settled_config(config, seen, settle=5)
    assert len(settled.models) == 2  # unchanged since the last poll: settled
    _checkpoint(runs / "new.safetensors", 2)
    settled, waiting = settled_config(config, seen, settle=5)
    assert "new" not in [m.id for m in settled.models]  # younger than the settle time
    settled, waiting = settled_config(config, seen, settle=5, now=time.time() + 6)
    assert "new" in [m.id for m in settled.models]


def _zoorank(*args: str, env: dict, timeout: float = 600) -> subprocess.Popen:
    return subprocess.Popen([sys.executable, "-m", "zoorank", *args], stdout=subprocess.PIPE,
                            stderr=subprocess.STDOUT, text=True, env=env)


@pytest.mark.slow
@pytest.mark.timeout(900)
def test_watch_ranks_each_uploaded_checkpoint_once_and_ends_where_one_run_ends(
        tmp_path, s3_server, s3_env):
    import yaml

    n = 4
    s3_server.bucket("watch-ckpts")
    glob = "s3://watch-ckpts/sweep/*.safetensors"  # credentials and endpoint: the environment
    (tmp_path / "watch.yaml").write_text(yaml.safe_dump(_config(str(tmp_path / "store"), glob)))
    (tmp_path / "fresh.yaml").write_text(yaml.safe_dump(_config(str(tmp_path / "fresh"), glob)))
    # its own local Ray: workers must see the S3 environment set by the fixture
    env = {**os.environ, "ZOORANK_PROGRESS": "0", "RAY_ADDRESS": ""}
    watcher = _zoorank("run", str(tmp_path / "watch.yaml"), "--watch", "--interval", "0.5",
                       "--settle", "0", "--until", str(n), env=env)
    seen = []  # the watcher's lines read before the rest of the uploads

    def upload(i: int) -> None:
        _checkpoint(tmp_path / f"run{i}.safetensors", i)
        s3_server.client.upload_file(str(tmp_path / f"run{i}.safetensors"), "watch-ckpts",
                                     f"sweep/run{i}.safetensors")

    try:
        # this process uploads the sweep's checkpoints: the first, then (once the watcher has
        # ranked it) the others, so they arrive while it watches, not all at once
        upload(0)
        for line in watcher.stdout:  # ends early (EOF) if the watcher exits
            seen.append(line)
            if line.startswith("watch: round"):
                break
        for i in range(1, n):  # the rest together: one or more rounds more, each new model once
            upload(i)
        output, _ = watcher.communicate(timeout=600)
        output = "".join(seen) + output
    finally:
        if watcher.poll() is None:
            watcher.kill()
    assert watcher.returncode == 0, output
    rounds = [line for line in output.splitlines() if line.startswith("watch: round")]
    new = [m for line in rounds for m in re.findall(r"new \((.*?)\)", line)[0].split(", ")
           if "no new model" not in line]
    embedded = sum(int(re.search(r"(\d+) embedded", line).group(1)) for line in rounds)
    assert sorted(new) == [f"run{i}" for i in range(n)] and embedded == n, output  # once each
    assert len(rounds) >= 2, output  # the uploads were seen arriving, not all at once
    assert "stopped (until)" in output
    # the leaderboard the watch ends with is the one a single run over every checkpoint gives
    single = _zoorank("run", str(tmp_path / "fresh.yaml"), env=env)
    out, _ = single.communicate(timeout=600)
    assert single.returncode == 0, out
    watched = read_leaderboard(parse_config(_config(str(tmp_path / "store"), glob)))
    fresh = read_leaderboard(parse_config(_config(str(tmp_path / "fresh"), glob)))
    assert watched["model_id"].tolist() == fresh["model_id"].tolist()
    numeric = [c for c in fresh.columns if pd.api.types.is_float_dtype(fresh[c])]
    np.testing.assert_allclose(watched[numeric].to_numpy(float), fresh[numeric].to_numpy(float),
                               rtol=1e-5, equal_nan=True)


def _read_until(proc: subprocess.Popen, prefix: str, seen: list[str]) -> None:
    """Read ``proc``'s lines into ``seen`` until one starts with ``prefix`` (or EOF)."""
    for line in proc.stdout:
        seen.append(line)
        if line.startswith(prefix):
            return


def _stop(proc: subprocess.Popen, seen: list[str]) -> str:
    """SIGTERM ``proc``; its whole output once it has exited."""
    import signal

    proc.send_signal(signal.SIGTERM)
    rest, _ = proc.communicate(timeout=300)
    return "".join(seen) + rest


@pytest.mark.slow
@pytest.mark.timeout(900)
def test_sigterm_ends_watch_and_run_with_143_and_the_next_run_resumes(tmp_path):
    """Each process starts its own local Ray, whose ``ray.init`` replaces the SIGTERM handler."""
    import yaml

    ckpts = tmp_path / "ckpts"
    ckpts.mkdir()
    for i in range(2):
        _checkpoint(ckpts / f"run{i}.safetensors", i)
    raw = _config(str(tmp_path / "store"), str(ckpts / "*.safetensors"))
    (tmp_path / "run.yaml").write_text(yaml.safe_dump(raw))
    env = {**os.environ, "ZOORANK_PROGRESS": "0", "RAY_ADDRESS": ""}
    procs = []
    try:
        # the watch: SIGTERM after its first round ends it, with its closing line
        watcher = _zoorank("run", str(tmp_path / "run.yaml"), "--watch", "--interval", "0.5",
                           "--settle", "0", env=env)
        procs.append(watcher)
        seen: list[str] = []
        _read_until(watcher, "watch: round", seen)
        output = _stop(watcher, seen)
        assert watcher.returncode == 143, output
        assert "watch: stopped (signal) after 1 round(s); 2 model(s) ranked" in output, output
        watched = _manifest_state(parse_config(raw))
        assert {k[2] for k in watched} == {"run0", "run1"}

        # a run over two more checkpoints, SIGTERM once its first new embedding is committed
        for i in (2, 3):
            _checkpoint(ckpts / f"run{i}.safetensors", i)
        log = tmp_path / "store" / "manifest" / "_delta_log"
        commits = len(list(log.glob("*.json")))
        run = _zoorank("run", str(tmp_path / "run.yaml"), env=env)
        procs.append(run)
        deadline = time.monotonic() + 600
        while len(list(log.glob("*.json"))) == commits and time.monotonic() < deadline:
            assert run.poll() is None, run.stdout.read()
            time.sleep(0.05)
        output = _stop(run, [])
        assert run.returncode == 143, output
        assert "zoorank: terminated (SIGTERM)" in output, output

        # the next run resumes: what the watch embedded is not embedded again
        rerun = _zoorank("run", str(tmp_path / "run.yaml"), env=env)
        procs.append(rerun)
        output, _ = rerun.communicate(timeout=600)
        assert rerun.returncode == 0, output
        after = _manifest_state(parse_config(raw))
        assert {k: after[k] for k in watched} == watched
        board = read_leaderboard(parse_config(raw))
        assert sorted(board["model_id"]) == [f"run{i}" for i in range(4)]
    finally:
        for p in procs:
            if p.poll() is None:
                p.kill()
