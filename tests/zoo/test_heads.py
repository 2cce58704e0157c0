"""Classifier heads kept by EMBED (issue 31, items 1-2): logits beside the features from the same
forward, label spaces mapped to the dataset's classes, heads off, and mismatches as config errors.

One module-scoped run embeds 48 real CIFAR-10 test images and 48 Tiny-ImageNet validation images
(clean, and 8 of them in two augmented views) with a seeded resnet10t classifier saved as
safetensors (10 classes; once more with ``head: false``), a python classifier with a ``head``
attribute, a python factory returning a timm classifier, and a resnet10t with an ImageNet-1k
head. References are the models' own forwards in this process (plain timm / torch), on inputs made
by ``zoorank.data`` as in test_embed.py.
"""

from __future__ import annotations

import json
import subprocess
import sys
from importlib import resources
from pathlib import Path

import numpy as np
import pyarrow.parquet as pq
import pytest
import torch
import yaml

from zoorank.catalog import build_catalog
from zoorank.config import RunConfig
from zoorank.config.loading import parse_config
from zoorank.data import load_samples
from zoorank.data.images import decode_image
from zoorank.data.views import clean_view, make_views
from zoorank.embed import run_embed
from zoorank.errors import ConfigError
from zoorank.store import Store
from zoorank.zoo import resolve_models
from zoorank.zoo.label_space import LabelSpace, head_columns

REPO = Path(__file__).resolve().parents[2]
GEOMETRY = {"input_size": 32, "interpolation": "bilinear", "crop_pct": 1.0}
LIMIT = 48


def _save_timm(path: Path, classes: int, seed: int) -> None:
    import timm
    from safetensors.torch import save_file

    torch.manual_seed(seed)
    net = timm.create_model("resnet10t", pretrained=False, num_classes=classes).eval()
    with torch.no_grad():  # non-trivial BN statistics and biases, as a trained checkpoint has
        for m in net.modules():
            if isinstance(m, torch.nn.BatchNorm2d):
                m.running_mean.uniform_(-0.1, 0.1)
                m.running_var.uniform_(0.5, 1.5)
        net.fc.bias.uniform_(-1, 1)
    save_file({k: v.contiguous() for k, v in net.state_dict().items()}, str(path))


def _timm_reference(path: str, classes: int) -> torch.nn.Module:
    import timm
    from safetensors.torch import load_file

    net = timm.create_model("resnet10t", pretrained=False, num_classes=classes)
    net.load_state_dict(load_file(path))
    return net.eval()


def _datasets(shared_data: Path) -> list[dict]:
    return [
        {"name": "cifar", "source": "parquet", "path": str(shared_data / "cifar10" / "test.parquet"),
         "label_column": "label", "limit": LIMIT},
        {"name": "tiny", "source": "parquet",
         "path": str(shared_data / "tiny_imagenet" / "val.parquet"), "label_column": "label",
         "limit": LIMIT},
    ]


@pytest.fixture(scope="module")
def checkpoints(tmp_path_factory) -> dict[str, str]:
    d = tmp_path_factory.mktemp("heads")
    _save_timm(d / "r10-cls10.safetensors", 10, 11)
    _save_timm(d / "r10-in1k.safetensors", 1000, 12)
    return {"cls10": str(d / "r10-cls10.safetensors"), "in1k": str(d / "r10-in1k.safetensors")}


@pytest.fixture(scope="module")
def embedded(ray_session, shared_data, checkpoints, tmp_path_factory):
    timm_spec = {"source": "timm", "name": "resnet10t", **GEOMETRY}
    config = parse_config({
        "store": str(tmp_path_factory.mktemp("store")),
        "datasets": _datasets(shared_data),
        "models": [
            {"id": "timm-cls", **timm_spec, "checkpoint": checkpoints["cls10"],
             "datasets": ["cifar"]},
            {"id": "timm-cls-off", **timm_spec, "checkpoint": checkpoints["cls10"], "head": False,
             "datasets": ["cifar"]},
            {"id": "py-head", "source": "python", "name": "head_factories:headed_cnn",
             "datasets": ["cifar"], **GEOMETRY},
            {"id": "py-timm", "source": "python", "name": "head_factories:timm_classifier",
             "datasets": ["cifar"], **GEOMETRY},
            {"id": "in1k", **timm_spec, "checkpoint": checkpoints["in1k"], "datasets": ["tiny"]},
        ],
        "views": [{"name": "clean"}, {"name": "simclr", "samples": 8, "per_sample": 2}],
        "embed": {"batch_size": 16, "num_actors": 1, "device": "cpu"},
    })
    rows = run_embed(config)
    return config, rows


def inputs(config, dataset: str, model_id: str, sample_ids: np.ndarray,
           view_index: np.ndarray | None = None) -> torch.Tensor:
    """Normalized inputs made in this process from the decoded images: the clean view, or with
    ``view_index`` the simclr views."""
    (spec,) = [d for d in config.datasets if d.name == dataset]
    (model,) = [m for m in resolve_models(config) if m.model_id == model_id]
    table = load_samples(spec, config.seed)
    pos = np.searchsorted(table.sample_id, sample_ids)
    if view_index is None:
        arrays = [clean_view(decode_image(table.images[p]), model.geometry) for p in pos]
    else:
        arrays = [make_views(decode_image(table.images[p]), int(s), "simclr", model.geometry,
                             int(v) + 1, config.seed)[int(v)]
                  for p, s, v in zip(pos, sample_ids, view_index)]
    x = torch.from_numpy(np.stack(arrays)).permute(0, 3, 1, 2).float() / 255
    mean = torch.tensor(model.normalization.mean).view(1, 3, 1, 1)
    std = torch.tensor(model.normalization.std).view(1, 3, 1, 1)
    return (x - mean) / std


def _manifest_row(config, dataset: str, model_id: str) -> dict:
    m = Store(config.store).read_manifest()
    (row,) = m[(m["dataset"] == dataset) & (m["model_id"] == model_id)
               & (m["view"] == "clean")].to_dict("records")
    return row


def _seeded(factory, *args):
    torch.manual_seed(0)  # the zoo builds every checkpoint-less model under torch seed 0
    return factory(*args).eval()


@pytest.mark.timeout(300)
def test_logits_in_the_shards_equal_the_models_own_forward(embedded, checkpoints):
    from head_factories import headed_cnn, timm_classifier

    config, rows = embedded
    assert (rows["status"] == "done").all(), rows[["model_id", "error"]]
    store = Store(config.store)
    references = {
        "timm-cls": _timm_reference(checkpoints["cls10"], 10),
        "py-head": _seeded(headed_cnn),
        "py-timm": _seeded(timm_classifier),
    }
    for model_id, net in references.items():
        emb = store.read_embeddings("cifar", "clean", model_id)
        assert emb.logits is not None and emb.logits.shape == (LIMIT, 10)
        assert _manifest_row(config, "cifar", model_id)["logit_dim"] == 10
        x = inputs(config, "cifar", model_id, emb.sample_id)
        with torch.inference_mode():
            logits = net(x).numpy()
            if model_id == "py-head":  # the features are the head's input
                feats = net.backbone(x).numpy()
            else:  # timm: pooled pre-logits
                feats = net.forward_head(net.forward_features(x), pre_logits=True).numpy()
        np.testing.assert_allclose(emb.logits, logits, rtol=1e-4, atol=1e-4)
        np.testing.assert_allclose(emb.embedding, feats, rtol=1e-4, atol=1e-4)
        alone = store.read_logits("cifar", "clean", model_id)  # the logits columns only
        assert alone.embedding.shape == (LIMIT, 0)
        np.testing.assert_array_equal(alone.sample_id, emb.sample_id)
        np.testing.assert_array_equal(alone.logits, emb.logits)


def test_augmented_views_get_logits_from_the_same_forward(embedded, checkpoints):
    config, _ = embedded
    emb = Store(config.store).read_embeddings("cifar", "simclr", "timm-cls")
    assert emb.logits is not None and emb.logits.shape == (16, 10)
    assert _manifest_row_view(config, "simclr", "timm-cls")["logit_dim"] == 10
    net = _timm_reference(checkpoints["cls10"], 10)
    with torch.inference_mode():
        logits = net(inputs(config, "cifar", "timm-cls", emb.sample_id, emb.view_index)).numpy()
    np.testing.assert_allclose(emb.logits, logits, rtol=1e-4, atol=1e-4)


def _manifest_row_view(config, view: str, model_id: str) -> dict:
    m = Store(config.store).read_manifest()
    (row,) = m[(m["view"] == view) & (m["model_id"] == model_id)].to_dict("records")
    return row


def test_heads_off_write_no_logits_and_the_same_features(embedded):
    config, _ = embedded
    store = Store(config.store)
    off = store.read_embeddings("cifar", "clean", "timm-cls-off")
    on = store.read_embeddings("cifar", "clean", "timm-cls")
    assert off.logits is None
    with pytest.raises(ValueError, match="no logits"):
        store.read_logits("cifar", "clean", "timm-cls-off")
    assert _manifest_row(config, "cifar", "timm-cls-off")["logit_dim"] == 0
    for name in store.shard_names("cifar", "clean", "timm-cls-off"):
        schema = pq.read_schema(store.path(Store.embedding_dir("cifar", "clean", "timm-cls-off"),
                                           name))
        assert "logits" not in schema.names
    np.testing.assert_allclose(off.embedding, on.embedding, rtol=1e-5, atol=1e-5)


def _imagenet_order() -> list[str]:
    """ImageNet-1k's WordNet ids in head order, read straight from timm's synset file."""
    text = resources.files("timm.data._info").joinpath("imagenet_synsets.txt").read_text()
    return [line.strip() for line in text.splitlines() if line.strip()]


def test_an_imagenet_head_maps_tiny_imagenets_200_classes_by_wordnet_id(embedded, checkpoints,
                                                                          shared_data):
    config, _ = embedded
    store = Store(config.store)
    emb = store.read_embeddings("tiny", "clean", "in1k")
    assert emb.logits is not None and emb.logits.shape == (LIMIT, 200)
    assert _manifest_row(config, "tiny", "in1k")["logit_dim"] == 200
    wnids = json.loads((shared_data / "tiny_imagenet" / "classes.json").read_text())["classes"]
    order = _imagenet_order()
    assert len(order) == 1000
    columns = [order.index(w) for w in wnids]
    net = _timm_reference(checkpoints["in1k"], 1000)
    with torch.inference_mode():
        full = net(inputs(config, "tiny", "in1k", emb.sample_id)).numpy()
    np.testing.assert_allclose(emb.logits, full[:, columns], rtol=1e-4, atol=1e-4)


@pytest.mark.timeout(240)
def test_a_required_head_that_maps_to_no_class_is_a_config_error(ray_session, shared_data,
                                                                  checkpoints, tmp_path):
    def config(name: str, model: dict) -> RunConfig:
        return parse_config({
            "store": str(tmp_path / name),
            "datasets": [{**_datasets(shared_data)[1], "limit": 8}],
            "models": [{**model, **GEOMETRY, "head": True}],
            "embed": {"batch_size": 8, "num_actors": 1, "device": "cpu"},
        })

    # its 10 classes are in its checkpoint: refused before anything runs
    early = config("early", {"id": "ten-classes", "source": "timm", "name": "resnet10t",
                             "checkpoint": checkpoints["cls10"]})
    with pytest.raises(ConfigError, match=r"dataset 'tiny', model 'ten-classes'.*10 outputs"):
        run_embed(early)
    assert Store(early.store).read_manifest().empty
    # a head whose width only its forward tells: the entry fails, then EMBED raises
    late = config("late", {"id": "seq-head", "source": "python",
                           "name": "head_factories:headed_cnn",
                           "model_kwargs": {"sequential": True}})
    with pytest.raises(ConfigError, match=r"dataset 'tiny', model 'seq-head'.*10 outputs"):
        run_embed(late)
    row = _manifest_row(late, "tiny", "seq-head")
    assert row["status"] == "failed" and "ConfigError" in row["error"]


@pytest.mark.timeout(120)
def test_a_label_map_to_no_dataset_class_exits_2_naming_dataset_and_model(shared_data,
                                                                          checkpoints, tmp_path):
    cfg = tmp_path / "bad.yaml"
    cfg.write_text(yaml.safe_dump({
        "store": str(tmp_path / "store"),
        "datasets": [{**_datasets(shared_data)[1], "limit": 8}],
        "models": [{"id": "mapped", "source": "timm", "name": "resnet10t", **GEOMETRY,
                    "checkpoint": checkpoints["cls10"],
                    "label_map": {"tiny": {"n99999999": 0}}}],
        "embed": {"device": "cpu"},
    }))
    env = {"PYTHONPATH": f"{REPO}:{REPO / 'tests'}", "PATH": "/usr/bin:/bin",
           "HF_HUB_OFFLINE": "1", "RAY_USAGE_STATS_ENABLED": "0", "ZOORANK_PROGRESS": "0"}
    done = subprocess.run([sys.executable, "-m", "zoorank", "embed", str(cfg)], env=env,
                          capture_output=True, text=True, timeout=110)
    out = done.stdout + done.stderr
    assert done.returncode == 2, out
    assert "dataset 'tiny', model 'mapped'" in out and "n99999999" in out
    assert "Traceback" not in out


@pytest.mark.timeout(240)
def test_an_imagenet_head_on_cifar_under_auto_exits_2_and_keeps_the_entries_done(
        ray_session, shared_data, checkpoints, tmp_path, capsys):
    """A real timm resnet10t with a 1000-output head, ``head`` unset, on CIFAR-10 (10 named
    classes): ``zoorank embed`` exits 2 naming the dataset, the model and both fixes; the 10-class
    model beside it is embedded and kept."""
    from zoorank.cli import main

    cfg = tmp_path / "auto.yaml"
    cfg.write_text(yaml.safe_dump({
        "store": str(tmp_path / "store"),
        "datasets": [{**_datasets(shared_data)[0], "limit": 8}],
        "models": [{"id": "in1k", "source": "timm", "name": "resnet10t", **GEOMETRY,
                    "checkpoint": checkpoints["in1k"]},
                   {"id": "ten", "source": "timm", "name": "resnet10t", **GEOMETRY,
                    "checkpoint": checkpoints["cls10"]}],
        "embed": {"device": "cpu", "batch_size": 8, "num_actors": 1},
    }))
    assert main(["embed", str(cfg)]) == 2
    err = capsys.readouterr().err
    assert "dataset 'cifar', model 'in1k': the head has 1000 outputs" in err
    assert "label_map" in err and "head: false" in err and "Traceback" not in err
    m = Store(str(tmp_path / "store")).read_manifest()
    assert dict(zip(m["model_id"], m["status"])) == {"in1k": "failed", "ten": "done"}
    assert int(m.loc[m["model_id"] == "ten", "logit_dim"].iloc[0]) == 10


# -- label spaces (pure) ---------------------------------------------------------------------------
CLASSES = ("cat", "dog", "bird")


def test_identity_when_counts_agree_or_the_dataset_has_no_classes():
    assert head_columns(LabelSpace.of("d", CLASSES, None, False), 3, "m").tolist() == [0, 1, 2]
    assert head_columns(LabelSpace.of("d", None, None, True), 5, "m").tolist() == [0, 1, 2, 3, 4]


def test_a_configured_map_by_name_or_index_orders_outputs_by_class():
    space = LabelSpace.of("d", CLASSES, {"dog": 7, "cat": 2, 2: 0}, False)
    assert head_columns(space, 8, "m").tolist() == [2, 7, 0]


@pytest.mark.parametrize(("mapping", "outputs", "message"), [
    ({"cat": 0, "dog": 1}, 3, "unmapped: \\['bird'\\]"),
    ({"cat": 0, "dog": 1, "bird": 1}, 3, "several classes to head output"),
    ({"cat": 0, "dog": 1, "bird": 5}, 3, "output\\(s\\) \\[5\\].*3 outputs"),
    ({"cat": 0, "dog": 1, "bird": 2, "fish": 3}, 4, "'fish', which is no class"),
    ("imagenet", 1000, "not ImageNet-1k WordNet ids"),
])
def test_a_map_that_does_not_fit_is_a_config_error_naming_dataset_and_model(mapping, outputs,
                                                                            message):
    with pytest.raises(ConfigError, match=f"dataset 'd', model 'm': .*{message}"):
        head_columns(LabelSpace.of("d", CLASSES, mapping, False), outputs, "m")


def test_a_head_that_does_not_line_up_is_a_config_error_under_auto_as_when_required():
    for required in (False, True):
        with pytest.raises(ConfigError, match="dataset 'd', model 'm': the head has 10 outputs.*"
                           "label_map.*head: false"):
            head_columns(LabelSpace.of("d", CLASSES, None, required), 10, "m")
    # 1000 outputs on classes that are not all WordNet ids: no built-in map applies
    with pytest.raises(ConfigError, match="the head has 1000 outputs, which map to none of the "
                       "dataset's 4 classes"):
        head_columns(LabelSpace.of("d", (*CLASSES, "n01443537"), None, False), 1000, "m")


def test_heads_and_label_maps_are_in_the_entry_fingerprint_and_off_keeps_the_old_one(
        shared_data, checkpoints, tmp_path):
    from zoorank.catalog import dataset_selection, entry_fingerprint

    def fingerprints(embed: dict | None = None, **model) -> tuple[dict, object]:
        config = RunConfig.model_validate({
            "store": str(tmp_path / "store"), "datasets": [_datasets(shared_data)[0]],
            "models": [{"id": "m", "source": "timm", "name": "resnet10t",
                        "checkpoint": checkpoints["cls10"], **model}],
            "embed": {"device": "cpu", **(embed or {})}})
        catalog = build_catalog(config)
        return {e.key: e.fingerprint for e in catalog.plan_entries("fp32")}, catalog

    on, catalog = fingerprints()
    off, _ = fingerprints(head=False)
    globally_off, _ = fingerprints(embed={"heads": False})
    mapped, _ = fingerprints(label_map={"cifar": {str(i): 9 - i for i in range(10)}})
    assert on != off and off == globally_off and mapped != on
    (entry,) = catalog.plan_entries("fp32")
    index = catalog.indexes["cifar"]
    spec = catalog.config.datasets[0]
    headless = entry_fingerprint(entry.model, dataset_selection(spec, index), entry.view,
                                 catalog.config.seed, "fp32")
    assert off[entry.key] == headless  # heads off: the fingerprint of stores before heads


def test_config_rejects_unknown_head_keys_and_label_maps_of_unknown_datasets(tmp_path):
    base = {"store": str(tmp_path / "s"), "datasets": [{"name": "d", "source": "sklearn_digits"}]}
    with pytest.raises(Exception, match="heads_on"):
        RunConfig.model_validate({**base, "models": [{"source": "timm", "name": "resnet10t"}],
                                  "embed": {"heads_on": True}})
    config = RunConfig.model_validate({**base, "models": [
        {"source": "timm", "name": "resnet10t", "label_map": {"other": "imagenet"}}]})
    with pytest.raises(ConfigError, match="label_map: unknown dataset.*other"):
        resolve_models(config)


# -- sources other than timm (load_model directly; no Ray) -----------------------------------------
def _resolve(tmp_path, model: dict):
    config = RunConfig.model_validate({"store": str(tmp_path / "s"), "models": [model],
                                       "datasets": [{"name": "d", "source": "sklearn_digits"}]})
    (resolved,) = resolve_models(config)
    return resolved


def test_a_transformers_image_classifier_gives_its_logits_and_its_base_models_features(tmp_path):
    from transformers import ViTConfig, ViTForImageClassification

    from zoorank.zoo import load_model
    from zoorank.zoo.inspect import head_classes

    config = ViTConfig(hidden_size=32, num_hidden_layers=2, num_attention_heads=2,
                       intermediate_size=64, image_size=32, patch_size=8, num_labels=5)
    torch.manual_seed(5)
    reference = ViTForImageClassification(config).eval()
    reference.save_pretrained(tmp_path / "vit")
    x = torch.randn(3, 3, 32, 32, generator=torch.Generator().manual_seed(3))
    with torch.no_grad():
        out = reference(pixel_values=x, output_hidden_states=False)
        hidden = reference.vit(pixel_values=x).last_hidden_state
    resolved = _resolve(tmp_path, {"id": "vit", "source": "transformers", "name": str(tmp_path / "vit")})
    assert head_classes(resolved) == ("transformers *ForImageClassification", 5)
    with torch.no_grad():
        feats, logits = load_model(resolved).features_and_logits(x)
    torch.testing.assert_close(logits, out.logits, rtol=1e-5, atol=1e-5)
    torch.testing.assert_close(feats, hidden[:, 0], rtol=1e-5, atol=1e-5)
    off = _resolve(tmp_path, {"id": "vit", "source": "transformers", "name": str(tmp_path / "vit"),
                              "head": False})
    with torch.no_grad():
        feats_off, none = load_model(off).features_and_logits(x)
    assert none is None
    torch.testing.assert_close(feats_off, feats, rtol=1e-5, atol=1e-5)


class _Scripted(torch.nn.Module):
    def __init__(self) -> None:
        super().__init__()
        self.body = torch.nn.Conv2d(3, 6, 3)
        self.fc = torch.nn.Linear(6, 4)

    def forward(self, x: torch.Tensor) -> tuple[torch.Tensor, torch.Tensor]:
        f = self.body(x).mean(dim=(2, 3))
        return f, self.fc(f)


def test_a_torchscript_head_is_its_declared_features_logits_output(tmp_path):
    from zoorank.zoo import load_model

    torch.manual_seed(0)
    module = _Scripted().eval()
    torch.jit.script(module).save(str(tmp_path / "m.pt"))
    x = torch.randn(2, 3, 16, 16, generator=torch.Generator().manual_seed(1))
    spec = {"id": "ts", "source": "torchscript", "name": str(tmp_path / "m.pt"),
            "trust_checkpoint": True}
    with torch.no_grad():
        want_f, want_l = module(x)
        feats, logits = load_model(_resolve(tmp_path, {**spec, "head": True})).features_and_logits(x)
        _, undeclared = load_model(_resolve(tmp_path, spec)).features_and_logits(x)
    torch.testing.assert_close(feats, want_f)
    torch.testing.assert_close(logits, want_l)
    assert undeclared is None  # torchscript: no head unless declared


def test_a_headless_timm_model_from_a_python_factory_has_no_head(tmp_path):
    from zoorank.zoo import load_model
    from zoorank.zoo.inspect import head_classes

    resolved = _resolve(tmp_path, {"id": "bb", "source": "python",
                                   "name": "zoorank.tune.models:timm_backbone",
                                   "model_kwargs": {"name": "resnet10t"}})
    net = load_model(resolved)
    assert net.head is None and head_classes(resolved)[1] == 0
    x = torch.randn(2, 3, 32, 32, generator=torch.Generator().manual_seed(2))
    with torch.no_grad():
        feats, logits = net.features_and_logits(x)
        assert logits is None
        torch.testing.assert_close(feats, net.model(x))  # its pooled features, as before heads


@pytest.mark.timeout(200)
def test_zoo_and_inspect_say_whether_a_head_was_found_and_its_classes(checkpoints, tmp_path):
    timm_spec = {"source": "timm", "name": "resnet10t", "checkpoint": checkpoints["cls10"]}
    cfg = tmp_path / "zoo.yaml"
    cfg.write_text(yaml.safe_dump({
        "store": str(tmp_path / "store"),
        "datasets": [{"name": "d", "source": "sklearn_digits"}],
        "models": [{"id": "cls", **timm_spec}, {"id": "off", **timm_spec, "head": False},
                   {"id": "init", "source": "timm", "name": "resnet10t"},
                   {"id": "py", "source": "python", "name": "head_factories:headed_cnn",
                    "model_kwargs": {"classes": 7}},
                   {"id": "tv", "source": "python", "name": "torchvision.models:resnet18",
                    "model_kwargs": {"num_classes": 10, "weights": None}, "input_size": 32},
                   {"id": "meth", "source": "python", "name": "head_layouts:method_head"},
                   {"id": "named", "source": "python", "name": "head_layouts:sequential_classifier",
                    "head": "classifier.1", "model_kwargs": {"classes": 5}},
                   {"id": "none", "source": "python", "name": "head_layouts:first_layer_fc",
                    "input_size": 16}],
    }))
    env = {"PYTHONPATH": f"{REPO}:{REPO / 'tests'}", "PATH": "/usr/bin:/bin", "HF_HUB_OFFLINE": "1"}

    def zoorank(*args: str) -> str:
        done = subprocess.run([sys.executable, "-m", "zoorank", *args], env=env,
                              capture_output=True, text=True, timeout=150)
        assert done.returncode == 0, done.stdout + done.stderr
        return done.stdout

    heads, current = {}, None
    for line in zoorank("zoo", str(cfg)).splitlines():
        if not line.startswith(" "):
            current = line
        elif line.startswith("  head: "):
            heads[current] = line.removeprefix("  head: ")
    assert heads == {"cls": "timm forward_head, 10 classes", "off": "off (head: false)",
                     "init": "none (seeded random init: no trained head)",
                     "py": "python: head (found), 7 classes",
                     "tv": "python: fc (found), 10 classes",
                     "meth": "python: head() method (found), classes known after a forward",
                     # the named Linear's own width (12), not the model's output's (5)
                     "named": "python: classifier.1 (named by head:), 12 classes",
                     "none": "python: none found (no forward_head, head, fc, classifier or heads); "
                             "its Linear submodules, last first: out (10 outputs), fc (32 outputs)"}
    assert "classifier head: fc.weight → 10 classes" in zoorank("inspect", checkpoints["cls10"])
    uva = REPO.parent / "shared" / "zoos" / "uva_cifar10" / "classifiers" / "GoogleNet.ckpt"
    if uva.is_file():  # a classifier not named fc/head/classifier: the last 2-D weight, named
        assert ("the last 2-D weight is model.output_net.2.weight (10 rows): if it is the "
                "classifier, a python model names it with head: output_net.2") in zoorank(
                    "inspect", str(uva))
