"""Real training-checkpoint layouts (Lightning, solo-learn, DINO, MoCo) with their metadata.

Each file is written with ``torch.save`` of the structure those codebases save, metadata included
(``argparse.Namespace``, ``pathlib`` paths, an omegaconf ``DictConfig``, numpy scalars and arrays).
Each must load without ``trust_checkpoint`` and embed exactly like its backbone weights loaded
into timm directly; payload pickles are refused and never run.
"""

from __future__ import annotations

import argparse
import os
import pathlib
import pickle

import numpy as np
import pytest
import torch
from omegaconf import OmegaConf
from zoo_helpers import ARCH, backbone_state, features, reference_features, resolve

from zoorank.zoo import PREFIX_PRESETS, CheckpointError, load_model, read_checkpoint

X = torch.randn(4, 3, 32, 32, generator=torch.Generator().manual_seed(1))


def _with_prefix(state: dict, prefix: str) -> dict:
    return {prefix + k: v for k, v in state.items()}


def _noise(*shape: int) -> torch.Tensor:
    return torch.randn(*shape, generator=torch.Generator().manual_seed(7))


def lightning_checkpoint(state: dict) -> dict:
    """What ``Trainer.save_checkpoint`` writes for a LightningModule with ``self.model.backbone``."""
    return {
        "epoch": 9,
        "global_step": 1000,
        "pytorch-lightning_version": "2.4.0",
        "state_dict": {**_with_prefix(state, "model.backbone."),
                       "model.projector.0.weight": _noise(64, 32),
                       "model.projector.0.bias": _noise(64)},
        "loops": {"fit_loop": {"state_dict": {}, "epoch_progress": {"total": {"ready": 10}}}},
        "callbacks": {"ModelCheckpoint{'monitor': None}": {
            "best_model_path": "/runs/last.ckpt", "dirpath": pathlib.PosixPath("/runs")}},
        "optimizer_states": [{"state": {0: {"momentum_buffer": _noise(3)}},
                              "param_groups": [{"lr": 0.1, "params": [0]}]}],
        "lr_schedulers": [],
        "hparams_name": "kwargs",
        "hyper_parameters": {
            "args": argparse.Namespace(lr=0.3, data=pathlib.PosixPath("/data/cifar")),
            "cfg": OmegaConf.create({"optimizer": {"lr": 0.3, "name": "lars"}, "epochs": 100}),
            "temperature": np.float64(0.2),
            "mean": np.array([0.4914, 0.4822, 0.4465]),
        },
    }


def solo_learn_checkpoint(state: dict) -> dict:
    """solo-learn's Lightning checkpoint: backbone.*, projector.*, momentum_backbone.*, cfg."""
    return {
        "epoch": 399,
        "state_dict": {**_with_prefix(state, "backbone."),
                       **_with_prefix({k: v + 1 for k, v in state.items()}, "momentum_backbone."),
                       "projector.0.weight": _noise(128, 32)},
        "hyper_parameters": {"cfg": OmegaConf.create(
            {"method": "byol", "backbone": {"name": "resnet18"}, "data": {"dataset": "cifar10"}})},
    }


def dino_checkpoint(teacher: dict, student: dict) -> dict:
    """DINO's ``checkpoint.pth``: DDP student (module.*), teacher, loss centre and the args."""
    return {
        "student": {**_with_prefix(student, "module.backbone."),
                    "module.head.mlp.0.weight": _noise(16, 32)},
        "teacher": {**_with_prefix(teacher, "backbone."), "head.mlp.0.weight": _noise(16, 32)},
        "optimizer": {"state": {}, "param_groups": [{"lr": 5e-4, "params": [0, 1]}]},
        "epoch": 100,
        "args": argparse.Namespace(arch="resnet", output_dir=pathlib.PosixPath("/out"),
                                   momentum_teacher=0.996),
        "dino_loss": {"center": _noise(1, 16)},
    }


def moco_checkpoint(query: dict) -> dict:
    """MoCo v2's ``checkpoint_0199.pth.tar``: DDP state dict with both encoders and the queue."""
    return {
        "epoch": 200,
        "arch": "resnet50",
        "state_dict": {**_with_prefix(query, "module.encoder_q."),
                       "module.encoder_q.fc.0.weight": _noise(32, 32),
                       **_with_prefix({k: v * 0 for k, v in query.items()}, "module.encoder_k."),
                       "module.queue": _noise(128, 64), "module.queue_ptr": torch.zeros(1)},
        "optimizer": {"state": {}, "param_groups": [{"lr": 0.03, "params": [0]}]},
    }


LAYOUTS = {
    # name: (checkpoint builder over the backbone state, preset, the explicit prefix)
    "lightning": (lightning_checkpoint, "lightning", "model.backbone."),
    "solo-learn": (solo_learn_checkpoint, "solo-learn", "backbone."),
    "dino-teacher": (lambda s: dino_checkpoint(s, {k: -v for k, v in s.items()}),
                     "dino-teacher", "teacher.backbone."),
    "dino-student": (lambda s: dino_checkpoint({k: -v for k, v in s.items()}, s),
                     "dino-student", "student.module.backbone."),
    "moco": (moco_checkpoint, "moco", "module.encoder_q."),
}


@pytest.mark.parametrize("layout", sorted(LAYOUTS))
def test_training_checkpoint_loads_and_embeds_like_its_backbone(tmp_path, layout):
    builder, preset, prefix = LAYOUTS[layout]
    state = backbone_state(seed=3)
    path = tmp_path / f"{layout}.ckpt"
    torch.save(builder(state), path)
    if layout != "moco":  # MoCo saves plain values only; the others' metadata blocks weights_only
        with pytest.raises(pickle.UnpicklingError):
            torch.load(path, weights_only=True)

    expected = reference_features(state, X)
    for value in (preset, prefix):
        (model,) = resolve({"id": "m", "source": "timm", "name": ARCH,
                            "checkpoint": str(path), "state_dict_prefix": value})
        assert torch.equal(features(model, X), expected), value
    assert prefix in PREFIX_PRESETS[preset]


def test_prefix_selection_still_checks_the_rest_strictly(tmp_path):
    state = backbone_state(seed=3)
    del state["conv1.0.weight"]
    path = tmp_path / "l.ckpt"
    torch.save(lightning_checkpoint(state), path)
    (model,) = resolve({"id": "m", "source": "timm", "name": ARCH, "checkpoint": str(path),
                        "state_dict_prefix": "lightning"})
    with pytest.raises(CheckpointError, match=r"missing keys \(1\): conv1\.0\.weight"):
        load_model(model)


def test_unknown_prefix_names_the_keys_found(tmp_path):
    path = tmp_path / "s.ckpt"
    torch.save(solo_learn_checkpoint(backbone_state(seed=0)), path)
    with pytest.raises(CheckpointError, match=r"no key starts with state_dict_prefix 'encoder\.'"
                                              r".*state_dict\.backbone\."):
        read_checkpoint(path, state_dict_prefix="encoder.")


def test_state_dict_prefix_strips_exactly_that_prefix(tmp_path):
    state = {"model.backbone.a": torch.ones(2), "model.backbone.b.c": torch.zeros(1),
             "model.head.w": torch.ones(3)}
    path = tmp_path / "p.pt"
    torch.save({"state_dict": state, "args": argparse.Namespace(x=1)}, path)
    got = read_checkpoint(path, state_dict_prefix="model.backbone.")
    assert sorted(got) == ["a", "b.c"] and torch.equal(got["a"], torch.ones(2))


class Payload:
    """Unpickling this runs ``os.system`` (writes a marker file) — unless the loader refuses it."""

    def __init__(self, marker: str) -> None:
        self.marker = marker

    def __reduce__(self):
        return (os.system, (f"touch {self.marker}",))


class EvalPayload:
    def __init__(self, marker: str) -> None:
        self.marker = marker

    def __reduce__(self):
        return (eval, (f"open({self.marker!r}, 'w').write('ran')",))


@pytest.mark.parametrize("payload", [Payload, EvalPayload])
def test_payload_beside_metadata_is_refused_and_never_runs(tmp_path, payload):
    marker = tmp_path / "pwned"
    path = tmp_path / "evil.ckpt"
    ckpt = lightning_checkpoint(backbone_state(seed=0))
    ckpt["hyper_parameters"]["callback"] = payload(str(marker))
    torch.save(ckpt, path)
    (model,) = resolve({"id": "evil", "source": "timm", "name": ARCH, "checkpoint": str(path),
                        "state_dict_prefix": "lightning"})
    with pytest.raises(CheckpointError, match=r"unsafe pickle refused \(it needs the global "
                                              r"(posix\.system|builtins\.eval)\)"):
        load_model(model)
    assert not marker.exists()


def test_metadata_comes_back_as_inert_placeholders(tmp_path):
    from zoorank.zoo.checkpoints import load_checkpoint_object
    from zoorank.zoo.safe_pickle.allowlist import Placeholder

    path = tmp_path / "l.ckpt"
    torch.save(lightning_checkpoint(backbone_state(seed=0)), path)
    met: set[str] = set()
    obj = load_checkpoint_object(str(path), met=met)
    hp = obj["hyper_parameters"]
    assert isinstance(hp["args"], Placeholder) and isinstance(hp["cfg"], Placeholder)
    assert {"argparse.Namespace", "pathlib.PosixPath", "omegaconf.dictconfig.DictConfig"} <= met
    assert obj["epoch"] == 9 and torch.equal(obj["optimizer_states"][0]["state"][0][
        "momentum_buffer"], _noise(3))


class MetadataModulePayload:
    """A payload dressed in a metadata module's name: ``pathlib.Path.write_text(marker, ...)``."""

    def __init__(self, marker: str) -> None:
        self.marker = marker

    def __reduce__(self):
        return (pathlib.Path.write_text, (pathlib.Path(self.marker), "ran"))


def test_a_call_into_a_metadata_module_stays_inert(tmp_path):
    from zoorank.zoo.checkpoints import load_checkpoint_object

    marker = tmp_path / "written"
    path = tmp_path / "sneaky.ckpt"
    state = backbone_state(seed=0)
    torch.save({"state_dict": state, "meta": MetadataModulePayload(str(marker))}, path,
               pickle_protocol=4)
    obj = load_checkpoint_object(str(path))
    assert not marker.exists()  # the placeholder recorded the call; nothing ran
    assert "pathlib.Path.write_text" in repr(obj["meta"])
    assert torch.equal(obj["state_dict"]["conv1.0.weight"], state["conv1.0.weight"])
