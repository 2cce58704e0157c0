"""What a model spec names, without building it: the torchscript file, timm's meta model, the hub
cache, the model kwargs' canonical JSON and a processor's image side.

Shared by ``build``, ``preprocessing``, ``memory`` and ``resolve``; it imports none of them (these
helpers were private names of ``build`` and ``preprocessing`` imported across the zoo's modules, which
tied the three into an import cycle).
"""

from __future__ import annotations

import importlib
import json
import os
from collections.abc import Mapping
from functools import lru_cache
from typing import TYPE_CHECKING, Any

from zoorank.config import ModelSpec
from zoorank.errors import ConfigError
from zoorank.store import uris
from zoorank.zoo.hub import hub_cache_dir

if TYPE_CHECKING:
    from torch import nn

__all__ = ["hub_cache", "hub_kwargs", "image_side", "kwargs_json", "python_factory",
           "timm_meta_model", "torchscript_file"]


def torchscript_file(spec: ModelSpec, label: str = "") -> str:
    path = spec.checkpoint or spec.name
    path = path if uris.is_uri(path) else os.path.expanduser(path)
    if not uris.is_file(path):
        raise ConfigError(f"{label or spec.id}: torchscript file not found: {uris.redact(path)}")
    if not spec.trust_checkpoint:
        raise ConfigError(
            f"{label or spec.id}: trust_checkpoint: source torchscript loads {uris.redact(path)} "
            "with torch.jit.load, which runs code from the file; set trust_checkpoint: true only "
            "for a file you trust")
    return path


@lru_cache(maxsize=256)
def timm_meta_model(name: str, kwargs_json: str) -> nn.Module:
    import timm
    import torch

    kwargs = {"num_classes": 0, **hub_kwargs(name, False), **json.loads(kwargs_json)}
    with torch.device("meta"):
        return timm.create_model(name, pretrained=False, **kwargs)


def hub_kwargs(name: str, pretrained: bool, cache: str | None = None) -> dict[str, Any]:
    """timm reads hub files (weights, an ``hf-hub:`` config) from the cache the model was
    resolved against (else this process's)."""
    if pretrained or name.startswith("hf-hub:"):
        return {"cache_dir": hub_cache(cache)}
    return {}


def hub_cache(cache: str | None) -> str:
    """``cache``, else this process's hub cache directory."""
    return cache or str(hub_cache_dir())


def kwargs_json(spec: ModelSpec) -> str:
    return json.dumps(spec.model_kwargs, sort_keys=True, default=str)


def image_side(value: Any) -> int | None:
    if value is None:
        return None
    if isinstance(value, int):
        return value
    if isinstance(value, (list, tuple)):
        return int(value[-1])
    if isinstance(value, Mapping):
        for key in ("shortest_edge", "height", "width"):
            if key in value:
                return int(value[key])
    return None


def python_factory(name: str) -> Any:
    """The object a python model's ``"package.module:attr"`` names (its factory); CheckpointError
    when the module does not import or has no such attribute."""
    from zoorank.zoo.checkpoints import CheckpointError

    module_name, _, attr = name.partition(":")
    try:
        obj: Any = importlib.import_module(module_name)
    except ImportError as err:
        raise CheckpointError(
            f"python model {name!r}: cannot import {module_name!r} ({err})"
        ) from None
    for part in attr.split("."):
        if not hasattr(obj, part):
            raise CheckpointError(f"python model {name!r}: {module_name} has no attribute {attr!r}")
        obj = getattr(obj, part)
    return obj
