"""Heads of python models as people write them (:mod:`zoorank.zoo.heads`): torchvision's ``fc``
and ``classifier``, a ``head()`` method, a ``forward`` that returns the logits, a head named with
``head: <submodule>``, and the warning for a classifier whose head was not found.

Each model is built through zoorank (``resolve_models`` + ``load_model``, no Ray) and compared with
the same module run by hand in this process: the logits are the module's own output (its
``forward``, or its classifier applied to its features), the features are the classifier's input
computed from the module's own layers.
"""

from __future__ import annotations

from pathlib import Path

import pytest
import torch
from torch import nn

from zoorank.config import RunConfig
from zoorank.errors import ConfigError
from zoorank.zoo import load_model, resolve_models
from zoorank.zoo.heads import head_choices, head_warnings

REPO = Path(__file__).resolve().parents[2]
UVA = REPO.parent / "shared" / "zoos" / "uva_cifar10" / "classifiers"


def _resolve(tmp_path: Path, **model):
    config = RunConfig.model_validate({
        "store": str(tmp_path / "s"), "datasets": [{"name": "d", "source": "sklearn_digits"}],
        "models": [{"id": "m", "source": "python", "input_size": 32, **model}]})
    (resolved,) = resolve_models(config)
    return resolved


def _x(n: int = 3, size: int = 32) -> torch.Tensor:
    return torch.randn(n, 3, size, size, generator=torch.Generator().manual_seed(7))


def _seeded(factory, **kwargs) -> nn.Module:
    torch.manual_seed(0)  # the zoo builds a checkpoint-less model under torch seed 0
    return factory(**kwargs).eval()


def _run(resolved, x):
    net = load_model(resolved)
    with torch.no_grad():
        return net.features_and_logits(x)


# -- torchvision ----------------------------------------------------------------------------------


def test_a_torchvision_resnet_head_is_fc_with_its_pooled_input_as_features(tmp_path):
    from safetensors.torch import save_file
    from torchvision.models import resnet18

    torch.manual_seed(3)
    reference = resnet18(num_classes=10, weights=None).eval()
    save_file(reference.state_dict(), str(tmp_path / "r18.safetensors"))
    resolved = _resolve(tmp_path, name="torchvision.models:resnet18",
                        model_kwargs={"num_classes": 10, "weights": None},
                        checkpoint=str(tmp_path / "r18.safetensors"))
    assert resolved.head_search.key == "module:fc" and resolved.head_search.layout.classes == 10
    x = _x()
    feats, logits = _run(resolved, x)
    trunk = nn.Sequential(*list(reference.children())[:-1])  # everything before fc
    with torch.no_grad():
        want_feats = torch.flatten(trunk(x), 1)
        want_logits = reference(x)
    torch.testing.assert_close(feats, want_feats)
    torch.testing.assert_close(logits, want_logits)


@pytest.mark.parametrize(("factory", "path"), [("densenet121", "classifier"),
                                               ("mobilenet_v3_small", "classifier.3"),
                                               ("squeezenet1_0", "classifier")])
def test_torchvision_classifiers_heads_are_the_last_linear_of_classifier(tmp_path, factory, path):
    """DenseNet's classifier is a Linear, MobileNetV3's the last Linear of a Sequential,
    SqueezeNet's a Sequential of a 1×1 conv and a pooling whose (B, K, 1, 1) output is squeezed."""
    import torchvision.models as tvm

    size = 64 if factory == "squeezenet1_0" else 32  # SqueezeNet's stride needs > 32 px
    resolved = _resolve(tmp_path, name=f"torchvision.models:{factory}", input_size=size,
                        model_kwargs={"num_classes": 10, "weights": None})
    assert resolved.head_search.key == f"module:{path}"
    reference = _seeded(getattr(tvm, factory), num_classes=10, weights=None)
    x = _x(2, size)
    feats, logits = _run(resolved, x)
    with torch.no_grad():
        want_logits = reference(x)
        if factory == "densenet121":
            z = torch.relu(reference.features(x))
            want_feats = torch.flatten(nn.functional.adaptive_avg_pool2d(z, 1), 1)
        elif factory == "squeezenet1_0":  # the classifier's input map, averaged over space
            want_feats = reference.features(x).mean(dim=(2, 3))
        else:  # mobilenet: the input of classifier.3 is classifier[:3] of the pooled features
            pooled = torch.flatten(reference.avgpool(reference.features(x)), 1)
            want_feats = reference.classifier[:3](pooled)
    torch.testing.assert_close(logits, want_logits)
    torch.testing.assert_close(feats, want_feats)
    if factory != "squeezenet1_0":  # a Linear head maps the features to the logits
        torch.testing.assert_close(reference.get_submodule(path)(feats), logits)


# -- layouts written by hand ------------------------------------------------------------------------


#: factory → (the head's key, its features, its logits), each from the module run by hand.
LAYOUTS = {
    # head() is a method and forward returns head(trunk(x))
    "method_head": ("method:head", lambda r, x: r.trunk(x), lambda r, x: r(x)),
    # forward returns the features; head() is called apart: it takes them
    "features_then_method_head": ("method:head", lambda r, x: r(x), lambda r, x: r.head(r(x))),
    # forward returns the logits of Sequential(Dropout, Linear, ReLU, Dropout, Linear)
    "sequential_classifier": ("module:classifier.4",
                              lambda r, x: r.classifier[:4](r.features(x)), lambda r, x: r(x)),
}


@pytest.mark.parametrize("factory", sorted(LAYOUTS))
def test_hand_written_layouts_give_the_modules_own_features_and_logits(tmp_path, factory):
    import head_layouts

    key, features, logits_of = LAYOUTS[factory]
    resolved = _resolve(tmp_path, name=f"head_layouts:{factory}")
    assert resolved.head_search.key == key
    reference = _seeded(getattr(head_layouts, factory))
    x = _x()
    feats, logits = _run(resolved, x)
    with torch.no_grad():
        torch.testing.assert_close(feats, features(reference, x))
        torch.testing.assert_close(logits, logits_of(reference, x))


def _done(model_id: str, dim: int, logit_dim: int = 0, dataset: str = "cifar10") -> dict:
    """A manifest row of a done entry, as EMBED writes it."""
    return {"dataset": dataset, "model_id": model_id, "status": "done", "dim": dim,
            "logit_dim": logit_dim}


def test_an_fc_that_is_a_first_layer_is_no_head_and_the_classifier_gets_a_warning(tmp_path):
    from head_layouts import first_layer_fc

    resolved = _resolve(tmp_path, name="head_layouts:first_layer_fc", input_size=16)
    search = resolved.head_search
    assert search.layout is None and search.checked  # fc is not the last Linear: out is
    reference = _seeded(first_layer_fc)
    x = _x(size=16)
    feats, logits = _run(resolved, x)
    assert logits is None
    with torch.no_grad():
        torch.testing.assert_close(feats, reference(x))  # ranked by its output, as before
    assert head_choices([resolved]) == [
        "heads: none found (no forward_head, head, fc, classifier or heads): 1 python model(s) (m)"]
    (warning,) = head_warnings({"m": resolved}, [_done("m", 10)], {"cifar10": 10})
    assert "model m" in warning and "its output has 10 values" in warning
    assert "head: out" in warning and "head: false" in warning
    assert head_warnings({"m": resolved}, [_done("m", 10)], {"cifar10": 7}) == []


def test_a_found_head_the_forward_does_not_run_is_dropped_by_the_first_forward(tmp_path):
    from head_layouts import unused_projector

    resolved = _resolve(tmp_path, name="head_layouts:unused_projector")
    assert resolved.head_search.key == "module:head"  # found by its name ...
    net = load_model(resolved)
    reference = _seeded(unused_projector)
    x = _x()
    with torch.no_grad():
        for _ in range(2):  # ... dropped by the first forward, for good
            feats, logits = net.features_and_logits(x)
            assert logits is None
            torch.testing.assert_close(feats, reference(x))
    assert net.head_dropped == "head: it does not run in the forward"
    (warning,) = head_warnings({"m": resolved}, [_done("m", 8)], {"cifar10": 4})
    assert warning.startswith("model m: head (found) is not its classifier")
    assert "head: head.2" in warning  # its last Linear with 4 outputs
    assert head_warnings({"m": resolved}, [_done("m", 8, logit_dim=4)], {"cifar10": 4}) == []


# -- head: <name> ---------------------------------------------------------------------------------


def _uva(name: str) -> Path:
    if not UVA.is_dir():
        pytest.skip(f"third-party zoo not found at {UVA}")
    path = UVA / f"{name}.ckpt"
    assert path.is_file(), f"the zoo is at {UVA} but its checkpoint {path.name} is not"
    return path


def test_a_named_head_the_forward_does_not_run_takes_the_forwards_features(tmp_path):
    """The UvA GoogleNet's forward returns its pooled features; ``output_net.2`` is its
    classifier (``zoorank inspect`` names it)."""
    from head_layouts import uva_models

    ckpt = _uva("GoogleNet")
    spec = {"name": "head_layouts:uva_googlenet", "checkpoint": str(ckpt),
            "state_dict_prefix": "model."}
    auto = _resolve(tmp_path, **spec)
    assert auto.head_search.layout is None  # output_net is no name looked for
    # ... but the warning names it for a 10-class dataset
    (warning,) = head_warnings({"m": auto}, [_done("m", 128)], {"cifar10": 10})
    assert "its Linear output_net.2 has 10 outputs" in warning and "(head: output_net.2)" in warning
    resolved = _resolve(tmp_path, **spec, head="output_net.2")
    assert resolved.head_search.key == "module:output_net.2"
    assert resolved.head_search.layout.describe() == "output_net.2 (named by head:)"
    from zoorank.zoo.checkpoints import read_checkpoint

    reference = uva_models().googlenet().eval()
    reference.load_state_dict(read_checkpoint(str(ckpt), state_dict_prefix="model."))
    x = _x()
    feats, logits = _run(resolved, x)
    with torch.no_grad():
        torch.testing.assert_close(feats, reference(x))
        torch.testing.assert_close(logits, reference.output_net[2](reference(x)))


def test_a_head_name_that_is_no_submodule_is_a_config_error_listing_the_linears(tmp_path):
    with pytest.raises(ConfigError) as err:
        _resolve(tmp_path, name="head_layouts:sequential_classifier", head="classifer.4")
    text = str(err.value)
    assert "models[0] (m)" in text and "'classifer.4'" in text
    assert "classifier.4 (10 outputs)" in text and "classifier.1 (12 outputs)" in text
    # a conv: a submodule, but its first forward gives no (batch, classes) output
    conv = _resolve(tmp_path, name="head_layouts:method_head", head="trunk.0")
    with pytest.raises(ConfigError, match=r"model m: head: 'trunk.0' neither runs .*\(2, 8, 32, 32\)"):
        _run(conv, _x(2))
    with pytest.raises(ConfigError, match="no classifier head was found.*head: out"):
        _resolve(tmp_path, name="head_layouts:first_layer_fc", input_size=16, head=True)
    config = RunConfig.model_validate({
        "store": str(tmp_path / "s"), "datasets": [{"name": "d", "source": "sklearn_digits"}],
        "models": [{"source": "timm", "name": "resnet10t", "head": "fc"}]})
    with pytest.raises(ConfigError, match="only python models"):
        resolve_models(config)


def test_head_words_in_quotes_are_booleans_and_names_are_dotted_paths():
    from pydantic import ValidationError

    from zoorank.config import ModelSpec

    def head(value):
        return ModelSpec(id="m", source="python", name="a:b", head=value).head

    assert head("true") is True and head("False") is False and head(None) is None
    assert head("output_net.2") == "output_net.2"
    with pytest.raises(ValidationError):
        head("output net")


def test_the_chosen_layout_and_heads_on_off_are_in_the_entry_fingerprint(shared_data, tmp_path):
    from zoorank.catalog import build_catalog

    def fingerprint(**model) -> str:
        config = RunConfig.model_validate({
            "store": str(tmp_path / "store"),
            "datasets": [{"name": "c", "source": "parquet", "limit": 8,
                          "path": str(shared_data / "cifar10" / "test.parquet"),
                          "label_column": "label"}],
            "models": [{"id": "m", "source": "python", "name": "head_layouts:sequential_classifier",
                        "input_size": 32, **model}], "embed": {"device": "cpu"}})
        (entry,) = build_catalog(config).plan_entries("fp32")
        return entry.fingerprint, entry.label_space

    auto, space = fingerprint()
    assert space.layout == "module:classifier.4"
    assert space.fingerprint_part()["layout"] == "module:classifier.4"
    off, none = fingerprint(head=False)
    named, _ = fingerprint(head="classifier.4")  # the same head, asked for: a required head
    other, other_space = fingerprint(head="classifier.1")
    assert none is None and other_space.layout == "module:classifier.1"
    assert len({auto, off, named, other}) == 4
