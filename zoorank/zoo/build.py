"""Building networks (timm / transformers / torchscript / python) and wrapping them as feature extractors."""

from __future__ import annotations

import contextlib
import difflib
import importlib
import io
from collections.abc import Iterator, Mapping
from typing import TYPE_CHECKING, Any

import torch
from torch import nn

from zoorank import uris
from zoorank.config import ModelSpec
from zoorank.zoo import specs
from zoorank.zoo.checkpoints import CheckpointError, _load_state_into, _truncated

if TYPE_CHECKING:
    from zoorank.zoo.resolve import ResolvedModel


_INIT_SEED = 0


# --------------------------------------------------------------------------- modules


def pool_features(out: Any) -> torch.Tensor:
    """A model or layer output as float32 ``(B, dim)`` (conventions in the module docstring)."""
    if isinstance(out, Mapping):
        out = next((v for v in out.values() if isinstance(v, torch.Tensor)), None)
    elif isinstance(out, (tuple, list)):
        out = next((v for v in out if isinstance(v, torch.Tensor)), None)
    if not isinstance(out, torch.Tensor):
        raise CheckpointError(f"model output holds no tensor (got {type(out).__name__})")
    if out.ndim == 4:
        out = out.mean(dim=(2, 3))
    elif out.ndim == 3:
        out = out.mean(dim=1)
    elif out.ndim != 2:
        out = out.reshape(out.shape[0], -1)
    return out.float()


class _LayerReached(Exception):
    """Raised by the layer hook: the rest of the network need not run."""


class FeatureExtractor(nn.Module):
    """Wraps a backbone: normalized ``(B, 3, H, W)`` → float32 ``(B, dim)``.

    With ``layer`` the output of that submodule is taken (forward hook; the forward stops there).
    """

    def __init__(
        self,
        model: nn.Module,
        *,
        source: str,
        pooling: str = "cls",
        layer: str | None = None,
        forward_kwargs: dict[str, Any] | None = None,
    ) -> None:
        super().__init__()
        self.model = model
        self.source = source
        self.pooling = pooling
        self.layer = layer
        self.forward_kwargs = dict(forward_kwargs or {})
        self._captured: list[Any] = []
        if layer is not None:
            model.get_submodule(layer).register_forward_hook(self._capture)

    def _capture(self, module: nn.Module, args: Any, output: Any) -> None:
        self._captured.append(output)
        raise _LayerReached

    def _run(self, x: torch.Tensor) -> Any:
        if self.source == "transformers":
            return self.model(pixel_values=x, **self.forward_kwargs)
        return self.model(x)

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        if self.layer is not None:
            self._captured.clear()
            try:
                self._run(x)
            except _LayerReached:
                pass
            if not self._captured:
                raise CheckpointError(f"layer {self.layer!r} did not run in the forward pass")
            out = self._captured[0]
            self._captured.clear()
            return pool_features(out)
        out = self._run(x)
        if self.source == "transformers":
            return self._pool_transformers(out)
        return pool_features(out)

    def _pool_transformers(self, out: Any) -> torch.Tensor:
        if self.pooling == "pooler":
            pooled = getattr(out, "pooler_output", None)
            if pooled is None:
                raise CheckpointError(
                    "this transformers model has no pooler output; use pooling cls or mean"
                )
            return pool_features(pooled)
        hidden = out.last_hidden_state
        if hidden.ndim == 4:
            return hidden.mean(dim=(2, 3)).float()
        return (hidden[:, 0] if self.pooling == "cls" else hidden.mean(dim=1)).float()


@contextlib.contextmanager
def _seeded(seed: int) -> Iterator[None]:
    with torch.random.fork_rng(devices=[]):
        torch.manual_seed(seed)
        yield


@contextlib.contextmanager
def quiet_transformers() -> Iterator[None]:
    from transformers.utils import logging as hf_logging

    verbosity = hf_logging.get_verbosity()
    bars = hf_logging.is_progress_bar_enabled()
    hf_logging.set_verbosity_error()
    hf_logging.disable_progress_bar()
    try:
        yield
    finally:
        hf_logging.set_verbosity(verbosity)
        if bars:
            hf_logging.enable_progress_bar()


def python_factory(name: str) -> Any:
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


def transformers_class(directory: str, hub_cache: str | None = None) -> tuple[Any, Any]:
    import transformers
    from transformers import AutoConfig, AutoModel

    from zoorank.zoo.hub import transformers_revision

    name, revision = transformers_revision(directory)  # org/model@rev: that revision, offline
    config = AutoConfig.from_pretrained(name, revision=revision, local_files_only=True,
                                        cache_dir=specs.hub_cache(hub_cache))
    if getattr(config, "vision_config", None) is not None:
        vision = getattr(
            transformers, type(config).__name__.removesuffix("Config") + "VisionModel", None
        )
        if vision is not None:
            return vision, config
    return AutoModel, config


def _build(spec: ModelSpec, hub_cache: str | None = None) -> tuple[nn.Module, dict[str, Any]]:
    """The bare network (weights of the directory / file, or seeded init) and forward kwargs."""
    if spec.source == "timm":
        import timm

        kwargs = {"num_classes": 0, **specs.hub_kwargs(spec.name, spec.pretrained, hub_cache),
                  **spec.model_kwargs}
        # pretrained: timm's own loader, from the local cache (HF_HUB_OFFLINE in deployments)
        return timm.create_model(spec.name, pretrained=spec.pretrained, **kwargs), {}
    if spec.source == "transformers":

        with quiet_transformers():
            cls, config = transformers_class(spec.name, hub_cache)
            from zoorank.zoo.hub import transformers_revision

            name, revision = transformers_revision(spec.name)
            model = cls.from_pretrained(name, revision=revision, local_files_only=True,
                                        cache_dir=specs.hub_cache(hub_cache), **spec.model_kwargs)
        forward_kwargs = {}
        vision_config = getattr(config, "vision_config", None) or config
        image_size = specs.image_side(getattr(vision_config, "image_size", None))
        if spec.input_size and image_size and spec.input_size != image_size:
            import inspect

            if "interpolate_pos_encoding" in inspect.signature(model.forward).parameters:
                forward_kwargs["interpolate_pos_encoding"] = True
        return model.float(), forward_kwargs
    if spec.source == "torchscript":
        file = specs.torchscript_file(spec)
        source = io.BytesIO(uris.read_bytes(file)) if uris.is_uri(file) else file
        return torch.jit.load(source, map_location="cpu"), {}
    factory = python_factory(spec.name)
    model = factory(**spec.model_kwargs)
    if not isinstance(model, nn.Module):
        raise CheckpointError(
            f"python model {spec.name!r} returned {type(model).__name__}, not an nn.Module"
        )
    return model, {}


def _check_layer(model: nn.Module, spec: ModelSpec) -> None:
    if spec.source == "torchscript":
        raise CheckpointError(f"model {spec.id}: layer: is not supported for torchscript models")
    names = [n for n, _ in model.named_modules() if n]
    if spec.layer not in names:
        close = difflib.get_close_matches(str(spec.layer), names, n=5, cutoff=0.5)
        raise CheckpointError(
            f"model {spec.id}: unknown layer {spec.layer!r}; "
            + (f"close: {', '.join(close)}; " if close else "")
            + f"modules include: {_truncated(names)}"
        )


def load_model(resolved: ResolvedModel, device: str | torch.device = "cpu") -> nn.Module:
    """Build a resolved model with its checkpoint: eval mode, no grad, on ``device``.

    Returns a :class:`FeatureExtractor` mapping normalized ``(B, 3, H, W)`` to float32
    ``(B, dim)``. Raises CheckpointError with the reason.
    """
    spec = resolved.spec
    try:
        with _seeded(_INIT_SEED):
            model, forward_kwargs = _build(spec, resolved.hub_cache)
    except CheckpointError:
        raise
    except Exception as err:
        raise CheckpointError(
            f"model {resolved.model_id}: cannot build {spec.source} {spec.name!r}: "
            f"{type(err).__name__}: {str(err).splitlines()[0] if str(err) else ''}"
        ) from err
    if spec.checkpoint and spec.source != "torchscript":
        try:
            _load_state_into(model, spec, drop_classifier=spec.source == "timm")
        except CheckpointError as err:
            raise CheckpointError(f"model {resolved.model_id}: {err}") from None
    if spec.layer is not None:
        _check_layer(model, spec)
    extractor = FeatureExtractor(
        model,
        source=spec.source,
        pooling=spec.pooling,
        layer=spec.layer,
        forward_kwargs=forward_kwargs,
    )
    extractor.eval().requires_grad_(False)
    return extractor.to(device)


def check_features(features: Any, model_id: str | None = None) -> None:
    """Raise CheckpointError unless ``features`` is a finite 2-D ``(B, dim)`` array."""
    t = torch.as_tensor(features)
    who = f"model {model_id}: " if model_id else ""
    if t.ndim != 2:
        raise CheckpointError(f"{who}features must be 2-D (batch, dim), got shape {tuple(t.shape)}")
    if t.is_floating_point() or t.is_complex():
        nan = int(torch.isnan(t).sum())
        inf = int(torch.isinf(t).sum())
        if nan or inf:
            raise CheckpointError(
                f"{who}features contain {nan} NaN and {inf} Inf values (of {t.numel()})"
            )
