"""Memory estimates of resolved models (for memory-bounded actor chunks)."""

from __future__ import annotations

import contextlib
import json
from functools import lru_cache
from pathlib import Path

import torch
from torch import nn

from zoorank.store import uris
from zoorank.zoo import specs
from zoorank.zoo.build import quiet_transformers, transformers_class
from zoorank.zoo.checkpoints import CheckpointError
from zoorank.zoo.resolve import ResolvedModel
from zoorank.zoo.specs import python_factory


def _state_bytes(model: nn.Module) -> int:
    return sum(t.numel() * t.element_size() for t in model.state_dict().values())


def _meta_model(source: str, name: str, kwargs_json: str) -> nn.Module:
    if source == "timm":
        return specs.timm_meta_model(name, kwargs_json)
    if source == "transformers":
        with quiet_transformers():
            cls, config = transformers_class(name)
            with torch.device("meta"):
                return cls.from_config(config)
    with torch.device("meta"):
        return python_factory(name)(**json.loads(kwargs_json))


@lru_cache(maxsize=256)
def _meta_bytes(source: str, name: str, kwargs_json: str) -> int:
    model = _meta_model(source, name, kwargs_json)
    if source == "transformers":  # loaded as float32
        return sum(t.numel() * 4 for t in model.state_dict().values())
    return _state_bytes(model)


def count_parameters(resolved: ResolvedModel) -> int | None:
    """Parameters of the (headless) network, from a meta-device build; None when it cannot be
    built without weights (torchscript, a factory that fails on the meta device)."""
    spec = resolved.spec
    if spec.source == "torchscript":
        return None
    try:
        model = _meta_model(spec.source, spec.name, specs.kwargs_json(spec))
    except Exception:
        return None
    return sum(p.numel() for p in model.parameters())


def _size(uri: str) -> int:
    info = uris.stat(uri)
    return info.size if info is not None else 0


def estimate_model_bytes(resolved: ResolvedModel) -> int:
    """Bytes of the model's parameters and buffers once loaded (for memory-bounded actor chunks).

    A meta-device build (no memory, no weights) where possible; else the weight file's size.
    """
    spec = resolved.spec
    if spec.source != "torchscript":
        with contextlib.suppress(Exception):
            return _meta_bytes(spec.source, spec.name, specs.kwargs_json(spec))
    if spec.source == "torchscript":
        return _size(specs.torchscript_file(spec))
    if spec.checkpoint:
        return _size(spec.checkpoint)
    if spec.source == "transformers":
        return sum(
            p.stat().st_size
            for p in Path(spec.name).expanduser().rglob("*")
            if p.suffix in (".safetensors", ".bin")
        )
    raise CheckpointError(f"model {resolved.model_id}: cannot estimate its size")
