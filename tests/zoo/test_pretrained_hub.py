"""``pretrained: true`` and transformers hub ids from a local Hugging Face cache, offline.

The cache is built in the test with the hub's real layout (blobs, ``snapshots/REV`` symlinks,
``refs/main``) holding seeded random weights; the reference is the same weights given as a file.
"""

from __future__ import annotations

import hashlib

import pytest
import torch
from zoo_helpers import (
    ARCH,
    TAG,
    add_to_cache,
    features,
    hub_cache,
    resolve,
    seeded_model,
    timm_repo_files,
)

from zoorank.errors import ConfigError

REV = "0" * 39 + "1"
X = torch.randn(2, 3, 64, 64, generator=torch.Generator().manual_seed(3))


@pytest.fixture
def cache(tmp_path, monkeypatch):
    cache = hub_cache(monkeypatch, tmp_path)
    model = seeded_model(11)  # with its 1000-class head, as the hub holds it
    snapshot = add_to_cache(cache, f"timm/{TAG}", timm_repo_files(model, ARCH, "r160_in1k"), REV)
    return cache, snapshot


def test_pretrained_embeds_exactly_like_the_same_weights_given_as_a_file(cache):
    _, snapshot = cache
    weights = snapshot / "model.safetensors"
    pretrained, hf_hub, from_file = resolve(
        {"source": "timm", "name": TAG, "pretrained": True},
        {"id": "hub", "source": "timm", "name": f"hf-hub:timm/{TAG}", "pretrained": True},
        {"id": "file", "source": "timm", "name": TAG, "checkpoint": str(weights)},
    )
    assert pretrained.model_id == TAG
    assert pretrained.weights_revision == f"timm/{TAG}@{REV}"
    # timm's own data config for the tag: 160 px, bilinear, crop 0.95, mean/std 0.5
    assert (pretrained.geometry.input_size, pretrained.geometry.interpolation,
            pretrained.geometry.crop_pct) == (160, "bilinear", 0.95)
    assert pretrained.normalization.mean == (0.5, 0.5, 0.5)
    reference = features(from_file, X)
    assert torch.equal(features(pretrained, X), reference)
    assert torch.equal(features(hf_hub, X), reference)
    # the file's bytes are in the fingerprint (with the revision), not only the name
    file_digest = hashlib.sha256(weights.read_bytes()).hexdigest()
    assert pretrained.checkpoint_digest == hashlib.sha256(
        f"timm/{TAG}@{REV}:model.safetensors:{file_digest}".encode()).hexdigest()


def test_fingerprint_follows_the_cached_revision(cache):
    cache_dir, snapshot = cache
    (before,) = resolve({"source": "timm", "name": TAG, "pretrained": True})
    add_to_cache(cache_dir, f"timm/{TAG}", timm_repo_files(seeded_model(11), ARCH, "r160_in1k"),
                 "f" * 40)  # same bytes, a new revision that refs/main now points at
    (after,) = resolve({"source": "timm", "name": TAG, "pretrained": True})
    assert after.weights_revision.endswith("@" + "f" * 40)
    assert after.fingerprint != before.fingerprint


def test_name_glob_lists_every_cached_model_with_weights(cache):
    cache_dir, _ = cache
    add_to_cache(cache_dir, "timm/test_vit.r160_in1k",
                 timm_repo_files(seeded_model(2, "test_vit"), "test_vit", "r160_in1k"), REV)
    # a repo without weights (only its config was fetched) is not a model to rank
    add_to_cache(cache_dir, "timm/test_convnext.r160_in1k", {"config.json": b"{}"}, REV)
    models = resolve({"source": "timm", "name": "test_*", "pretrained": True})
    assert [m.model_id for m in models] == [TAG, "test_vit.r160_in1k"]
    (vit,) = resolve({"id": "z", "source": "timm", "name": "test_v*", "pretrained": True})
    assert vit.model_id == "z-test_vit.r160_in1k" and vit.spec.name == "test_vit.r160_in1k"


def test_a_model_missing_from_the_cache_names_the_path_and_the_fetch_command(cache):
    cache_dir, _ = cache
    with pytest.raises(ConfigError) as err:
        resolve({"source": "timm", "name": "resnet50.a1_in1k", "pretrained": True})
    text = str(err.value)
    assert str(cache_dir / "models--timm--resnet50.a1_in1k") in text
    assert "hf download timm/resnet50.a1_in1k" in text
    with pytest.raises(ConfigError, match=r"no cached timm model matches 'convnext\*'.*hf download"):
        resolve({"source": "timm", "name": "convnext*", "pretrained": True})


def test_transformers_hub_id_resolves_from_the_cache_like_its_directory(tmp_path, monkeypatch):
    from transformers import ViTConfig, ViTModel

    cache = hub_cache(monkeypatch, tmp_path)
    torch.manual_seed(0)
    vit = ViTModel(ViTConfig(hidden_size=32, num_hidden_layers=2, num_attention_heads=2,
                             intermediate_size=64, image_size=32, patch_size=8))
    directory = tmp_path / "vit"
    vit.save_pretrained(directory)
    files = {p.name: p.read_bytes() for p in directory.iterdir()}
    add_to_cache(cache, "org/tiny-vit", files, REV)

    # resolved apart: in one zoo the two identical networks would be one model and its duplicate
    (by_id,) = resolve({"id": "hub", "source": "transformers", "name": "org/tiny-vit"})
    (by_dir,) = resolve({"id": "dir", "source": "transformers", "name": str(directory)})
    assert by_id.fingerprint == by_dir.fingerprint
    x = torch.randn(2, 3, 32, 32, generator=torch.Generator().manual_seed(0))
    assert torch.equal(features(by_id, x), features(by_dir, x))
    with pytest.raises(ConfigError, match=r"models--org--other.*hf download org/other"):
        resolve({"id": "m", "source": "transformers", "name": "org/other"})


def test_transformers_id_pinned_at_a_revision_loads_that_revision(tmp_path, monkeypatch):
    from transformers import ViTConfig, ViTModel

    cache = hub_cache(monkeypatch, tmp_path)
    snapshots = {}
    for seed, rev in ((1, "a" * 40), (2, "b" * 40)):  # refs/main ends at the last one, "b"
        torch.manual_seed(seed)
        vit = ViTModel(ViTConfig(hidden_size=32, num_hidden_layers=2, num_attention_heads=2,
                                 intermediate_size=64, image_size=32, patch_size=8))
        directory = tmp_path / f"vit-{rev[0]}"
        vit.save_pretrained(directory)
        add_to_cache(cache, "org/tiny-vit", {p.name: p.read_bytes() for p in directory.iterdir()},
                     rev)
        snapshots[rev[0]] = directory

    pinned, main = resolve(
        {"id": "pinned", "source": "transformers", "name": "org/tiny-vit@" + "a" * 40},
        {"id": "main", "source": "transformers", "name": "org/tiny-vit"})
    # apart: in one zoo the snapshot's directory would be the pinned model's duplicate
    (by_dir,) = resolve({"id": "dir", "source": "transformers", "name": str(snapshots["a"])})
    x = torch.randn(2, 3, 32, 32, generator=torch.Generator().manual_seed(0))
    assert pinned.fingerprint == by_dir.fingerprint != main.fingerprint
    assert torch.equal(features(pinned, x), features(by_dir, x))
    assert not torch.equal(features(pinned, x), features(main, x))
