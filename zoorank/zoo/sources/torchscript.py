"""``source: torchscript``: a scripted file (``torch.jit.load``, which runs code from the file:
only with ``trust_checkpoint: true``); its head only where declared (``head: true``: the forward
returns ``(features, logits)``)."""

from __future__ import annotations

import io
from pathlib import Path
from typing import TYPE_CHECKING, Any

from zoorank.config import ModelSpec
from zoorank.config.model_spec import MODEL_SOURCES
from zoorank.store import uris
from zoorank.zoo import specs
from zoorank.zoo.label_space import heads_wanted
from zoorank.zoo.sources import ModelSource, file_size, register

if TYPE_CHECKING:
    from torch import nn

    from zoorank.store.uris import DigestCache


@register
class TorchscriptSource(ModelSource):
    """A scripted network: the file is the network (no state dict, no submodule layers)."""

    name = "torchscript"
    traits = MODEL_SOURCES["torchscript"]
    name_in_fingerprint = False  # the file's digest covers it
    state_dict_checkpoint = False
    layers = False
    head_origin = "declared with head: true"
    headless_text = "none (torchscript: declare head: true for a (features, logits) output)"

    def check(self, spec: ModelSpec, label: str) -> Path | None:
        specs.torchscript_file(spec, label)
        return None

    def weights_digest(self, spec: ModelSpec, label: str, digests: DigestCache,
                       directory: Path | None) -> str | None:
        return digests.digest(specs.torchscript_file(spec, label))

    def build(self, spec: ModelSpec, hub_cache: str | None,
              state: Any) -> tuple[nn.Module, dict[str, Any], str | None]:
        import torch

        file = specs.torchscript_file(spec)
        source = io.BytesIO(uris.read_bytes(file)) if uris.is_uri(file) else file
        return (torch.jit.load(source, map_location="cpu"), {},
                "torchscript" if heads_wanted(spec) else None)

    def file_bytes(self, spec: ModelSpec) -> int | None:
        return file_size(specs.torchscript_file(spec))

    def head_classes(self, resolved: Any) -> tuple[str, int | None]:
        return "torchscript (features, logits) output, declared", None
