"""`zoorank metrics EMBEDDINGS`: values equal the metric functions; bad input exits 2."""

from __future__ import annotations

import json
import subprocess
import sys

import numpy as np
import pytest

from zoorank.metrics import knn_accuracy, lidar, rankme, twonn_id
from zoorank.store import Store


def _run(*args: str) -> subprocess.CompletedProcess:
    return subprocess.run([sys.executable, "-m", "zoorank", "metrics", *args],
                          capture_output=True, text=True, timeout=300)


@pytest.fixture(scope="module")
def projected_digits(tmp_path_factory):
    from sklearn.datasets import load_digits

    d = load_digits()
    P = np.random.default_rng(0).normal(size=(64, 48))
    Z = np.tanh(d.data @ P / 8).astype(np.float32)[:600]
    path = tmp_path_factory.mktemp("inspect") / "digits.npz"
    np.savez(path, embeddings=Z, labels=d.target[:600])
    return path, Z, d.target[:600]


def test_json_values_equal_the_metric_functions(projected_digits):
    path, Z, y = projected_digits
    proc = _run(str(path), "--labels", "labels", "--json")
    assert proc.returncode == 0, proc.stderr
    out = json.loads(proc.stdout)
    assert out["n"] == 600 and out["dim"] == 48
    assert out["metrics"]["rankme"]["value"] == pytest.approx(rankme(Z), rel=1e-9)
    assert out["metrics"]["twonn_id"]["value"] == pytest.approx(twonn_id(Z, normalize=True), rel=1e-9)
    assert "lidar" not in out["metrics"]  # no views given
    assert 0.5 < out["oracle"]["knn_accuracy"] <= 1.0
    assert out["oracle"]["knn_accuracy"] != knn_accuracy(Z, y, Z, y)  # a held-out split, not train=test


def test_store_shards_are_grouped_by_sample_and_view(tmp_path):
    rng = np.random.default_rng(3)
    E = rng.normal(size=(40, 5, 6)).astype(np.float32) + rng.normal(size=(40, 1, 6)) * 3
    store = Store(tmp_path / "store")
    ids = np.repeat(np.arange(40), 5)
    views = np.tile(np.arange(5), 40)
    order = rng.permutation(200)  # shards need not be sorted
    store.write_shard("d", "simclr", "m", 0, ids[order], views[order], E.reshape(200, 6)[order])
    proc = _run(str(tmp_path / "store/embeddings/d/simclr/m"), "--json")
    assert proc.returncode == 0, proc.stderr
    out = json.loads(proc.stdout)
    assert out["views"] == 5 and out["n"] == 40
    assert out["metrics"]["lidar"]["value"] == pytest.approx(lidar(E), rel=1e-9)
    assert out["metrics"]["rankme"]["value"] == pytest.approx(rankme(E[:, 0]), rel=1e-9)


@pytest.mark.parametrize(
    ("content", "args", "message"),
    [
        (None, [], "file not found"),
        (b"not an array", [], "cannot read embeddings"),
        (np.zeros((10, 3, 2)), [], "must be a 2-D matrix"),
        (np.zeros((10, 3)), ["--views", "4"], "not a multiple of --views 4"),
        (np.full((10, 3), np.nan), [], "NaN/Inf"),
    ],
)
def test_bad_files_and_shapes_exit_2(tmp_path, content, args, message):
    path = tmp_path / "emb.npy"
    if isinstance(content, bytes):
        path.write_bytes(content)
    elif content is not None:
        np.save(path, content)
    proc = _run(str(path), *args)
    assert proc.returncode == 2
    assert message in proc.stderr and "Traceback" not in proc.stderr
