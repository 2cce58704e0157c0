"""``zoorank init`` on a Lightning sweep (``runs/<lr>-s<seed>/checkpoints/*.ckpt``, a timm
resnet10t under ``backbone.``): globs that keep every epoch but not the ``last.ckpt`` copies,
seed ensembles and the family from the run folders, an ``--arch`` that does not fit refused."""

from __future__ import annotations

import glob
import shutil
from pathlib import Path

import pytest
import timm
import torch
import yaml

from zoorank.cli import main
from zoorank.config.loading import load_config
from zoorank.init.runs import name_glob
from zoorank.zoo.resolve import resolve_models

ARCH = "resnet10t"


def _lightning_file(path: Path, seed: int) -> None:
    torch.manual_seed(seed)
    state = timm.create_model(ARCH, pretrained=False, num_classes=0).state_dict()
    path.parent.mkdir(parents=True, exist_ok=True)
    torch.save({"epoch": 0, "global_step": 2, "pytorch-lightning_version": "2.4.0",
                "state_dict": {**{f"backbone.{k}": v for k, v in state.items()},
                               "projector.weight": torch.randn(8, 512)}}, path)


@pytest.fixture(scope="module")
def sweep(tmp_path_factory) -> Path:
    """Four runs (two learning rates × two seeds), each an epoch file and its last.ckpt copy."""
    root = tmp_path_factory.mktemp("sweep")
    for i, run in enumerate(("lr0.1-s0", "lr0.1-s1", "lr0.3-s0", "lr0.3-s1")):
        epoch = root / "runs" / run / "checkpoints" / "epoch=0-step=2.ckpt"
        _lightning_file(epoch, i)
        shutil.copyfile(epoch, epoch.parent / "last.ckpt")
    return root


@pytest.mark.timeout(300)
def test_the_sweep_gives_one_entry_per_seed_ensemble_without_the_last_copies(sweep, capsys):
    out = sweep / "sweep.yaml"
    assert main(["init", str(sweep / "runs"), "-o", str(out), "--arch", ARCH, "--force"]) == 0
    text = out.read_text()
    assert f"#   zoorank zoo {out}" in text and "THIS.yaml" not in text
    raw = yaml.safe_load(text)
    entries = {m["group"]: m for m in raw["models"]}
    assert sorted(entries) == ["lr0.1", "lr0.3"]
    assert entries["lr0.1"]["checkpoint"] == "./runs/lr0.1-s*/checkpoints/epoch=*.ckpt"
    assert {m["family"] for m in raw["models"]} == {"runs"}
    assert {m["state_dict_prefix"] for m in raw["models"]} == {"lightning"}
    models = resolve_models(load_config(out))
    by_group = {}
    for m in models:
        by_group.setdefault(m.group, []).append(m.model_id)
    assert {g: len(ids) for g, ids in by_group.items()} == {"lr0.1": 2, "lr0.3": 2}
    assert not any("last" in m.model_id for m in models)
    # every epoch a run saves is in: a later epoch file is matched by the same glob
    later = sweep / "runs" / "lr0.1-s0" / "checkpoints" / "epoch=1-step=4.ckpt"
    later.write_bytes(b"")
    try:
        matched = glob.glob(str(sweep / "runs" / "lr0.1-s*" / "checkpoints" / "epoch=*.ckpt"))
        assert str(later) in matched and len(matched) == 3
    finally:
        later.unlink()


@pytest.mark.timeout(300)
def test_an_arch_that_does_not_fit_is_an_error_naming_the_one_that_does(sweep, capsys):
    out = sweep / "wrong.yaml"
    assert main(["init", str(sweep / "runs"), "-o", str(out), "--arch", "resnet18"]) == 2
    err = capsys.readouterr().err
    assert "--arch resnet18" in err and "--arch resnet10t" in err, err
    assert not out.exists()


@pytest.mark.parametrize(("names", "left_out", "expected"), [
    (["epoch=0-step=2.ckpt"], False, "epoch=*.ckpt"),  # one file a run: later epochs too
    (["epoch=0-step=2.ckpt", "epoch=3-step=8.ckpt"], True, "epoch=*.ckpt"),  # not last.ckpt
    (["epoch=0-step=2.ckpt", "epoch=3-step=8.ckpt"], False, "*.ckpt"),
    (["last.ckpt"], False, "last.ckpt"),
    (["epoch=0-step=2.ckpt", "last.ckpt"], False, "*.ckpt"),  # a last.ckpt that is no copy
])
def test_file_names_become_globs_unless_one_name_without_a_number(names, left_out, expected):
    assert name_glob(names, ".ckpt", left_out) == expected
