"""zoorank.zoo: model specs → feature modules, safe checkpoint loading, geometry, fingerprints.

Tiny real models on CPU: timm ``test_resnet`` (0.4 M parameters), a two-layer ViT from
``ViTConfig``, a small conv net from ``tests/zoo_factories.py``. Every reference value is computed
without zoorank (timm / transformers / torch directly, hashlib, timm's own data config).
"""

from __future__ import annotations

import hashlib
import os
import pickle
import shutil
from pathlib import Path

import pytest
import timm
import torch
from safetensors.torch import save_file
from timm.data import resolve_data_config
from zoo_factories import TrainingArgs, small_cnn, small_cnn_map

from zoorank.config import FromTuneSpec, ModelSpec
from zoorank.config.loading import parse_config
from zoorank.errors import ConfigError, InputError
from zoorank.zoo import (
    CheckpointError,
    Geometry,
    Normalization,
    check_features,
    estimate_model_bytes,
    load_model,
    read_zoo_file,
    resolve_models,
    write_zoo_file,
)

ARCH = "test_resnet"


def resolve(*models: dict) -> list:
    config = parse_config(
        {"datasets": [{"name": "d", "source": "sklearn_digits"}], "models": list(models)}
    )
    return resolve_models(config)


def features(resolved, x: torch.Tensor) -> torch.Tensor:
    with torch.no_grad():
        return load_model(resolved)(x)


def timm_backbone_features(model: torch.nn.Module, x: torch.Tensor) -> torch.Tensor:
    """timm's pooled pre-logits features of a model that still has its classifier."""
    with torch.no_grad():
        return model.forward_head(model.forward_features(x), pre_logits=True)


@pytest.fixture(scope="module")
def trained():
    """A seeded test_resnet WITH a 10-class head (its checkpoint carries fc.* keys) and an input."""
    torch.manual_seed(123)
    model = timm.create_model(ARCH, pretrained=False, num_classes=10).eval()
    with torch.no_grad():  # move BatchNorm statistics away from their init so they are checked too
        for name, buf in model.named_buffers():
            if name.endswith("running_mean"):
                buf.normal_(0, 0.1)
    x = torch.randn(3, 3, 32, 32, generator=torch.Generator().manual_seed(0))
    return model, x


class Evil:
    """A pickle whose loading would run ``os.system("touch <marker>")``."""

    def __init__(self, marker: Path) -> None:
        self.marker = marker

    def __reduce__(self):
        return (os.system, (f"touch {self.marker}",))


class EvilOpen(Evil):
    """A pickle whose loading would create the marker file with ``open(marker, "w")``."""

    def __reduce__(self):
        return (open, (str(self.marker), "w"))


# ----------------------------------------------------------------------------- timm checkpoints


def test_timm_safetensors_checkpoint_with_classifier_reproduces_backbone_features(
    trained, tmp_path
):
    model, x = trained
    path = tmp_path / "last.safetensors"
    save_file(model.state_dict(), str(path))
    assert any(k.startswith("fc.") for k in model.state_dict())  # the head is in the file
    (resolved,) = resolve({"id": "r", "source": "timm", "name": ARCH, "checkpoint": str(path)})
    got = features(resolved, x)
    torch.testing.assert_close(got, timm_backbone_features(model, x), rtol=1e-5, atol=1e-6)
    assert got.dtype == torch.float32 and got.shape == (3, model.num_features)


def test_timm_nested_pt_with_module_prefix_reproduces_backbone_features(trained, tmp_path):
    model, x = trained
    path = tmp_path / "epoch3.pt"
    state = {"module." + k: v for k, v in model.state_dict().items()}
    torch.save({"state_dict": state, "epoch": 3, "lr": 0.1}, path)
    (resolved,) = resolve({"id": "r", "source": "timm", "name": ARCH, "checkpoint": str(path)})
    torch.testing.assert_close(
        features(resolved, x), timm_backbone_features(model, x), rtol=1e-5, atol=1e-6
    )


def test_explicit_state_dict_key_selects_the_nested_dict(trained, tmp_path):
    model, x = trained
    path = tmp_path / "ema.pth"
    torch.save({"weights_ema": model.state_dict(), "state_dict": {}}, path)
    spec = {"id": "r", "source": "timm", "name": ARCH, "checkpoint": str(path)}
    (resolved,) = resolve({**spec, "state_dict_key": "weights_ema"})
    torch.testing.assert_close(
        features(resolved, x), timm_backbone_features(model, x), rtol=1e-5, atol=1e-6
    )
    (missing_key,) = resolve({**spec, "state_dict_key": "nope"})
    with pytest.raises(CheckpointError, match="nope.*weights_ema"):
        load_model(missing_key)


def test_layer_returns_the_global_average_pooled_output_of_that_module(trained, tmp_path):
    model, x = trained
    path = tmp_path / "last.safetensors"
    save_file(model.state_dict(), str(path))
    (resolved,) = resolve(
        {"id": "r", "source": "timm", "name": ARCH, "checkpoint": str(path), "layer": "layer2"}
    )
    with torch.no_grad():  # the stem and the first two stages, by hand
        h = model.maxpool(model.act1(model.bn1(model.conv1(x))))
        expected = model.layer2(model.layer1(h)).mean(dim=(2, 3))
    torch.testing.assert_close(features(resolved, x), expected, rtol=1e-5, atol=1e-6)


def test_unknown_layer_is_an_error_listing_valid_names(tmp_path):
    (resolved,) = resolve({"id": "r", "source": "timm", "name": ARCH, "layer": "layer9"})
    with pytest.raises(CheckpointError, match="unknown layer 'layer9'.*layer1"):
        load_model(resolved)


# ----------------------------------------------------------------------------- other sources


def test_python_factory_builds_seeded_and_loads_its_checkpoint(tmp_path):
    x = torch.randn(4, 3, 24, 24, generator=torch.Generator().manual_seed(1))
    spec = {
        "id": "p",
        "source": "python",
        "name": "zoo_factories:small_cnn",
        "model_kwargs": {"dim": 12},
    }
    (fresh,) = resolve(spec)
    a, b = features(fresh, x), features(fresh, x)
    assert a.shape == (4, 12)
    torch.testing.assert_close(
        a, b, rtol=0, atol=0
    )  # two builds (two actors) hold the same weights

    torch.manual_seed(7)
    trained = small_cnn(dim=12).eval()
    path = tmp_path / "cnn.pt"
    torch.save(trained.state_dict(), path)
    (loaded,) = resolve({**spec, "checkpoint": str(path)})
    with torch.no_grad():
        torch.testing.assert_close(features(loaded, x), trained(x), rtol=1e-5, atol=1e-6)


def test_python_factory_feature_map_is_global_average_pooled():
    x = torch.randn(2, 3, 16, 16, generator=torch.Generator().manual_seed(2))
    (resolved,) = resolve({"id": "m", "source": "python", "name": "zoo_factories:small_cnn_map"})
    module = load_model(resolved)
    with torch.no_grad():
        expected = module.model(x).mean(dim=(2, 3))
        assert isinstance(module.model, type(small_cnn_map()))
        torch.testing.assert_close(module(x), expected)


@pytest.fixture(scope="module")
def vit_dir(tmp_path_factory):
    from transformers import ViTConfig, ViTModel

    config = ViTConfig(
        hidden_size=32,
        num_hidden_layers=2,
        num_attention_heads=2,
        intermediate_size=64,
        image_size=32,
        patch_size=8,
    )
    torch.manual_seed(5)
    directory = tmp_path_factory.mktemp("vit")
    ViTModel(config).save_pretrained(directory)
    return directory


def test_transformers_vit_pooling_matches_last_hidden_state(vit_dir):
    from transformers import ViTModel

    x = torch.randn(2, 3, 32, 32, generator=torch.Generator().manual_seed(3))
    reference = ViTModel.from_pretrained(vit_dir).eval()
    with torch.no_grad():
        out = reference(pixel_values=x)
    hidden = out.last_hidden_state
    got = {}
    for pooling in ("cls", "mean", "pooler"):
        (resolved,) = resolve(
            {"id": pooling, "source": "transformers", "name": str(vit_dir), "pooling": pooling}
        )
        got[pooling] = features(resolved, x)
    torch.testing.assert_close(got["cls"], hidden[:, 0], rtol=1e-5, atol=1e-6)
    torch.testing.assert_close(got["mean"], hidden.mean(dim=1), rtol=1e-5, atol=1e-6)
    torch.testing.assert_close(got["pooler"], out.pooler_output, rtol=1e-5, atol=1e-6)
    assert not torch.allclose(got["cls"], got["mean"], atol=1e-3)
    assert got["cls"].shape == (2, 32)


def test_transformers_geometry_from_config_and_preprocessor(vit_dir, tmp_path):
    from transformers import CLIPImageProcessor, ViTImageProcessor

    (plain,) = resolve({"id": "v", "source": "transformers", "name": str(vit_dir)})
    assert plain.geometry.input_size == 32  # config.json image_size, no processor file
    assert plain.normalization == Normalization((0.485, 0.456, 0.406), (0.229, 0.224, 0.225))

    squashed = tmp_path / "squashed"
    shutil.copytree(vit_dir, squashed)
    ViTImageProcessor(
        size={"height": 48, "width": 48}, resample=2, image_mean=[0.5] * 3
    ).save_pretrained(squashed)
    (vit,) = resolve({"id": "v", "source": "transformers", "name": str(squashed)})
    assert vit.geometry == Geometry(input_size=48, interpolation="bilinear", crop_pct=1.0)
    assert vit.normalization.mean == (0.5, 0.5, 0.5)

    cropped = tmp_path / "cropped"
    shutil.copytree(vit_dir, cropped)
    CLIPImageProcessor(
        size={"shortest_edge": 40}, crop_size={"height": 32, "width": 32}
    ).save_pretrained(cropped)
    (clip,) = resolve({"id": "c", "source": "transformers", "name": str(cropped)})
    assert clip.geometry == Geometry(input_size=32, interpolation="bicubic", crop_pct=32 / 40)
    assert clip.geometry.resize_size == 40
    assert (
        vit.fingerprint != plain.fingerprint
    )  # the processor file is part of the directory digest


def test_torchscript_file_round_trip(tmp_path):
    torch.manual_seed(11)
    scripted = torch.jit.script(small_cnn(dim=10).eval())
    path = tmp_path / "cnn.ts"
    scripted.save(str(path))
    x = torch.randn(2, 3, 20, 20, generator=torch.Generator().manual_seed(4))
    (resolved,) = resolve({"id": "ts", "source": "torchscript", "name": str(path),
                           "trust_checkpoint": True})
    with torch.no_grad():
        torch.testing.assert_close(features(resolved, x), scripted(x), rtol=1e-5, atol=1e-6)
    assert estimate_model_bytes(resolved) == path.stat().st_size
    assert resolved.checkpoint_digest == hashlib.sha256(path.read_bytes()).hexdigest()


# ----------------------------------------------------------------------------- bad checkpoints


@pytest.mark.parametrize("suffix", [".safetensors", ".pt"])
def test_corrupt_checkpoint_is_a_checkpoint_error(tmp_path, suffix):
    path = tmp_path / f"broken{suffix}"
    path.write_bytes(os.urandom(4096))
    (resolved,) = resolve({"id": "r", "source": "timm", "name": ARCH, "checkpoint": str(path)})
    with pytest.raises(CheckpointError, match="corrupt") as err:
        load_model(resolved)
    assert isinstance(err.value, InputError) and str(path) in str(err.value)


def test_truncated_checkpoint_is_a_checkpoint_error(trained, tmp_path):
    model, _ = trained
    whole = tmp_path / "whole.pt"
    torch.save(model.state_dict(), whole)
    cut = tmp_path / "cut.pt"
    cut.write_bytes(whole.read_bytes()[: whole.stat().st_size // 2])
    (resolved,) = resolve({"id": "r", "source": "timm", "name": ARCH, "checkpoint": str(cut)})
    with pytest.raises(CheckpointError, match="corrupt"):
        load_model(resolved)


def test_wrong_keys_are_listed_as_missing_and_unexpected(trained, tmp_path):
    model, x = trained
    state = dict(model.state_dict())
    state["projector.weight"] = torch.zeros(4, 4)
    del state["layer1.0.conv1.weight"]
    path = tmp_path / "wrong.safetensors"
    save_file(state, str(path))
    spec = {"id": "r", "source": "timm", "name": ARCH, "checkpoint": str(path)}
    (strict,) = resolve(spec)
    with pytest.raises(CheckpointError) as err:
        load_model(strict)
    message = str(err.value)
    assert "missing keys (1): layer1.0.conv1.weight" in message
    assert "unexpected keys (1): projector.weight" in message

    (lenient,) = resolve({**spec, "strict": False})
    got = features(lenient, x)  # loads what fits; the missing conv keeps its seeded init
    assert got.shape == (3, model.num_features) and torch.isfinite(got).all()


def test_shape_mismatch_and_foreign_checkpoints_fail_even_when_not_strict(tmp_path):
    foreign = tmp_path / "foreign.safetensors"
    save_file({"encoder.w": torch.zeros(3)}, str(foreign))
    (resolved,) = resolve(
        {"id": "r", "source": "timm", "name": ARCH, "checkpoint": str(foreign), "strict": False}
    )
    with pytest.raises(CheckpointError, match="no key matches"):
        load_model(resolved)
    model = timm.create_model(ARCH, num_classes=0)
    state = dict(model.state_dict())
    state["conv1.0.weight"] = torch.zeros(1, 1, 1, 1)
    bad = tmp_path / "bad.safetensors"
    save_file(state, str(bad))
    (resolved,) = resolve(
        {"id": "r", "source": "timm", "name": ARCH, "checkpoint": str(bad), "strict": False}
    )
    with pytest.raises(CheckpointError, match="shape mismatch.*conv1.0.weight"):
        load_model(resolved)


def test_truncated_key_lists_say_how_many_more(tmp_path):
    path = tmp_path / "many.safetensors"
    save_file(
        {f"extra.{i}": torch.zeros(1) for i in range(25)} | {"fc.weight": torch.zeros(1)}, str(path)
    )
    spec = {
        "id": "p",
        "source": "python",
        "name": "zoo_factories:small_cnn",
        "checkpoint": str(path),
    }
    (resolved,) = resolve(spec)
    with pytest.raises(CheckpointError, match=r"unexpected keys \(26\): .*\(\+16 more\)"):
        load_model(resolved)


@pytest.mark.parametrize("payload", [Evil, EvilOpen])
@pytest.mark.parametrize("writer", ["torch.save", "pickle.dump"])
def test_malicious_pickle_is_refused_and_never_runs(tmp_path, payload, writer):
    marker = tmp_path / "pwned"
    path = tmp_path / "evil.pt"
    obj = {"state_dict": {"w": torch.zeros(1)}, "hook": payload(marker)}
    if writer == "torch.save":
        torch.save(obj, path)
    else:
        with open(path, "wb") as f:
            pickle.dump(obj, f)
    (resolved,) = resolve({"id": "r", "source": "timm", "name": ARCH, "checkpoint": str(path)})
    with pytest.raises(CheckpointError, match="trust_checkpoint"):
        load_model(resolved)
    assert not marker.exists()


def test_trusted_checkpoint_with_python_objects_loads(trained, tmp_path):
    model, x = trained
    path = tmp_path / "full.ckpt"
    torch.save({"model": model.state_dict(), "args": TrainingArgs(lr=0.1)}, path)
    spec = {"id": "r", "source": "timm", "name": ARCH, "checkpoint": str(path)}
    (untrusted,) = resolve(spec)
    with pytest.raises(CheckpointError, match="unsafe pickle refused.*TrainingArgs"):
        load_model(untrusted)
    (trusted,) = resolve({**spec, "trust_checkpoint": True})
    torch.testing.assert_close(
        features(trusted, x), timm_backbone_features(model, x), rtol=1e-5, atol=1e-6
    )


# ----------------------------------------------------------------------------- resolution


def _write_runs(root: Path) -> tuple[bytes, bytes]:
    first = {"w": torch.arange(4.0)}
    second = {"w": torch.arange(4.0) + 1}
    for run, state in (("lr0.1-s0", first), ("lr0.1-s1", first), ("lr0.3-s0", second)):
        (root / "runs" / run).mkdir(parents=True, exist_ok=True)
        save_file(state, str(root / "runs" / run / "last.safetensors"))
    return (root / "runs/lr0.1-s0/last.safetensors").read_bytes(), (
        root / "runs/lr0.3-s0/last.safetensors"
    ).read_bytes()


def test_glob_yields_one_model_per_file_with_path_ids_and_content_fingerprints(
    tmp_path, monkeypatch
):
    first, second = _write_runs(tmp_path)
    monkeypatch.chdir(tmp_path)
    models = resolve(
        {"source": "timm", "name": ARCH, "checkpoint": "runs/*/last.safetensors", "group": "g"}
    )
    # identical bytes under two names: one model (same digest and fingerprint), ranked once,
    # the other named as its duplicate; other bytes: another model
    assert [m.model_id for m in models] == ["lr0.1-s0-last", "lr0.3-s0-last"]
    assert [m.duplicates for m in models] == [("lr0.1-s1-last",), ()]
    assert [m.spec.checkpoint for m in models] == [
        "runs/lr0.1-s0/last.safetensors",
        "runs/lr0.3-s0/last.safetensors",
    ]
    assert all(m.group == "g" and m.spec.id == m.model_id for m in models)
    digests = [m.checkpoint_digest for m in models]
    assert digests == [hashlib.sha256(b).hexdigest() for b in (first, second)]
    assert models[0].fingerprint != models[1].fingerprint

    with_id = resolve(
        {"id": "r18", "source": "timm", "name": ARCH, "checkpoint": "runs/**/*.safetensors"}
    )
    assert [m.model_id for m in with_id] == ["r18-lr0.1-s0-last", "r18-lr0.3-s0-last"]
    (resized,) = resolve(
        {
            "id": "x",
            "source": "timm",
            "name": ARCH,
            "checkpoint": "runs/lr0.1-s0/last.safetensors",
            "input_size": 64,
        }
    )
    assert resized.checkpoint_digest == digests[0] and resized.fingerprint != models[0].fingerprint


def test_glob_without_match_and_id_collisions_are_config_errors(tmp_path):
    _write_runs(tmp_path / "a")
    _write_runs(tmp_path / "b")
    with pytest.raises(ConfigError, match=r"models\[0\] \(r18\).*matches no file"):
        resolve(
            {"id": "r18", "source": "timm", "name": ARCH, "checkpoint": str(tmp_path / "nope/*.pt")}
        )
    with pytest.raises(ConfigError, match="'lr0.1-s0-last'"):
        resolve(
            {
                "source": "timm",
                "name": ARCH,
                "checkpoint": str(tmp_path / "a/runs/*/last.safetensors"),
            },
            {
                "source": "timm",
                "name": ARCH,
                "checkpoint": str(tmp_path / "b/runs/*/last.safetensors"),
            },
        )
    with pytest.raises(ConfigError, match="checkpoint file not found"):
        resolve(
            {"id": "r", "source": "timm", "name": ARCH, "checkpoint": str(tmp_path / "missing.pt")}
        )
    with pytest.raises(ConfigError, match="unknown timm architecture 'resnet_nope'"):
        resolve({"id": "r", "source": "timm", "name": "resnet_nope"})


def test_timm_geometry_follows_timm_data_config_and_overrides():
    reference = resolve_data_config(
        {}, model=timm.create_model("resnet18", pretrained=False, num_classes=0)
    )
    (r18,) = resolve({"source": "timm", "name": "resnet18"})
    assert r18.model_id == "resnet18"
    assert r18.geometry == Geometry(
        input_size=reference["input_size"][-1],
        interpolation=reference["interpolation"],
        crop_pct=reference["crop_pct"],
    )
    assert r18.normalization == Normalization(tuple(reference["mean"]), tuple(reference["std"]))

    (small,) = resolve({"source": "timm", "name": "resnet18", "input_size": 32, "crop_pct": 1.0})
    assert small.geometry == Geometry(32, reference["interpolation"], 1.0)
    assert small.normalization == r18.normalization
    assert small.fingerprint != r18.fingerprint
    assert r18.geometry.resize_size == int(reference["input_size"][-1] // reference["crop_pct"])


def test_torchscript_needs_trust_checkpoint_and_the_error_names_the_field(tmp_path):
    path = tmp_path / "m.ts"
    torch.jit.script(small_cnn()).save(str(path))
    with pytest.raises(ConfigError, match=r"trust_checkpoint: source torchscript .*runs code"):
        resolve({"id": "ts", "source": "torchscript", "name": str(path)})


def test_torchscript_and_python_default_to_imagenet_statistics_without_zoom(tmp_path):
    path = tmp_path / "m.ts"
    torch.jit.script(small_cnn()).save(str(path))
    ts, py = resolve(
        {"id": "ts", "source": "torchscript", "name": str(path), "trust_checkpoint": True},
        {
            "id": "py",
            "source": "python",
            "name": "zoo_factories:small_cnn",
            "mean": [0.5, 0.5, 0.5],
        },
    )
    # no data config of their own: no zoom (crop_pct 1.0), so a 224 px image is used as it is
    assert ts.geometry == py.geometry == Geometry(224, "bicubic", 1.0)
    assert ts.preprocessing_origin == "default" and py.preprocessing_origin == "default + config (mean)"
    assert ts.normalization == Normalization((0.485, 0.456, 0.406), (0.229, 0.224, 0.225))
    assert py.normalization.mean == (0.5, 0.5, 0.5) and py.normalization.std == (
        0.229,
        0.224,
        0.225,
    )


def test_zoo_file_round_trip_and_from_tune_survive_moving_the_folder(tmp_path):
    tune = tmp_path / "tune"
    (tune / "trials").mkdir(parents=True)
    checkpoints = []
    for seed in range(2):
        torch.manual_seed(seed)
        path = tune / "trials" / f"t{seed}.safetensors"
        save_file(small_cnn().state_dict(), str(path))
        checkpoints.append(path)
    specs = [
        ModelSpec(
            id=f"t{i}",
            source="python",
            name="zoo_factories:small_cnn",
            checkpoint=str(p),
            group="g",
            family="simclr",
        )
        for i, p in enumerate(checkpoints)
    ]
    file = write_zoo_file(tune, specs)
    assert file == tune / "zoo.yaml" and "checkpoint: trials/t0.safetensors" in file.read_text()
    assert read_zoo_file(tune) == specs

    config = {
        "datasets": [{"name": "d", "source": "sklearn_digits"}],
        "models": [{"from_tune": str(tune)}],
    }
    before = resolve_models(parse_config(config))
    moved = tmp_path / "moved"
    tune.rename(moved)
    after = resolve_models(
        parse_config({**config, "models": [FromTuneSpec(from_tune=str(moved / "zoo.yaml"))]})
    )
    assert [m.model_id for m in after] == ["t0", "t1"]
    assert [m.spec.checkpoint for m in after] == [
        str(moved / "trials" / f"t{i}.safetensors") for i in range(2)
    ]
    assert [m.fingerprint for m in after] == [m.fingerprint for m in before]
    assert all(m.group == "g" and m.family == "simclr" for m in after)
    assert features(after[1], torch.zeros(1, 3, 8, 8)).shape == (1, 16)


def test_zoo_file_keeps_cwd_relative_paths_outside_its_folder_usable(tmp_path, monkeypatch):
    monkeypatch.chdir(tmp_path)
    save_file(small_cnn().state_dict(), "outside.safetensors")
    spec = ModelSpec(
        id="o", source="python", name="zoo_factories:small_cnn", checkpoint="outside.safetensors"
    )
    write_zoo_file(tmp_path / "tune" / "zoo.yaml", [spec])
    (read,) = read_zoo_file(tmp_path / "tune")
    assert read.checkpoint == str(tmp_path / "outside.safetensors")


def test_zoo_file_errors_name_the_file_and_entry(tmp_path):
    file = tmp_path / "zoo.yaml"
    file.write_text("- id: a\n  source: timm\n  name: resnet18\n  colour: red\n")
    with pytest.raises(ConfigError, match=r"zoo.yaml: \[0\]\(a\).*colour.*unknown key"):
        read_zoo_file(file)
    with pytest.raises(ConfigError, match="zoo file not found"):
        read_zoo_file(tmp_path / "absent")


# ----------------------------------------------------------------------------- outputs and sizes


def test_check_features_rejects_non_finite_and_non_2d():
    check_features(torch.ones(4, 3))
    with pytest.raises(CheckpointError, match="1 NaN and 0 Inf"):
        check_features(torch.tensor([[0.0, float("nan")]]))
    with pytest.raises(CheckpointError, match="0 NaN and 1 Inf"):
        check_features(torch.tensor([[float("-inf"), 1.0]]), model_id="m")
    with pytest.raises(CheckpointError, match=r"2-D.*\(2, 3, 4\)"):
        check_features(torch.zeros(2, 3, 4))


def test_estimate_model_bytes_equals_the_built_models_state_bytes():
    model = timm.create_model(ARCH, pretrained=False, num_classes=0)
    expected = sum(t.numel() * t.element_size() for t in model.state_dict().values())
    (timm_model,) = resolve({"id": "t", "source": "timm", "name": ARCH})
    assert estimate_model_bytes(timm_model) == expected
    cnn = small_cnn(width=4, dim=6)
    expected = sum(t.numel() * t.element_size() for t in cnn.state_dict().values())
    (python_model,) = resolve(
        {
            "id": "p",
            "source": "python",
            "name": "zoo_factories:small_cnn",
            "model_kwargs": {"width": 4, "dim": 6},
        }
    )
    assert estimate_model_bytes(python_model) == expected


@pytest.mark.skipif(not torch.cuda.is_available(), reason="needs a CUDA device")
def test_load_model_on_cuda_matches_cpu(trained, tmp_path):
    model, x = trained
    path = tmp_path / "last.safetensors"
    save_file(model.state_dict(), str(path))
    (resolved,) = resolve({"id": "r", "source": "timm", "name": ARCH, "checkpoint": str(path)})
    with torch.no_grad():
        on_gpu = load_model(resolved, device="cuda")(x.cuda())
    assert on_gpu.device.type == "cuda"
    torch.testing.assert_close(on_gpu.cpu(), features(resolved, x), rtol=1e-4, atol=1e-4)
