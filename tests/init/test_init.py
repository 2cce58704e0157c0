"""``zoorank init``: a config that validates, written from what a folder holds."""

from __future__ import annotations

import glob
from argparse import Namespace
from pathlib import Path

import numpy as np
import pyarrow as pa
import pyarrow.parquet as pq
import pytest
import torch
import yaml
from PIL import Image

from zoorank.cli import main
from zoorank.config.loading import load_config
from zoorank.init.checkpoint_entries import glob_for

ARCH = "test_resnet"  # a tiny timm architecture (0.4 M parameters)


def _png(side: int, seed: int) -> bytes:
    import io

    rgb = np.random.default_rng(seed).integers(0, 255, (side, side, 3), dtype=np.uint8)
    buf = io.BytesIO()
    Image.fromarray(rgb).save(buf, format="PNG")
    return buf.getvalue()


def _lightning_checkpoint(path: Path, seed: int, hparams: dict) -> None:
    """A LightningModule's checkpoint: the backbone under ``model.backbone.``, a projector beside
    it, metadata that ``torch.load(weights_only=True)`` refuses (a Namespace)."""
    import timm

    torch.manual_seed(seed)
    net = timm.create_model(ARCH, num_classes=10)
    state = {f"model.backbone.{k}": v for k, v in net.state_dict().items()}
    state["model.projector.weight"] = torch.zeros(8, 8)
    path.parent.mkdir(parents=True, exist_ok=True)
    torch.save({"state_dict": state, "epoch": 3, "pytorch-lightning_version": "2.4.0",
                "hyper_parameters": hparams}, path)


@pytest.fixture
def experiment(tmp_path) -> Path:
    exp = tmp_path / "exp"
    for i, lr in enumerate(("0.1", "0.3")):
        _lightning_checkpoint(exp / "runs" / f"lr{lr}-s0" / "last.ckpt", i,
                              {"arch": ARCH, "args": Namespace(lr=float(lr))})
    for c in ("cat", "dog"):
        (exp / "data" / "train" / c).mkdir(parents=True)
        for i in range(3):
            (exp / "data" / "train" / c / f"{i}.png").write_bytes(_png(32, i))
    pq.write_table(pa.table({"image": pa.array([_png(32, i) for i in range(4)], pa.binary()),
                             "label": pa.array([0, 1, 0, 1], pa.int64())}),
                   exp / "data" / "test.parquet")
    return exp


@pytest.mark.timeout(300)
def test_init_writes_a_config_that_validates_and_names_what_the_folder_holds(experiment,
                                                                              monkeypatch,
                                                                              capsys):
    monkeypatch.chdir("/")  # the file's paths are its folder's, whatever the cwd
    out = experiment / "zoorank.yaml"
    assert main(["init", str(experiment), "-o", str(out)]) == 0
    assert f"wrote {out}" in capsys.readouterr().out
    text = out.read_text()
    assert text.startswith("# zoorank run config, written by `zoorank init`")
    assert "TODO" not in "\n".join(text.splitlines()[5:])  # everything was found
    config = load_config(out)
    (model,) = config.models
    assert (model.source, model.name, model.state_dict_prefix) == ("timm", ARCH, "lightning")
    assert model.input_size == 32  # the images are 32 px
    matched = sorted(glob.glob(model.checkpoint))
    assert matched == sorted(str(p) for p in experiment.glob("runs/*/last.ckpt"))
    by_name = {d.name: d for d in config.datasets}
    train, test = by_name["train"], by_name["test"]
    assert (train.source, train.path, train.labels_from_folders) == (
        "image_folder", str(experiment / "data" / "train"), True)
    assert (test.source, test.path, test.image_column, test.label_column) == (
        "parquet", str(experiment / "data" / "test.parquet"), "image", "label")
    assert config.store == str(experiment / "zoorank-store")
    raw = yaml.safe_load(text)  # written relative to its folder
    assert raw["models"][0]["checkpoint"] == "./runs/*/last.ckpt"


@pytest.mark.timeout(300)
def test_the_resolved_zoo_loads_every_checkpoint_it_globbed(experiment):
    from zoorank.zoo.build import load_model
    from zoorank.zoo.resolve import resolve_models

    out = experiment / "zoorank.yaml"
    assert main(["init", str(experiment), "-o", str(out), "--quiet"]) == 0
    models = resolve_models(load_config(out))
    assert sorted(m.model_id for m in models) == ["lr0.1-s0-last", "lr0.3-s0-last"]
    x = torch.randn(2, 3, 32, 32, generator=torch.Generator().manual_seed(0))
    feats = [load_model(m)(x) for m in models]
    assert not torch.allclose(feats[0], feats[1])  # two seeds: two different backbones


def test_init_refuses_to_overwrite_without_force(experiment, capsys):
    out = experiment / "zoorank.yaml"
    out.write_text("mine\n")
    assert main(["init", str(experiment), "-o", str(out)]) == 2
    assert "exists; give --force" in capsys.readouterr().err and out.read_text() == "mine\n"
    assert main(["init", "--timm", ARCH, "-o", str(out), "--force"]) == 0
    assert load_config(out).models[0].name == ARCH


def test_timm_names_become_entries_and_an_unknown_one_gets_a_did_you_mean(tmp_path, capsys):
    out = tmp_path / "c.yaml"
    assert main(["init", "--timm", "resnet18", ARCH, "-o", str(out)]) == 0
    config = load_config(out)
    assert [(m.source, m.name) for m in config.models] == [("timm", "resnet18"), ("timm", ARCH)]
    assert all(m.pretrained is False for m in config.models)  # no cached weights here
    assert config.datasets[0].name == "images" and "TODO: your images" in out.read_text()
    assert main(["init", "--timm", "resnet1B", "-o", str(tmp_path / "d.yaml")]) == 2
    assert "not a timm architecture (did you mean 'resnet18'?)" in capsys.readouterr().err


def test_an_architecture_named_only_by_the_path_is_found_and_checked(tmp_path):
    import timm
    from safetensors.torch import save_file

    folder = tmp_path / "zoo"
    for seed in (0, 1):
        torch.manual_seed(seed)
        state = timm.create_model(ARCH, num_classes=0).state_dict()
        (folder / f"{ARCH}-s{seed}").mkdir(parents=True)
        save_file({k: v.contiguous() for k, v in state.items()},
                  str(folder / f"{ARCH}-s{seed}" / "weights.safetensors"))
    out = tmp_path / "c.yaml"
    assert main(["init", str(folder), "-o", str(out), "--timm", "resnet18"]) == 0
    model = load_config(out).models[0]
    assert model.name == ARCH and model.state_dict_prefix is None
    # the run folders differ only in the seed: one seed ensemble, its glob open to more seeds
    assert model.checkpoint == str(folder / f"{ARCH}-s*" / "weights.safetensors")
    assert (model.group, model.family) == (ARCH, "zoo")


def test_an_unknown_architecture_is_a_todo_in_a_config_that_still_validates(tmp_path):
    from safetensors.torch import save_file

    folder = tmp_path / "ckpts"
    folder.mkdir()
    for i in range(2):
        save_file({"w.weight": torch.zeros(4, 4), "w.bias": torch.zeros(4)},
                  str(folder / f"net{i}.safetensors"))
    out = tmp_path / "c.yaml"
    assert main(["init", str(folder), "-o", str(out)]) == 0
    text = out.read_text()
    assert "TODO: the architecture" in text
    assert load_config(out).models[0].checkpoint == str(folder / "*.safetensors")


def test_a_folder_without_models_is_an_input_error(tmp_path, capsys):
    (tmp_path / "empty").mkdir()
    assert main(["init", str(tmp_path / "empty"), "-o", str(tmp_path / "c.yaml")]) == 2
    assert "nothing to rank" in capsys.readouterr().err
    assert not (tmp_path / "c.yaml").exists()


@pytest.mark.parametrize(("files", "expected"), [
    (["runs/a/last.ckpt", "runs/b/last.ckpt"], "runs/*/last.ckpt"),
    (["ckpts/a.safetensors", "ckpts/b.safetensors"], "ckpts/*.safetensors"),
    (["r/x1/s0/e.pt", "r/x2/s1/e.pt"], "r/*/*/e.pt"),
    (["r/a/e.pt", "r/b/c/e.pt"], "r/**/*.pt"),
])
def test_the_glob_names_the_files_and_matches_no_other(tmp_path, files, expected):
    paths = [tmp_path / f for f in files]
    for p in paths:
        p.parent.mkdir(parents=True, exist_ok=True)
        p.write_bytes(b"x")
    (tmp_path / "r" / "notes.txt").parent.mkdir(exist_ok=True)
    (tmp_path / "r" / "notes.txt").write_text("not a checkpoint")
    pattern = glob_for(paths, tmp_path)
    assert pattern == expected
    assert sorted(glob.glob(str(tmp_path / pattern), recursive=True)) == sorted(map(str, paths))
