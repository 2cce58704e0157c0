"""Helpers of the zoo tests: a seeded tiny timm backbone, resolving, and a hand-built hub cache.

Reference features come from timm directly (``load_state_dict(strict=True)`` on a headless model),
never through zoorank.
"""

from __future__ import annotations

import hashlib
import json
import os
from pathlib import Path

import timm
import torch
from safetensors.torch import save_file

from zoorank.config.loading import parse_config
from zoorank.zoo import load_model, resolve_models

ARCH = "test_resnet"  # 0.4 M parameters; timm has the pretrained tag test_resnet.r160_in1k
TAG = "test_resnet.r160_in1k"


def seeded_model(seed: int, arch: str = ARCH, **kwargs) -> torch.nn.Module:
    torch.manual_seed(seed)
    return timm.create_model(arch, pretrained=False, **kwargs).eval()


def backbone_state(seed: int) -> dict[str, torch.Tensor]:
    """The state dict of a seeded headless ``test_resnet`` (what a backbone prefix selects)."""
    return {k: v.clone() for k, v in seeded_model(seed, num_classes=0).state_dict().items()}


def reference_features(state: dict[str, torch.Tensor], x: torch.Tensor) -> torch.Tensor:
    model = timm.create_model(ARCH, pretrained=False, num_classes=0).eval()
    model.load_state_dict(state, strict=True)
    with torch.no_grad():
        return model(x)


def resolve(*models: dict, store: Path | str | None = None, datasets=("d",)) -> list:
    data = {"datasets": [{"name": n, "source": "sklearn_digits"} for n in datasets],
            "models": list(models)}
    if store is not None:
        data["store"] = str(store)
    return resolve_models(parse_config(data))


def features(resolved, x: torch.Tensor) -> torch.Tensor:
    with torch.no_grad():
        return load_model(resolved)(x)


def hub_cache(monkeypatch, root: Path) -> Path:
    """Point this test's Hugging Face cache at ``root/hf/hub`` (created); returns it."""
    cache = root / "hf" / "hub"
    cache.mkdir(parents=True, exist_ok=True)
    monkeypatch.setenv("HF_HOME", str(root / "hf"))
    monkeypatch.setenv("HF_HUB_CACHE", str(cache))
    return cache


def add_to_cache(cache: Path, repo_id: str, files: dict[str, bytes], revision: str) -> Path:
    """The hub's layout: blobs by content hash, ``snapshots/REV/<file>`` symlinks, ``refs/main``.

    Returns the snapshot directory.
    """
    folder = cache / ("models--" + repo_id.replace("/", "--"))
    snapshot = folder / "snapshots" / revision
    (folder / "blobs").mkdir(parents=True, exist_ok=True)
    snapshot.mkdir(parents=True, exist_ok=True)
    for name, data in files.items():
        blob = folder / "blobs" / hashlib.sha256(data).hexdigest()
        blob.write_bytes(data)
        link = snapshot / name
        link.parent.mkdir(parents=True, exist_ok=True)
        if link.exists() or link.is_symlink():
            link.unlink()
        link.symlink_to(os.path.relpath(blob, link.parent))
    (folder / "refs").mkdir(exist_ok=True)
    (folder / "refs" / "main").write_text(revision)
    return snapshot


def timm_repo_files(model: torch.nn.Module, arch: str, tag: str) -> dict[str, bytes]:
    """``model.safetensors`` + timm's ``config.json`` for a model with its classifier."""
    from safetensors.torch import save

    cfg = timm.models.get_pretrained_cfg(f"{arch}.{tag}").to_dict()
    config = {"architecture": arch, "num_classes": model.num_classes,
              "num_features": model.num_features, "pretrained_cfg": cfg}
    state = {k: v.contiguous() for k, v in model.state_dict().items()}
    return {"model.safetensors": save(state), "config.json": json.dumps(config).encode()}


def save_safetensors(state: dict[str, torch.Tensor], path: Path) -> Path:
    path.parent.mkdir(parents=True, exist_ok=True)
    save_file({k: v.contiguous() for k, v in state.items()}, str(path))
    return path
