"""Building networks (timm / transformers / torchscript / python) from a resolved model and its
checkpoint (:func:`load_model`), wrapped as feature extractors (:mod:`.features`)."""

from __future__ import annotations

import contextlib
import difflib
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
from zoorank.zoo.features import FeatureExtractor
from zoorank.zoo.label_space import heads_wanted
from zoorank.zoo.specs import python_factory

if TYPE_CHECKING:
    from zoorank.zoo.heads import HeadLayout
    from zoorank.zoo.resolve import ResolvedModel


_INIT_SEED = 0


def python_head(resolved: ResolvedModel, model: nn.Module) -> HeadLayout | None:
    """A built python model's head (:mod:`zoorank.zoo.heads`), or None without one: the driver's
    choice (:attr:`ResolvedModel.head_search`), else (the factory could not be built on the meta
    device there) :func:`~zoorank.zoo.heads.search_head` on the built model here. Its first
    forward checks it (:class:`FeatureExtractor`). A name that is no submodule or method is a
    ConfigError naming the model."""
    from zoorank.errors import ConfigError
    from zoorank.zoo.heads import HeadNameError, search_head

    search = resolved.head_search
    if search is None or not search.checked:
        try:
            search = search_head(model, resolved.spec.head)
        except HeadNameError as err:
            raise ConfigError(f"model {resolved.model_id}: {err}") from None
    layout = search.layout
    if layout is not None and layout.kind == "module":
        try:
            model.get_submodule(layout.name)
        except AttributeError:
            raise CheckpointError(f"model {resolved.model_id}: its head {layout.name!r} is not "
                                  "a submodule of the built model") from None
    return layout


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
    the head it runs (one of :data:`~zoorank.zoo.features.HEAD_KINDS`, or None)."""
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
    return model, {}, None  # its head: python_head, once the weights are in


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


def load_model(resolved: ResolvedModel, device: str | torch.device = "cpu",
               state: Mapping[str, torch.Tensor] | None = None) -> nn.Module:
    """Build a resolved model with its checkpoint: eval mode, no grad, on ``device``.

    Returns a :class:`FeatureExtractor` mapping normalized ``(B, 3, H, W)`` to float32
    ``(B, dim)``; its :meth:`~FeatureExtractor.features_and_logits` adds the head's logits where
    a head was found (``head`` attribute: its kind, None without). ``state``: the checkpoint's
    state dict when the caller read it already (:mod:`zoorank.zoo.preflight`). Raises
    CheckpointError with the reason.
    """
    spec = resolved.spec
    if state is None and spec.checkpoint and spec.source == "timm" and heads_wanted(spec):
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
    named = False
    if spec.source == "python" and heads_wanted(spec):
        layout = python_head(resolved, model)
        head, named = (layout.key, layout.declared) if layout is not None else (None, False)
    if spec.layer is not None:
        _check_layer(model, spec)
    extractor = FeatureExtractor(
        model,
        source=spec.source,
        pooling=spec.pooling,
        layer=spec.layer,
        forward_kwargs=forward_kwargs,
        head=head,
        head_named=named,
        model_id=resolved.model_id,
    )
    extractor.eval().requires_grad_(False)
    return extractor.to(device)
