"""Model sources as a registry (zoorank.zoo.sources): a source defined in a module of its own is
resolved and built with no other edit, and no code outside the registry branches on a source's
name."""

from __future__ import annotations

import importlib
import re
import sys
import textwrap
from pathlib import Path

import pytest
import torch

import zoorank
from zoorank.config import ModelSpec, RunConfig
from zoorank.config.loading import parse_config
from zoorank.config.model_spec import MODEL_SOURCES
from zoorank.errors import ConfigError
from zoorank.zoo import sources
from zoorank.zoo.build import load_model
from zoorank.zoo.memory import count_parameters, estimate_model_bytes
from zoorank.zoo.resolve import resolve_models

_PLUGIN = '''
from torch import nn

from zoorank.zoo.sources import ModelSource, register


class ChannelMeans(nn.Module):
    """(B, 3, H, W) -> (B, 3): each channel's mean, a closed form the test recomputes."""

    def forward(self, x):
        return x.mean(dim=(2, 3))


@register
class MeansSource(ModelSource):
    name = "{name}"

    def build(self, spec, hub_cache, state):
        return ChannelMeans(), {{}}, None

    def meta_model(self, name, kwargs_json):
        return ChannelMeans()
'''


@pytest.fixture
def plugin_source(tmp_path: Path, monkeypatch: pytest.MonkeyPatch):
    """A source registered by importing a module written here (removed from the registry after)."""
    name = "channel_means_test"
    (tmp_path / "means_source_plugin.py").write_text(textwrap.dedent(_PLUGIN.format(name=name)))
    monkeypatch.syspath_prepend(str(tmp_path))
    assert name not in MODEL_SOURCES
    importlib.import_module("means_source_plugin")
    yield name
    sources._REGISTRY.pop(name, None)
    MODEL_SOURCES.pop(name, None)
    sys.modules.pop("means_source_plugin", None)


def _config(source: str) -> dict:
    return {"datasets": [{"name": "digits", "source": "sklearn_digits"}],
            "models": [{"source": source, "name": "means", "id": "means"}]}


def test_an_unregistered_source_is_a_config_error_naming_the_field():
    with pytest.raises(ConfigError, match=r"models\[0\].*source.*unknown model source"):
        parse_config(_config("channel_means_test"), "run.yaml")


def test_a_source_in_a_module_of_its_own_resolves_and_builds(plugin_source: str):
    config = parse_config(_config(plugin_source), "run.yaml")
    assert plugin_source in RunConfig.model_json_schema()["$defs"]["ModelSpec"]["properties"][
        "source"]["enum"]
    [resolved] = resolve_models(config)
    assert resolved.model_id == "means"
    assert resolved.preprocessing_origin == "default"  # the base class's native preprocessing
    assert resolved.checkpoint_digest is None  # no checkpoint: a seeded init, no weight bytes
    extractor = load_model(resolved)
    x = torch.randn(2, 3, 8, 8, generator=torch.Generator().manual_seed(0))
    torch.testing.assert_close(extractor(x), x.mean(dim=(2, 3)))
    assert count_parameters(resolved) == 0
    assert estimate_model_bytes(resolved) == 0
    other = resolve_models(parse_config({**_config(plugin_source), "models": [
        {"source": plugin_source, "name": "other", "id": "means"}]}, "run.yaml"))[0]
    assert other.fingerprint != resolved.fingerprint  # the name is part of the fingerprint


def test_the_builtin_sources_are_the_schemas():
    assert set(sources.names()) >= {"timm", "transformers", "torchscript", "python"}
    assert set(sources.names()) == set(MODEL_SOURCES)
    assert ModelSpec(source="timm", name="resnet18").source == "timm"


#: a comparison of something named ``source`` with a quoted name (``spec.source == "timm"``,
#: ``entry.get("source") != 'python'``, ``source in ("transformers", ...)``)
_BRANCH = re.compile(r"""source\W{0,3}\s*(==|!=|\bnot\s+in\b|\bin\b)\s*[(\[{]?\s*"""
                     r"""(["'][^"']+["'](\s*,\s*)?)+""")


def _source_branches(text: str, names: list[str]) -> list[str]:
    alternatives = "|".join(map(re.escape, names))
    quoted = re.compile(rf"""["']({alternatives})["']""")
    return [line.strip() for line in text.splitlines()
            if (m := _BRANCH.search(line)) and quoted.search(m.group(0))]


def test_the_branch_detector_finds_the_shapes_it_looks_for():
    names = sources.names()
    found = _source_branches(textwrap.dedent('''
        if spec.source == "timm":
        elif spec.source in ("transformers", "torchscript"):
        if entry.get("source") != 'python' and x:
        keep = spec.source in ("sklearn_digits", "numpy")
        for col, source in ((PARAMS, "param_count"),):
    '''), names)
    assert len(found) == 3 and "sklearn_digits" not in " ".join(found)


def test_no_branch_on_a_model_sources_name_outside_the_registry():
    package = Path(zoorank.__file__).parent
    names = sources.names()
    offenders = []
    for file in sorted(package.rglob("*.py")):
        if (package / "zoo" / "sources") in file.parents:
            continue
        offenders += [f"{file.relative_to(package)}: {line}"
                      for line in _source_branches(file.read_text(), names)]
    assert not offenders, "\n".join(offenders)
