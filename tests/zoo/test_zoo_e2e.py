"""The issue's "done when", through the real EMBED stage on the session's local Ray.

One config: a cached pretrained timm model, a Lightning checkpoint with ``state_dict_prefix``, a
payload pickle (done, done, failed; the payload never runs), a CIFAR-sized python model at its
native 32 px (the exact unresampled pixels), and per-model datasets.
"""

from __future__ import annotations

import io
import math

import numpy as np
import pytest
import torch
from PIL import Image
from test_checkpoint_layouts import Payload, lightning_checkpoint
from zoo_helpers import (
    ARCH,
    TAG,
    add_to_cache,
    backbone_state,
    reference_features,
    seeded_model,
    timm_repo_files,
)

from zoorank.config.loading import parse_config
from zoorank.data import load_samples
from zoorank.embed import run_embed
from zoorank.store import Store
from zoorank.zoo import load_model, resolve_models

CIFAR_MEAN = (0.4914, 0.4822, 0.4465)
CIFAR_STD = (0.2470, 0.2435, 0.2616)


@pytest.fixture(scope="module")
def run(ray_session, shared_data, tmp_path_factory):
    root = tmp_path_factory.mktemp("zoo-e2e")
    cache = root / "hf" / "hub"
    add_to_cache(cache, f"timm/{TAG}", timm_repo_files(seeded_model(11), ARCH, "r160_in1k"),
                 "a" * 40)
    state = backbone_state(seed=4)
    torch.save(lightning_checkpoint(state), root / "last.ckpt")
    evil = lightning_checkpoint(backbone_state(seed=0))
    evil["hyper_parameters"]["callback"] = Payload(str(root / "pwned"))
    torch.save(evil, root / "evil.ckpt")
    config = parse_config({
        "store": str(root / "store"),
        "datasets": [
            {"name": "cifar", "source": "parquet", "label_column": "label", "limit": 64,
             "path": str(shared_data / "cifar10" / "test.parquet")},
            {"name": "digits", "source": "sklearn_digits", "limit": 32},
        ],
        "models": [
            # its ImageNet-1k head maps to neither dataset's classes: features only
            {"source": "timm", "name": TAG, "pretrained": True, "input_size": 32, "head": False},
            {"id": "lightning", "source": "timm", "name": ARCH, "input_size": 32,
             "checkpoint": str(root / "last.ckpt"), "state_dict_prefix": "lightning"},
            {"id": "evil", "source": "timm", "name": ARCH, "input_size": 32,
             "checkpoint": str(root / "evil.ckpt"), "state_dict_prefix": "lightning"},
            {"id": "pixels", "source": "python", "name": "zoo_factories:pixels",
             "input_size": 32, "mean": list(CIFAR_MEAN), "std": list(CIFAR_STD),
             "datasets": ["cifar"]},
        ],
        "embed": {"batch_size": 32, "num_actors": 1},
    })
    with pytest.MonkeyPatch.context() as env:
        env.setenv("HF_HUB_CACHE", str(cache))  # the driver resolves against this cache
        rows = run_embed(config)
        yield root, config, rows, state


def _status(rows, dataset: str) -> dict[str, str]:
    return {r["model_id"]: r["status"] for r in rows.to_dict("records") if r["dataset"] == dataset}


@pytest.mark.slow
@pytest.mark.timeout(300)
def test_pretrained_and_lightning_are_done_and_the_payload_failed_without_running(run):
    root, _, rows, _ = run
    assert _status(rows, "digits") == {TAG: "done", "lightning": "done", "evil": "failed"}
    evil = rows[(rows.model_id == "evil") & (rows.dataset == "digits")].iloc[0]
    assert "unsafe pickle refused" in evil["error"] and "posix.system" in evil["error"]
    assert not (root / "pwned").exists()


@pytest.mark.slow
@pytest.mark.timeout(300)
def test_models_run_only_on_their_datasets(run):
    _, _, rows, _ = run
    assert set(_status(rows, "cifar")) == {TAG, "lightning", "evil", "pixels"}
    assert "pixels" not in _status(rows, "digits")


@pytest.mark.slow
@pytest.mark.timeout(300)
def test_lightning_backbone_embeds_like_its_weights(run):
    _, config, _, state = run
    store = Store(config.store)
    emb = store.read_embeddings("cifar", "clean", "lightning")
    (spec,) = [d for d in config.datasets if d.name == "cifar"]
    table = load_samples(spec, config.seed)
    x = _normalized(table, emb.sample_id, (0.5, 0.5, 0.5), (0.5, 0.5, 0.5))  # timm's tag config
    np.testing.assert_allclose(emb.embedding, reference_features(state, x).numpy(),
                               rtol=1e-4, atol=1e-5)


@pytest.mark.slow
@pytest.mark.timeout(300)
def test_a_cifar_model_at_native_32px_sees_the_exact_pixels(run):
    _, config, _, _ = run
    emb = Store(config.store).read_embeddings("cifar", "clean", "pixels")
    (spec,) = [d for d in config.datasets if d.name == "cifar"]
    table = load_samples(spec, config.seed)
    x = _normalized(table, emb.sample_id, CIFAR_MEAN, CIFAR_STD)
    assert emb.embedding.shape == (64, 3 * 32 * 32)
    np.testing.assert_allclose(emb.embedding, x.reshape(64, -1).numpy(), rtol=0, atol=1e-6)
    # timm's default crop_pct 0.875 (the old default) would have zoomed every image
    (pixels,) = [m for m in resolve_models(config) if m.model_id == "pixels"]
    assert pixels.geometry.crop_pct == 1.0
    with torch.no_grad():
        assert torch.equal(load_model(pixels)(x[:2]), x[:2].reshape(2, -1))


def _normalized(table, sample_ids, mean, std) -> torch.Tensor:
    """The images decoded by PIL in this process, as float CHW, normalised: no resampling."""
    positions = np.searchsorted(table.sample_id, sample_ids)
    images = []
    for p in positions:
        source = table.images[p]
        data = source["bytes"] if isinstance(source, dict) else source
        images.append(np.asarray(Image.open(io.BytesIO(data)).convert("RGB")))
    x = torch.from_numpy(np.stack(images)).permute(0, 3, 1, 2).float().div_(255.0)
    return (x - torch.tensor(mean).view(1, 3, 1, 1)) / torch.tensor(std).view(1, 3, 1, 1)


@pytest.mark.slow
@pytest.mark.timeout(300)
def test_a_mixed_dataset_zoo_ranks_each_model_on_its_own_datasets(run):
    from zoorank.rank import run_rank
    from zoorank.score import run_score

    _, config, _, _ = run
    config = config.model_copy(update={"metrics": ["rankme", "uniformity"]})
    run_score(config)
    board = run_rank(config, show=False).set_index("model_id")
    assert set(board.index) == {TAG, "lightning", "pixels"}
    assert board["rank"].notna().all()
    # pixels is ranked on cifar only: no value (and no rank) on digits, aggregated over cifar
    assert math.isnan(board.loc["pixels", "digits/rankme"])
    assert board.loc["pixels", "rank/cifar"] == board.loc["pixels", "aggregate"]
    failed = Store(config.store).read_frame("failed")
    assert set(failed["model_id"]) == {"evil"}
