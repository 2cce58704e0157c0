"""Every checkpoint loaded on CPU before EMBED (``zoorank zoo``, ``zoorank run``): real timm
resnet10t checkpoints saved the way a Lightning module around ``self.backbone`` saves them."""

from __future__ import annotations

import subprocess
import sys
from pathlib import Path

import pyarrow.parquet as pq
import pytest
import timm
import torch
import yaml

from zoorank.cli import main
from zoorank.config.loading import parse_config
from zoorank.errors import ConfigError
from zoorank.store import Store
from zoorank.zoo.preflight import CACHE_FILE, preflight
from zoorank.zoo.resolve import resolve_models

ARCH = "resnet10t"


def _lightning_file(path: Path, seed: int) -> dict[str, torch.Tensor]:
    """A Lightning-style checkpoint (backbone + projector + optimiser state) of a seeded
    resnet10t; returns the backbone's own state dict."""
    torch.manual_seed(seed)
    backbone = timm.create_model(ARCH, pretrained=False, num_classes=0)
    own = {k: v.clone() for k, v in backbone.state_dict().items()}
    state = {f"backbone.{k}": v for k, v in own.items()}
    state["projector.weight"] = torch.randn(16, backbone.num_features)
    path.parent.mkdir(parents=True, exist_ok=True)
    torch.save({"epoch": 0, "global_step": 2, "state_dict": state,
                "optimizer_states": [{"state": {}, "param_groups": [{"lr": 0.1}]}]}, path)
    return own


def _sweep(tmp_path: Path, seeds=(0, 1)) -> list[Path]:
    files = []
    for seed in seeds:
        f = tmp_path / "runs" / f"lr0.{seed + 1}" / "checkpoints" / "epoch=0-step=2.ckpt"
        _lightning_file(f, seed)
        files.append(f)
    return files


def _config(tmp_path: Path, **model) -> Path:
    entry = {"source": "timm", "name": ARCH, "input_size": 32,
             "checkpoint": str(tmp_path / "runs" / "*" / "checkpoints" / "*.ckpt"),
             "state_dict_prefix": "lightning", **model}
    entry = {k: v for k, v in entry.items() if v is not None}
    config = {"store": str(tmp_path / "store"),
              "datasets": [{"name": "digits", "source": "sklearn_digits", "limit": 64}],
              "models": [entry], "views": [{"name": "clean"}], "metrics": ["rankme"]}
    path = tmp_path / "sweep.yaml"
    path.write_text(yaml.safe_dump(config))
    return path


def _zoorank(*args: str) -> subprocess.CompletedProcess:
    return subprocess.run([sys.executable, "-m", "zoorank", *args], capture_output=True,
                          text=True, timeout=600)


def _models(path: Path):
    config = parse_config(yaml.safe_load(path.read_text()), str(path))
    return resolve_models(config)


@pytest.mark.parametrize(("model", "fix"), [
    ({"name": "resnet18"}, "`name: resnet10t`"),
    ({"state_dict_prefix": None}, "`state_dict_prefix: lightning`"),
    ({"state_dict_prefix": "model."}, "`state_dict_prefix: lightning`"),
])
def test_a_misfit_entry_is_a_config_error_naming_the_fix(tmp_path, capsys, model, fix):
    _sweep(tmp_path)
    path = _config(tmp_path, **model)
    with pytest.raises(ConfigError) as caught:
        preflight(_models(path))
    message = str(caught.value)
    assert fix in message, message
    for command in ("zoo", "run"):  # in this process: the exit comes before any Ray
        assert main([command, str(path)]) == 2, command
        err = capsys.readouterr().err
        assert fix in err, err
    # before EMBED: nothing was embedded, no manifest written
    assert not (tmp_path / "store" / "manifest").exists()


def test_missing_prefix_shows_the_unexpected_keys_first(tmp_path):
    _sweep(tmp_path)
    path = _config(tmp_path, state_dict_prefix=None)
    with pytest.raises(ConfigError) as caught:
        preflight(_models(path))
    message = str(caught.value)
    unexpected = message.index("unexpected keys")
    assert "backbone.conv1.0.weight" in message[unexpected:]
    assert unexpected < message.index("missing keys")


def test_a_fitting_sweep_passes_and_is_cached(tmp_path):
    _sweep(tmp_path)
    path = _config(tmp_path)
    store = Store(str(tmp_path / "store"))
    first = preflight(_models(path), store=store)
    assert (first.checked, first.known, first.failed) == (2, 0, {})
    assert store.exists(CACHE_FILE)
    again = preflight(_models(path), store=store)
    assert (again.checked, again.known) == (0, 2)
    # a new file (another digest) is checked; the two known ones are not
    _lightning_file(tmp_path / "runs" / "lr0.9" / "checkpoints" / "epoch=0-step=2.ckpt", 9)
    third = preflight(_models(path), store=store)
    assert (third.checked, third.known) == (1, 2)


def test_identical_checkpoints_are_reported_once(tmp_path, capsys):
    files = _sweep(tmp_path)
    last = files[0].parent / "last.ckpt"
    last.write_bytes(files[0].read_bytes())
    path = _config(tmp_path)
    models = _models(path)
    ids = [m.model_id for m in models]
    assert len(ids) == 2 and "lr0.1-checkpoints-last" not in ids
    (kept,) = [m for m in models if m.duplicates]
    assert kept.model_id == "lr0.1-checkpoints-epoch_0-step_2"
    assert kept.duplicates == ("lr0.1-checkpoints-last",)
    assert main(["zoo", str(path)]) == 0
    out = capsys.readouterr().out
    assert ("duplicates: lr0.1-checkpoints-last hold the same weights as "
            "lr0.1-checkpoints-epoch_0-step_2") in out
    assert "2 model(s)" in out


@pytest.mark.timeout(600)
def test_a_truncated_file_is_a_recorded_failure_while_the_others_rank(tmp_path):
    files = _sweep(tmp_path, seeds=(0, 1, 2))
    broken = files[2]
    broken.write_bytes(broken.read_bytes()[: broken.stat().st_size // 2])
    path = _config(tmp_path)
    checked = preflight(_models(path))
    assert list(checked.failed) == ["lr0.3-checkpoints-epoch_0-step_2"]
    assert "corrupt or unreadable" in checked.failed["lr0.3-checkpoints-epoch_0-step_2"]
    out = _zoorank("run", str(path))
    assert out.returncode == 0, out.stdout + out.stderr
    assert "lr0.3-checkpoints-epoch_0-step_2 cannot be read" in out.stdout
    store = tmp_path / "store"
    failed = pq.read_table(store / "failed").to_pandas()
    assert set(failed["model_id"]) == {"lr0.3-checkpoints-epoch_0-step_2"}
    board = pq.read_table(store / "leaderboard").to_pandas()
    ranked = set(board["model_id"]) if "model_id" in board else set(board.index)
    assert {"lr0.1-checkpoints-epoch_0-step_2", "lr0.2-checkpoints-epoch_0-step_2"} <= ranked
