"""Finding the family modules: a metric registered in a new module of a wing reaches SCORE's rows,
the board's candidates, the config and its schema and the generated metrics reference, with no
other edit (no import line, no contract line, no list)."""

from __future__ import annotations

import importlib.util
import json
import sys
from pathlib import Path

import numpy as np
import pytest

import zoorank.metrics
from zoorank.config import RunConfig
from zoorank.config.loading import parse_config
from zoorank.metrics import _discover, registry
from zoorank.metrics.primary import PRIMARY_PREFERENCE, default_order, primary_candidates
from zoorank.metrics.suite import label_free_suite

REPO = Path(__file__).resolve().parents[2]
NAME = "mean_squared_norm_of_rows"
FAMILY = f'''"""A family written by a test: the mean squared norm of the rows."""

import numpy as np

from zoorank.metrics.registry import register

__all__ = ["{NAME}"]


@register("{NAME}", +1, "clean", description="mean squared L2 norm of the rows (a test's metric)")
def {NAME}(Z):
    """Mean over rows of the squared L2 norm, in float64."""
    X = np.asarray(Z, dtype=np.float64)
    return float(np.einsum("ij,ij->", X, X) / X.shape[0])
'''


@pytest.fixture
def new_family(tmp_path, monkeypatch):
    """A module file in a folder added to the ``label_free`` wing's path, then discovery run again
    as importing ``zoorank.metrics`` runs it (nothing in the source tree is written)."""
    folder = tmp_path / "label_free_extra"
    folder.mkdir()
    (folder / "squared_norms.py").write_text(FAMILY)
    wing = importlib.import_module("zoorank.metrics.label_free")
    monkeypatch.setattr(wing, "__path__", [*wing.__path__, str(folder)])
    try:
        yield _discover.discover_families()
    finally:
        registry.unregister(NAME)
        sys.modules.pop("zoorank.metrics.label_free.squared_norms", None)


def test_the_families_are_every_module_of_the_wings_in_registration_order():
    found = set(zoorank.metrics.FAMILIES)
    for wing in _discover.WINGS:
        for path in (REPO / "zoorank" / "metrics" / wing).glob("[!_]*.py"):
            assert f"{wing}.{path.stem}" in found
    # the registry's order is the families' order: each family's metrics stand together
    modules = [m.function.__module__ for m in registry.REGISTRY.values()]
    firsts = list(dict.fromkeys(modules))
    expected = [f"zoorank.metrics.{f}" for f in zoorank.metrics.FAMILIES
                if f"zoorank.metrics.{f}" in firsts]
    assert firsts == expected


def test_every_registered_metric_function_is_exported_by_the_package():
    for entry in registry.REGISTRY.values():
        name = entry.function.__name__
        if not name.startswith("_"):
            assert name in zoorank.metrics.__all__ and getattr(zoorank.metrics, name) is entry.function


def test_a_metric_in_a_new_module_reaches_score_the_board_the_config_and_the_reference(
        new_family, digits):
    assert "label_free.squared_norms" in new_family
    assert NAME in registry.config_names()
    assert _discover.metric_functions()[NAME] is registry.REGISTRY[NAME].function

    # SCORE's rows: the suite SCORE's worker runs on each model's clean embeddings (real images:
    # the digits' pixels through a seeded ReLU projection), against the closed form
    images, _ = digits
    w = np.random.default_rng(0).normal(size=(64, 32))
    clean = np.maximum(images.reshape(len(images), -1) @ w, 0.0).astype(np.float32)
    rows = {r["metric"]: r for r in label_free_suite(clean, None, ["rankme", NAME])}
    row = rows[NAME]
    expected = np.mean(np.sum(clean.astype(np.float64) ** 2, axis=1))
    assert row["value"] == pytest.approx(expected, rel=1e-12)
    assert (row["n"], row["dim"]) == clean.shape and "error" not in row["params"]
    json.dumps(row["params"])  # a row SCORE can write

    # the board: it may order it (after every metric with a default rank), and a config may say so
    assert NAME in primary_candidates(["rankme", NAME])
    assert default_order(["rankme", NAME]) == ["rankme", NAME]
    assert NAME not in PRIMARY_PREFERENCE
    config = parse_config({"datasets": [{"name": "d", "source": "sklearn_digits"}],
                           "models": [{"name": "m", "id": "resnet18", "source": "timm"}],
                           "metrics": ["rankme", NAME], "rank": {"primary_metric": NAME}})
    assert config.rank.primary_metric == NAME

    # the config schema and the generated metrics reference name it
    schema = RunConfig.model_json_schema()
    assert NAME in schema["properties"]["metrics"]["description"]
    spec = importlib.util.spec_from_file_location("zoorank_docs", REPO / "docs/_hooks/zoorank_docs.py")
    hooks = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(hooks)
    line = next(r for r in hooks.metrics_reference().splitlines() if r.startswith(f"| `{NAME}` |"))
    assert "higher is better" in line and "mean squared L2 norm of the rows" in line


def test_a_metric_named_twice_by_different_functions_is_refused(new_family):
    with pytest.raises(ValueError, match="already registered"):
        registry.register(NAME, +1, "clean")(lambda Z: 0.0)
