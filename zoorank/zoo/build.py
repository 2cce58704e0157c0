"""Building networks from a resolved model and its checkpoint (:func:`load_model`), wrapped as
feature extractors (:mod:`.features`); what differs by source is :mod:`zoorank.zoo.sources`."""

from __future__ import annotations

import contextlib
import difflib
from collections.abc import Iterator, Mapping
from typing import TYPE_CHECKING

import torch
from torch import nn

from zoorank.config import ModelSpec
from zoorank.zoo import sources
from zoorank.zoo.checkpoints import CheckpointError, _load_state_into, _truncated, read_checkpoint
from zoorank.zoo.features import FeatureExtractor
from zoorank.zoo.sources.hf import quiet_transformers, transformers_class, transformers_head
from zoorank.zoo.sources.python import python_head
from zoorank.zoo.sources.timm import timm_classes

if TYPE_CHECKING:
    from zoorank.zoo.resolve import ResolvedModel

#: the source-specific helpers that lived here, importable from here still
__all__ = ["load_model", "python_head", "quiet_transformers", "timm_classes",
           "transformers_class", "transformers_head"]

_INIT_SEED = 0


@contextlib.contextmanager
def _seeded(seed: int) -> Iterator[None]:
    with torch.random.fork_rng(devices=[]):
        torch.manual_seed(seed)
        yield


def _check_layer(model: nn.Module, spec: ModelSpec) -> None:
    if not sources.get(spec.source).layers:
        raise CheckpointError(f"model {spec.id}: layer: is not supported for {spec.source} models")
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
    source = sources.get(spec.source)
    if state is None and spec.checkpoint and source.reads_state_first(spec):
        try:  # read once: e.g. its classifier decides the classes, then it is loaded
            state = read_checkpoint(str(spec.checkpoint), trust=spec.trust_checkpoint,
                                    state_dict_key=spec.state_dict_key,
                                    state_dict_prefix=spec.state_dict_prefix)
        except CheckpointError as err:
            raise CheckpointError(f"model {resolved.model_id}: {err}") from None
    try:
        with _seeded(_INIT_SEED):
            model, forward_kwargs, head = source.build(spec, resolved.hub_cache, state)
    except CheckpointError:
        raise
    except Exception as err:
        raise CheckpointError(
            f"model {resolved.model_id}: cannot build {spec.source} {spec.name!r}: "
            f"{type(err).__name__}: {str(err).splitlines()[0] if str(err) else ''}"
        ) from err
    if spec.checkpoint and source.state_dict_checkpoint:
        try:
            _load_state_into(model, spec, drop_classifier=source.drops_classifier(head),
                             state=state)
        except CheckpointError as err:
            raise CheckpointError(f"model {resolved.model_id}: {err}") from None
    head, named = source.built_head(resolved, model, head)
    if spec.layer is not None:
        _check_layer(model, spec)
    extractor = FeatureExtractor(
        model,
        source=spec.source,
        hf_outputs=source.hf_outputs,
        pooling=spec.pooling,
        layer=spec.layer,
        forward_kwargs=forward_kwargs,
        head=head,
        head_named=named,
        model_id=resolved.model_id,
    )
    extractor.eval().requires_grad_(False)
    return extractor.to(device)
