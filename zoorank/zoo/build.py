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

from zoorank.config import ModelSpec
from zoorank.store import uris
from zoorank.zoo import specs
from zoorank.zoo.checkpoints import (
    CheckpointError,
    _classifier_names,
    _load_state_into,
    _strip_prefixes,
    _truncated,
    classifier_rows,
    read_checkpoint,
)
from zoorank.zoo.label_space import heads_wanted

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


#: how a head is run (:class:`FeatureExtractor`'s ``head``): timm's ``forward_features`` +
#: ``forward_head``; a transformers ``*ForImageClassification``; a python module's
#: ``forward_features``/``forward_head`` or ``head`` attribute; a torchscript (features, logits).
HEAD_KINDS = ("timm", "transformers", "forward_head", "head_attribute", "torchscript")


class FeatureExtractor(nn.Module):
    """Wraps a backbone: normalized ``(B, 3, H, W)`` → float32 ``(B, dim)``.

    With ``layer`` the output of that submodule is taken (forward hook; the forward stops there
    unless a head runs too). With ``head`` (one of :data:`HEAD_KINDS`), :meth:`features_and_logits`
    gives the classifier's logits from the same forward (conventions in the package docstring).
    """

    def __init__(
        self,
        model: nn.Module,
        *,
        source: str,
        pooling: str = "cls",
        layer: str | None = None,
        forward_kwargs: dict[str, Any] | None = None,
        head: str | None = None,
    ) -> None:
        super().__init__()
        self.model = model
        self.source = source
        self.pooling = pooling
        self.layer = layer
        self.head = head
        self.forward_kwargs = dict(forward_kwargs or {})
        self._captured: list[Any] = []
        self._head_io: list[Any] = []
        if layer is not None:
            model.get_submodule(layer).register_forward_hook(self._capture)
        if head == "transformers":  # the base model's output, pooled as without a head
            model.base_model.register_forward_hook(self._capture_head_io)
        elif head == "head_attribute":
            model.head.register_forward_hook(self._capture_head_io, with_kwargs=False)
            model.head.register_forward_pre_hook(self._capture_head_input)

    def _capture(self, module: nn.Module, args: Any, output: Any) -> None:
        self._captured.append(output)
        if self.head is None:
            raise _LayerReached

    def _capture_head_input(self, module: nn.Module, args: Any) -> None:
        self._head_io.append(args[0] if args else None)

    def _capture_head_io(self, module: nn.Module, args: Any, output: Any) -> None:
        self._head_io.append(output)

    def _run(self, x: torch.Tensor) -> Any:
        if self.source == "transformers":
            return self.model(pixel_values=x, **self.forward_kwargs)
        return self.model(x)

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        return self.features_and_logits(x)[0]

    def features_and_logits(self, x: torch.Tensor) -> tuple[torch.Tensor, torch.Tensor | None]:
        """(float32 features ``(B, dim)``, float32 logits ``(B, outputs)`` or None) of one forward."""
        self._captured.clear()
        self._head_io.clear()
        try:
            feats, logits = self._forward_all(x)
            if self.layer is not None:
                if not self._captured:
                    raise CheckpointError(f"layer {self.layer!r} did not run in the forward pass")
                feats = pool_features(self._captured[0])
        finally:
            self._captured.clear()
            self._head_io.clear()
        if logits is not None:
            if not isinstance(logits, torch.Tensor) or logits.ndim != 2:
                shape = tuple(logits.shape) if isinstance(logits, torch.Tensor) else type(logits)
                raise CheckpointError(f"the head's logits must be (batch, classes), got {shape}")
            logits = logits.float()
        return feats, logits

    def _forward_all(self, x: torch.Tensor) -> tuple[torch.Tensor, Any]:
        head, model = self.head, self.model
        if head is None:
            try:
                out = self._run(x)
            except _LayerReached:
                return torch.empty(0), None
            return (self._pool_transformers(out) if self.source == "transformers"
                    else pool_features(out)), None
        if head in ("timm", "forward_head"):
            trunk = model.forward_features(x)
            if head == "timm" or _takes_pre_logits(model):
                feats = pool_features(model.forward_head(trunk, pre_logits=True))
            else:
                feats = pool_features(trunk)
            return feats, model.forward_head(trunk)
        if head == "transformers":
            logits = self._run(x).logits
            return self._pool_transformers(self._head_io[0]), logits
        if head == "head_attribute":
            self._run(x)
            if len(self._head_io) < 2:
                raise CheckpointError("the model's head did not run in its forward pass")
            return pool_features(self._head_io[0]), self._head_io[1]
        out = self._run(x)  # torchscript declared head: true → (features, logits)
        if not isinstance(out, (tuple, list)) or len(out) != 2:
            raise CheckpointError("head: true declares that the torchscript module returns "
                                  f"(features, logits); it returned {type(out).__name__}")
        return pool_features(out[0]), out[1]

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


def _takes_pre_logits(model: nn.Module) -> bool:
    import inspect

    try:
        return "pre_logits" in inspect.signature(model.forward_head).parameters
    except (TypeError, ValueError):
        return False


def python_head(model: nn.Module) -> str | None:
    """The head convention a python model follows: ``forward_head`` (it has ``forward_features``
    and ``forward_head``, as timm models do, and ``num_classes`` is not 0), ``head_attribute`` (an
    ``nn.Module`` attribute ``head`` other than ``nn.Identity``: its input is the features, its
    output the logits), or None (a timm model built with ``num_classes=0`` has no head)."""
    if callable(getattr(model, "forward_features", None)) and \
            callable(getattr(model, "forward_head", None)):
        return None if getattr(model, "num_classes", None) == 0 else "forward_head"
    head = getattr(model, "head", None)
    if isinstance(head, nn.Module) and not isinstance(head, nn.Identity):
        return "head_attribute"
    return None


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


def timm_classes(spec: ModelSpec, state: Mapping[str, torch.Tensor] | None) -> int:
    """The ``num_classes`` a timm model is built with: ``model_kwargs``' own; with heads wanted,
    the checkpoint's classifier rows (0 for a headless checkpoint) or, for ``pretrained``, the
    hub weights' head (-1: timm's default); 0 for a seeded random init (no trained head)."""
    if "num_classes" in spec.model_kwargs:
        return int(spec.model_kwargs["num_classes"])
    if not heads_wanted(spec):
        return 0
    if spec.pretrained:
        return -1
    if state is None:
        return 0
    meta = specs.timm_meta_model(spec.name, specs.kwargs_json(spec))
    stripped = _strip_prefixes(dict(state), tuple(spec.strip_prefixes), set(meta.state_dict()))
    return classifier_rows(stripped, _classifier_names(meta)) or 0


def transformers_head(config: Any, spec: ModelSpec) -> bool:
    """Whether a transformers model is loaded with its image-classification head."""
    if not heads_wanted(spec) or getattr(config, "vision_config", None) is not None:
        return False
    return any(str(a).endswith("ForImageClassification")
               for a in getattr(config, "architectures", None) or ())


def _build(spec: ModelSpec, hub_cache: str | None = None,
           state: Mapping[str, torch.Tensor] | None = None
           ) -> tuple[nn.Module, dict[str, Any], str | None]:
    """The bare network (weights of the directory / file, or seeded init), forward kwargs and
    the head it runs (one of :data:`HEAD_KINDS`, or None)."""
    if spec.source == "timm":
        import timm

        classes = timm_classes(spec, state)
        kwargs = {**specs.hub_kwargs(spec.name, spec.pretrained, hub_cache), **spec.model_kwargs}
        if classes >= 0:
            kwargs["num_classes"] = classes
        # pretrained: timm's own loader, from the local cache (HF_HUB_OFFLINE in deployments)
        model = timm.create_model(spec.name, pretrained=spec.pretrained, **kwargs)
        return model, {}, "timm" if getattr(model, "num_classes", 0) else None
    if spec.source == "transformers":

        with quiet_transformers():
            cls, config = transformers_class(spec.name, hub_cache)
            head = transformers_head(config, spec)
            if head:
                from transformers import AutoModelForImageClassification as cls
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
        return model.float(), forward_kwargs, "transformers" if head else None
    if spec.source == "torchscript":
        file = specs.torchscript_file(spec)
        source = io.BytesIO(uris.read_bytes(file)) if uris.is_uri(file) else file
        return (torch.jit.load(source, map_location="cpu"), {},
                "torchscript" if heads_wanted(spec) else None)
    factory = python_factory(spec.name)
    model = factory(**spec.model_kwargs)
    if not isinstance(model, nn.Module):
        raise CheckpointError(
            f"python model {spec.name!r} returned {type(model).__name__}, not an nn.Module"
        )
    return model, {}, python_head(model) if heads_wanted(spec) else None


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
    ``(B, dim)``; its :meth:`~FeatureExtractor.features_and_logits` adds the head's logits where
    a head was found (``head`` attribute: its kind, None without). Raises CheckpointError with
    the reason.
    """
    spec = resolved.spec
    state = None
    if spec.checkpoint and spec.source == "timm" and heads_wanted(spec):
        try:  # read once: its classifier decides num_classes, then it is loaded
            state = read_checkpoint(str(spec.checkpoint), trust=spec.trust_checkpoint,
                                    state_dict_key=spec.state_dict_key,
                                    state_dict_prefix=spec.state_dict_prefix)
        except CheckpointError as err:
            raise CheckpointError(f"model {resolved.model_id}: {err}") from None
    try:
        with _seeded(_INIT_SEED):
            model, forward_kwargs, head = _build(spec, resolved.hub_cache, state)
    except CheckpointError:
        raise
    except Exception as err:
        raise CheckpointError(
            f"model {resolved.model_id}: cannot build {spec.source} {spec.name!r}: "
            f"{type(err).__name__}: {str(err).splitlines()[0] if str(err) else ''}"
        ) from err
    if spec.checkpoint and spec.source != "torchscript":
        try:
            _load_state_into(model, spec, drop_classifier=spec.source == "timm" and head is None,
                             state=state)
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
        head=head,
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
