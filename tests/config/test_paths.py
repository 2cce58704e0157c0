"""Relative paths in a config file are taken from the file's folder, whatever the working
directory; absolute paths, ``~`` and URIs are kept; ``--store`` stays relative to the cwd."""

from __future__ import annotations

import json
import os
import subprocess
import sys
from pathlib import Path

import numpy as np
import pytest
import yaml

from zoorank.config.loading import load_config, parse_config
from zoorank.config.paths import is_relative_path, rebase

REPO = Path(__file__).resolve().parents[2]


@pytest.mark.parametrize(("value", "expected"), [
    ("runs/*/last.ckpt", "/cfg/dir/runs/*/last.ckpt"),
    ("./data/x.parquet", "/cfg/dir/data/x.parquet"),
    ("../shared/data", "/cfg/shared/data"),
    ("/abs/x.pt", "/abs/x.pt"),
    ("~/x.pt", "~/x.pt"),
    ("s3://bucket/runs/*.pt", "s3://bucket/runs/*.pt"),
    ("gs://b/k?x=1", "gs://b/k?x=1"),
    ("file:///x", "file:///x"),
])
def test_rebase_joins_only_relative_local_paths(value, expected):
    assert rebase(value, "/cfg/dir") == expected
    assert is_relative_path(value) == (expected != value)


def _write_config(folder: Path, data: dict) -> Path:
    folder.mkdir(parents=True, exist_ok=True)
    path = folder / "run.yaml"
    path.write_text(yaml.safe_dump(data))
    return path


def test_every_path_field_is_taken_from_the_config_folder_not_the_cwd(tmp_path, monkeypatch):
    exp = tmp_path / "exp"
    (exp / "hf-model").mkdir(parents=True)
    path = _write_config(exp, {
        "store": "out/store",
        "datasets": [{"name": "a", "source": "parquet", "path": "data/a.parquet"},
                     {"name": "b", "source": "image_folder", "path": "/abs/images"},
                     {"name": "c", "source": "sklearn_digits"}],
        "models": [{"source": "timm", "name": "resnet18", "checkpoint": "runs/*/last.ckpt"},
                   {"id": "s3", "source": "timm", "name": "resnet18",
                    "checkpoint": "s3://bucket/x.safetensors"},
                   {"id": "ts", "source": "torchscript", "name": "nets/model.pt",
                    "trust_checkpoint": True},
                   {"id": "hf", "source": "transformers", "name": "hf-model"},
                   {"id": "hub", "source": "transformers", "name": "facebook/dinov2-small"},
                   {"from_tune": "../tune/exp1"}],
    })
    monkeypatch.chdir("/")
    config = load_config(path)
    assert config.store == str(exp / "out" / "store")
    assert [d.path for d in config.datasets] == [str(exp / "data" / "a.parquet"), "/abs/images",
                                                 None]
    timm_glob, s3, ts, hf, hub, tune = config.models
    assert timm_glob.checkpoint == str(exp / "runs" / "*" / "last.ckpt")
    assert s3.checkpoint == "s3://bucket/x.safetensors"
    assert ts.name == str(exp / "nets" / "model.pt")
    assert hf.name == str(exp / "hf-model")  # a folder beside the config
    assert hub.name == "facebook/dinov2-small"  # a hub id of the local cache: not a path
    assert tune.from_tune == str(tmp_path / "tune" / "exp1")


def test_a_relative_config_path_and_the_default_store(tmp_path, monkeypatch):
    _write_config(tmp_path / "exp", {
        "datasets": [{"name": "c", "source": "sklearn_digits"}],
        "models": [{"source": "timm", "name": "resnet18"}]})
    monkeypatch.chdir(tmp_path)
    assert load_config("exp/run.yaml").store == str(tmp_path / "exp" / "zoorank-store")


def test_store_on_the_command_line_stays_relative_to_the_working_directory(tmp_path, monkeypatch):
    path = _write_config(tmp_path / "exp", {
        "store": "./in-config", "datasets": [{"name": "c", "source": "sklearn_digits"}],
        "models": [{"source": "timm", "name": "resnet18"}]})
    monkeypatch.chdir(tmp_path)
    assert load_config(path, store="cli-store").store == "cli-store"  # as given: the cwd's


def test_a_mapping_without_a_file_keeps_its_paths(tmp_path):
    config = parse_config({"store": "rel/store",
                           "datasets": [{"name": "c", "source": "parquet", "path": "x.parquet"}],
                           "models": [{"source": "timm", "name": "resnet18"}]})
    assert config.store == "rel/store" and config.datasets[0].path == "x.parquet"


def test_the_tune_config_takes_its_store_and_data_from_its_folder(tmp_path, monkeypatch):
    from zoorank.tune.config import load_tune_config

    path = tmp_path / "t" / "tune.yaml"
    path.parent.mkdir()
    path.write_text(yaml.safe_dump({"store": "store", "dataset": {
        "name": "d", "source": "parquet", "path": "d.parquet", "label_column": "label"}}))
    monkeypatch.chdir("/")
    config = load_tune_config(path)
    assert config.store == str(tmp_path / "t" / "store")
    assert config.dataset.path == str(tmp_path / "t" / "d.parquet")
    assert load_tune_config(path, store="elsewhere").store == "elsewhere"


def _experiment(folder: Path) -> Path:
    """A folder with relative everything: ``ckpts/*.safetensors`` (two seeded small CNNs),
    ``data/digits.npz`` (150 real digits, labelled), ``run.yaml`` with ``store: ./store``."""
    import torch
    from safetensors.torch import save_file
    from sklearn.datasets import load_digits

    from zoorank.tune.models import small_cnn

    (folder / "ckpts").mkdir(parents=True)
    (folder / "data").mkdir()
    for seed in (0, 1):
        torch.manual_seed(seed)
        state = {k: v.contiguous() for k, v in small_cnn(width=8, depth=2).state_dict().items()}
        save_file(state, str(folder / "ckpts" / f"seed{seed}.safetensors"))
    digits = load_digits()
    images = np.repeat((digits.images[:150] * 255 / 16).astype(np.uint8)[..., None], 3, axis=-1)
    np.savez(folder / "data" / "digits.npz", images=images, labels=digits.target[:150])
    return _write_config(folder, {
        "store": "./store", "seed": 0,
        "datasets": [{"name": "digits", "source": "numpy", "path": "data/digits.npz"}],
        "models": [{"source": "python", "name": "zoorank.tune.models:small_cnn",
                    "model_kwargs": {"width": 8, "depth": 2}, "checkpoint": "ckpts/*.safetensors",
                    "input_size": 8}],
        "metrics": ["rankme", "twonn_id"],
        "score": {"resample_folds": 0},
    })


def test_the_zoo_of_a_config_in_another_folder_resolves_from_root(tmp_path, monkeypatch):
    """Through the catalog: the glob and the dataset path are found from ``/``."""
    from zoorank.catalog import build_catalog

    path = _experiment(tmp_path / "exp")
    monkeypatch.chdir("/")
    catalog = build_catalog(load_config(path))
    assert sorted(m.model_id for m in catalog.models) == ["seed0", "seed1"]
    assert len(catalog.indexes["digits"].sample_id) == 150
    assert not (Path("/") / "store").exists()


@pytest.mark.slow
@pytest.mark.timeout(600)
def test_a_config_in_another_folder_runs_from_root_with_json_and_debug_at_the_end(tmp_path):
    """``cd / && zoorank run /elsewhere/run.yaml --json --debug``: the checkpoints, the data and
    the store are the config folder's; stdout is one JSON document whose pick is a model of the
    run."""
    exp = tmp_path / "exp"
    path = _experiment(exp)
    env = dict(os.environ, RAY_ENABLE_WINDOWS_OR_OSX_CLUSTER="0", RAY_USAGE_STATS_ENABLED="0",
               RAY_DATA_DISABLE_PROGRESS_BARS="1", RAY_ADDRESS="", HF_HUB_OFFLINE="1",
               ZOORANK_PROGRESS="0")
    done = subprocess.run([sys.executable, "-m", "zoorank", "run", str(path), "--json",
                           "--debug"], cwd="/", env=env, capture_output=True, text=True,
                          timeout=560)
    assert done.returncode == 0, done.stderr[-3000:]
    result = json.loads(done.stdout)
    assert result["pick"]["model_id"] in {"seed0", "seed1"}
    board = (exp / "store" / "leaderboard.csv").read_text()
    assert "seed0" in board and "seed1" in board
    assert (exp / "store" / "report" / "index.html").is_file()
    assert not Path("/store").exists()
