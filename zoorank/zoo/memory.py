"""Memory estimates of resolved models (for memory-bounded actor chunks)."""

from __future__ import annotations

import contextlib
from functools import lru_cache

from torch import nn

from zoorank.zoo import sources, specs
from zoorank.zoo.checkpoints import CheckpointError
from zoorank.zoo.resolve import ResolvedModel


def _meta_model(source: str, name: str, kwargs_json: str) -> nn.Module:
    return sources.get(source).meta_model(name, kwargs_json)


@lru_cache(maxsize=256)
def _meta_bytes(source: str, name: str, kwargs_json: str) -> int:
    return sources.get(source).loaded_bytes(_meta_model(source, name, kwargs_json))


def count_parameters(resolved: ResolvedModel) -> int | None:
    """Parameters of the (headless) network, from a meta-device build; None when it cannot be
    built without weights (torchscript, a factory that fails on the meta device)."""
    spec = resolved.spec
    try:
        model = _meta_model(spec.source, spec.name, specs.kwargs_json(spec))
    except Exception:
        return None
    return sum(p.numel() for p in model.parameters())


def estimate_model_bytes(resolved: ResolvedModel) -> int:
    """Bytes of the model's parameters and buffers once loaded (for memory-bounded actor chunks).

    A meta-device build (no memory, no weights) where possible; else the weight files' size.
    """
    spec = resolved.spec
    with contextlib.suppress(Exception):
        return _meta_bytes(spec.source, spec.name, specs.kwargs_json(spec))
    size = sources.get(spec.source).file_bytes(spec)
    if size is None:
        raise CheckpointError(f"model {resolved.model_id}: cannot estimate its size")
    return size
