"""``source: python``: a function of yours (``package.module:function``) returning an
``nn.Module``; its head is found by layout or named (``head: NAME``, :mod:`zoorank.zoo.heads`)."""

from __future__ import annotations

import json
from pathlib import Path
from typing import TYPE_CHECKING, Any

from zoorank.config import ModelSpec
from zoorank.config.model_spec import MODEL_SOURCES
from zoorank.errors import ConfigError
from zoorank.zoo.label_space import heads_wanted
from zoorank.zoo.sources import ModelSource, register
from zoorank.zoo.specs import python_factory

if TYPE_CHECKING:
    from torch import nn

    from zoorank.zoo.heads import HeadLayout, HeadSearch


def python_head(resolved: Any, model: nn.Module) -> HeadLayout | None:
    """A built python model's head (:mod:`zoorank.zoo.heads`), or None without one: the driver's
    choice (:attr:`ResolvedModel.head_search`), else (the factory could not be built on the meta
    device there) :func:`~zoorank.zoo.heads.search_head` on the built model here. Its first
    forward checks it (:class:`FeatureExtractor`). A name that is no submodule or method is a
    ConfigError naming the model."""
    from zoorank.zoo.checkpoints import CheckpointError
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


@register
class PythonSource(ModelSource):
    """A factory's network; the checkpoint is a state dict loaded into it."""

    name = "python"
    traits = MODEL_SOURCES["python"]
    seeded_init = True

    def check(self, spec: ModelSpec, label: str) -> Path | None:
        if ":" not in spec.name:
            raise ConfigError(
                f"{label}: python models are named 'package.module:function', got {spec.name!r}"
            )
        return None

    def head_search(self, spec: ModelSpec, label: str) -> HeadSearch | None:
        """The head found on a meta-device build; ConfigError for a name that is no submodule
        or method, and for ``head: true`` where none is found."""
        if not heads_wanted(spec):
            return None
        from zoorank.zoo.heads import HeadNameError, meta_head_search

        try:
            return meta_head_search(spec)
        except HeadNameError as err:
            raise ConfigError(f"{label}: {err}") from None

    def build(self, spec: ModelSpec, hub_cache: str | None,
              state: Any) -> tuple[nn.Module, dict[str, Any], str | None]:
        from torch import nn

        from zoorank.zoo.checkpoints import CheckpointError

        model = python_factory(spec.name)(**spec.model_kwargs)
        if not isinstance(model, nn.Module):
            raise CheckpointError(
                f"python model {spec.name!r} returned {type(model).__name__}, not an nn.Module"
            )
        return model, {}, None  # its head: built_head, once the weights are in

    def built_head(self, resolved: Any, model: nn.Module,
                   head: str | None) -> tuple[str | None, bool]:
        if not heads_wanted(resolved.spec):
            return head, False
        layout = python_head(resolved, model)
        return (layout.key, layout.declared) if layout is not None else (None, False)

    def meta_model(self, name: str, kwargs_json: str) -> nn.Module:
        import torch

        with torch.device("meta"):
            return python_factory(name)(**json.loads(kwargs_json))

    def head_classes(self, resolved: Any) -> tuple[str, int | None]:
        search = resolved.head_search
        if search is None:
            from zoorank.zoo.heads import meta_head_search

            search = meta_head_search(resolved.spec)
        if search.layout is None:
            if not search.checked:
                return f"python: {search.describe()}", None
            from zoorank.zoo.heads import linear_text

            hint = f"; {linear_text(search.linears)}" if search.linears else ""
            return f"python: {search.describe()}{hint}", 0
        return f"python: {search.layout.describe()}", search.layout.classes

    def import_root(self, spec: ModelSpec) -> str | None:
        return spec.name.partition(":")[0].split(".")[0]
