"""``zoorank zoo CONFIG`` and ``zoorank inspect CHECKPOINT``, run as a user would (subprocess)."""

from __future__ import annotations

import subprocess
import sys

import pytest
import timm
import torch
import yaml
from test_checkpoint_layouts import Payload, dino_checkpoint, lightning_checkpoint
from zoo_helpers import ARCH, backbone_state, resolve

from zoorank.errors import ConfigError
from zoorank.zoo import describe_preprocessing


def _zoorank(*args: str, cwd=None) -> subprocess.CompletedProcess:
    return subprocess.run([sys.executable, "-m", "zoorank", *args], capture_output=True,
                          text=True, timeout=300, cwd=cwd)


def test_zoo_prints_ids_weights_fingerprints_preprocessing_and_parameters(tmp_path):
    ckpt = tmp_path / "last.ckpt"
    torch.save(lightning_checkpoint(backbone_state(seed=0)), ckpt)
    config = {
        "store": str(tmp_path / "store"),
        "datasets": [{"name": "digits", "source": "sklearn_digits"},
                     {"name": "more", "source": "sklearn_digits"}],
        "models": [
            {"source": "timm", "name": ARCH, "input_size": 32, "datasets": ["digits"]},
            {"id": "l", "source": "timm", "name": ARCH, "checkpoint": str(ckpt),
             "state_dict_prefix": "lightning"},
        ],
    }
    path = tmp_path / "zoo.yaml"
    path.write_text(yaml.safe_dump(config))
    out = _zoorank("zoo", str(path))
    assert out.returncode == 0, out.stderr
    first, second = resolve(*config["models"], datasets=("digits", "more"))
    params = sum(p.numel() for p in timm.create_model(ARCH, num_classes=0).parameters())
    text = out.stdout
    assert "2 model(s)" in text
    for model in (first, second):
        assert f"\n{model.model_id}\n" in text and model.fingerprint in text
        assert describe_preprocessing(model) in text
    assert text.count(f"parameters: {params:,}") == 2
    assert "datasets digits" in text and f"weights: {ckpt}" in text
    # a CIFAR-size override: no zoom, and the line says so and why
    assert "crop 32 (crop_pct 1)" in describe_preprocessing(first)
    assert "[timm + config (input_size, crop_pct 1.0" in describe_preprocessing(first)
    assert "resize 168 bilinear, crop 160 (crop_pct 0.95)" in describe_preprocessing(second)
    assert not (tmp_path / "store" / "manifest").exists()  # nothing ran


def test_inspect_shows_tensors_entry_prefixes_and_blocking_metadata(tmp_path):
    state = backbone_state(seed=0)
    path = tmp_path / "last.ckpt"
    torch.save(lightning_checkpoint(state), path)
    out = _zoorank("inspect", str(path), "--prefix", "lightning")
    assert out.returncode == 0, out.stderr
    text = out.stdout
    assert "loader: restricted" in text
    assert "argparse.Namespace" in text and "omegaconf.dictconfig.DictConfig" in text
    assert "state dict: 'state_dict'" in text
    assert f"model.backbone.  {len(state)}" in text and "model.projector.  2" in text
    assert "lightning → 'model.backbone.'" in text
    assert f"state_dict_prefix selects {len(state)} tensors under 'model.backbone.'" in text
    assert "model.backbone.conv1.0.weight  [16, 3, 3, 3]  float32" in text


def test_inspect_finds_nested_dino_prefixes(tmp_path):
    state = backbone_state(seed=0)
    path = tmp_path / "checkpoint.pth"
    torch.save(dino_checkpoint(state, state), path)
    out = _zoorank("inspect", str(path))
    assert out.returncode == 0, out.stderr
    assert "teacher.backbone.  " + str(len(state)) in out.stdout
    assert "dino-teacher → 'teacher.backbone.'" in out.stdout
    assert "dino-student → 'student.module.backbone.'" in out.stdout


def test_inspect_refuses_a_payload_without_running_it(tmp_path):
    marker = tmp_path / "pwned"
    path = tmp_path / "evil.pt"
    torch.save({"state_dict": backbone_state(seed=0), "x": Payload(str(marker))}, path)
    out = _zoorank("inspect", str(path))
    assert out.returncode == 0, out.stderr
    assert "refused" in out.stdout and "posix.system" in out.stdout
    assert not marker.exists()


def test_model_datasets_must_be_the_configs():
    with pytest.raises(ConfigError, match=r"models\[0\] \(m\): datasets: unknown dataset\(s\) "
                                          r"\['cifar'\].*\['digits'\]"):
        resolve({"id": "m", "source": "timm", "name": ARCH, "datasets": ["cifar"]},
                datasets=("digits",))
    (model,) = resolve({"id": "m", "source": "timm", "name": ARCH, "datasets": ["digits"]},
                       datasets=("digits", "other"))
    assert model.datasets == ("digits",) and model.wants("digits") and not model.wants("other")
    (every,) = resolve({"id": "m", "source": "timm", "name": ARCH}, datasets=("digits", "other"))
    assert every.datasets is None and every.wants("other")
    # the datasets a model is ranked on do not change its embeddings
    assert every.fingerprint == model.fingerprint
