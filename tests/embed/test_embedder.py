"""The embedding work of a chunk (zoorank.embed.embedder): bounded forwards, precision decided where the
forward runs, a clear error when CPU memory runs out, library versions per entry."""

from __future__ import annotations

import json

import hostile_factories
import numpy as np
import pandas as pd
import pytest

from zoorank.catalog import planned_precision
from zoorank.config import EmbedOptions
from zoorank.config.loading import parse_config
from zoorank.console.embed_progress import mixed_versions
from zoorank.embed.embedder import ChunkEmbedder, library_versions, resolve_precision
from zoorank.zoo import resolve_models

GEOMETRY = {"input_size": 8, "interpolation": "bilinear", "crop_pct": 1.0}


def _models(*names: str):
    config = parse_config({
        "datasets": [{"name": "d", "source": "sklearn_digits"}],
        "models": [{"id": n, "source": "python", "name": f"hostile_factories:{n}", **GEOMETRY}
                   for n in names],
    })
    return resolve_models(config)


def _batch(n: int, seed: int = 0) -> dict[str, np.ndarray]:
    rng = np.random.default_rng(seed)
    return {"image": rng.integers(0, 256, (n, 8, 8, 3), dtype=np.uint8),
            "view": np.array(["clean"] * n), "bad": np.zeros(n, bool)}


def test_batch_size_bounds_every_forward_and_keeps_the_features():
    (model,) = _models("batch_recorder")
    batch = _batch(37)
    hostile_factories.SEEN_BATCHES.clear()
    small = ChunkEmbedder([model], batch_size=8).embed(batch, {"batch_recorder": {"clean"}})
    assert hostile_factories.SEEN_BATCHES == [8, 8, 8, 8, 5]
    hostile_factories.SEEN_BATCHES.clear()
    whole = ChunkEmbedder([model], batch_size=512).embed(batch, {"batch_recorder": {"clean"}})
    assert hostile_factories.SEEN_BATCHES == [37]
    feats = small[("clean", "batch_recorder")][0]
    np.testing.assert_allclose(feats, whole[("clean", "batch_recorder")][0], rtol=1e-6)
    # independently: the mean colour of each normalised image
    x = batch["image"].astype(np.float64) / 255.0
    mean, std = np.array(model.normalization.mean), np.array(model.normalization.std)
    np.testing.assert_allclose(feats, ((x - mean) / std).mean(axis=(1, 2)), atol=1e-5)


def test_cpu_memory_exhaustion_fails_the_model_with_a_clear_reason():
    greedy, ok = _models("greedy", "batch_recorder")
    embedder = ChunkEmbedder([greedy, ok], batch_size=4)
    out = embedder.embed(_batch(6), {"greedy": {"clean"}, "batch_recorder": {"clean"}})
    assert ("clean", "batch_recorder") in out and ("clean", "greedy") not in out
    assert "out of CPU memory" in embedder.errors["greedy"]
    assert "embed.batch_size (now 4)" in embedder.errors["greedy"]


def test_auto_precision_is_decided_by_the_worker_not_the_driver():
    assert resolve_precision("auto", "cpu") == "fp32"
    assert resolve_precision("fp16", "cuda") == "fp16"
    # the fingerprint's precision: configured, never from this process's GPU
    assert planned_precision(EmbedOptions(device="auto", precision="auto")) == "auto"
    assert planned_precision(EmbedOptions(device="cuda", precision="auto")) == "auto"
    assert planned_precision(EmbedOptions(device="cpu", precision="auto")) == "fp32"
    assert planned_precision(EmbedOptions(device="auto", precision="auto"), "cpu") == "fp32"
    assert planned_precision(EmbedOptions(precision="bf16")) == "bf16"
    (model,) = _models("batch_recorder")
    assert ChunkEmbedder([model], precision="auto").precision == "fp32"


def test_library_versions_are_recorded_and_a_mixed_store_is_named():
    import PIL
    import torch

    versions = json.loads(library_versions())
    assert versions["torch"].split("+")[0] == torch.__version__.split("+")[0]
    assert versions["Pillow"] == PIL.__version__
    other = json.dumps({**versions, "torch": "1.0.0"}, sort_keys=True)
    rows = pd.DataFrame({"status": ["done", "done", "failed"],
                         "versions": [library_versions(), other, json.dumps({"timm": "0"})]})
    text = mixed_versions(rows)
    assert text is not None and "torch" in text and "1.0.0" in text and "timm" not in text
    assert mixed_versions(rows.iloc[[0, 2]]) is None


@pytest.mark.parametrize("n", [1, 3])
def test_small_batches_need_no_split(n):
    (model,) = _models("batch_recorder")
    hostile_factories.SEEN_BATCHES.clear()
    ChunkEmbedder([model], batch_size=8).embed(_batch(n), {"batch_recorder": {"clean"}})
    assert hostile_factories.SEEN_BATCHES == [n]
