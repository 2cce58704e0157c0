"""Model sources, one module each (``timm``, ``hf`` for transformers, ``torchscript``, ``python``).

A source says how its models are resolved (checked, fingerprinted, preprocessed), built, loaded,
sized and inspected: a :class:`ModelSource` subclass decorated with :func:`register`. The modules
of this package are found without an import line (:func:`get` imports them on first use), so
adding a source is one file here; a source defined elsewhere is registered when its module is
imported. The generic code (:mod:`zoorank.zoo.resolve`, ``build``, ``memory``, ``inspect``) asks
:func:`get` and never branches on a source's name. The config layer holds each source's
:class:`~zoorank.config.model_spec.SourceTraits` (how its ``name`` is read, its head default):
:func:`register` adds a new source's there, so the schema accepts and lists it.
"""

from __future__ import annotations

import hashlib
import importlib
import pkgutil
from pathlib import Path
from typing import TYPE_CHECKING, Any, ClassVar, TypeVar

from zoorank.config import ModelSpec
from zoorank.config.model_spec import MODEL_SOURCES, SourceTraits
from zoorank.errors import ConfigError

if TYPE_CHECKING:
    from torch import nn

    from zoorank.store.uris import DigestCache
    from zoorank.zoo.heads import HeadSearch
    from zoorank.zoo.preprocessing import Geometry, Normalization

__all__ = ["ModelSource", "combined_digest", "file_size", "get", "names", "register"]

_REGISTRY: dict[str, ModelSource] = {}
_discovered = False
_Source = TypeVar("_Source", bound=type["ModelSource"])


class ModelSource:
    """How one kind of model is resolved, built, loaded, sized and inspected.

    Subclass it, set :attr:`name` (the config's ``source:``) and :attr:`traits`, implement
    :meth:`build` (and what differs from the defaults below), and decorate it with
    :func:`register`. Defaults: a checkpoint is a state dict loaded into the built network; no
    hub weights; ImageNet preprocessing at the native size; no head search.
    """

    #: the config's ``source:`` value
    name: ClassVar[str] = ""
    #: how the config reads ``name`` and whether the head is looked for by default
    traits: ClassVar[SourceTraits] = SourceTraits()
    #: ``pretrained: true`` loads hub weights of the local cache (timm)
    pretrained: ClassVar[bool] = False
    #: the spec's ``name`` is part of the fingerprint (False where the weights' digest covers it)
    name_in_fingerprint: ClassVar[bool] = True
    #: a checkpoint is a state dict loaded into the built network (False: the file is the network)
    state_dict_checkpoint: ClassVar[bool] = True
    #: whether a checkpoint that does not fit may be matched to another architecture of the
    #: source by its parameter names and shapes (:mod:`zoorank.zoo.fixes`)
    suggests_architectures: ClassVar[bool] = False
    #: ``layer:`` may name one of its submodules
    layers: ClassVar[bool] = True
    #: without a checkpoint the network starts from a seeded random initialisation
    seeded_init: ClassVar[bool] = False
    #: its forward takes ``pixel_values=`` and returns a transformers ``ModelOutput``
    hf_outputs: ClassVar[bool] = False
    #: where its head comes from (in the error for ``head: NAME``, which only python models take)
    head_origin: ClassVar[str] = "found by its library (head: true or false)"
    #: its data config fixes an input size (``zoorank init`` sets ``input_size`` to small images')
    config_input_size: ClassVar[bool] = False
    #: what ``zoorank zoo`` says when no head is looked for and ``head`` is not false
    headless_text: ClassVar[str] = "none"

    # ------------------------------------------------------------------ resolve

    def expand_names(self, spec: ModelSpec, label: str) -> list[str] | None:
        """The names a ``name`` glob stands for (cached hub models), or None: no glob here."""
        return None

    def check(self, spec: ModelSpec, label: str) -> Path | None:
        """ConfigError (naming ``label``) when the spec cannot name a model of this source; the
        model's weights directory where it has one."""
        return None

    def preprocessing(self, spec: ModelSpec, label: str,
                      directory: Path | None) -> tuple[Geometry, Normalization, str]:
        """(geometry, normalization, origin) of the model's own data config, before the spec's
        overrides: the native size and ImageNet statistics unless the source knows better."""
        from zoorank.zoo.preprocessing import DEFAULT_NORMALIZATION, NATIVE_GEOMETRY

        return NATIVE_GEOMETRY, DEFAULT_NORMALIZATION, "default"

    def head_search(self, spec: ModelSpec, label: str) -> HeadSearch | None:
        """The head found on the driver (python models); None elsewhere. ``head: NAME`` names
        a submodule, which only python models take: a ConfigError here."""
        if isinstance(spec.head, str):
            raise ConfigError(f"{label}: head: {spec.head!r} names a submodule, which only python "
                              f"models take; a {spec.source} model's head is {self.head_origin}")
        return None

    def pretrained_digest(self, spec: ModelSpec, label: str,
                          digests: DigestCache) -> tuple[str, str]:
        """(digest, ``repo@revision``) of the hub weights of a ``pretrained`` model."""
        raise ConfigError(f"{label}: pretrained: true is not supported by {self.name} models")

    def weights_digest(self, spec: ModelSpec, label: str, digests: DigestCache,
                       directory: Path | None) -> str | None:
        """sha256 of the weight bytes; None for a seeded random initialisation."""
        return combined_digest([digests.digest(spec.checkpoint)] if spec.checkpoint else [])

    # ------------------------------------------------------------------ build and load

    def reads_state_first(self, spec: ModelSpec) -> bool:
        """Whether the checkpoint is read before the build (its classifier sizes the network)."""
        return False

    def build(self, spec: ModelSpec, hub_cache: str | None,
              state: Any) -> tuple[nn.Module, dict[str, Any], str | None]:
        """(bare network, forward kwargs, the head it runs or None); weights of a directory or a
        file, else a seeded init (the caller seeds). ``state``: the checkpoint when
        :meth:`reads_state_first`."""
        raise NotImplementedError

    def drops_classifier(self, head: str | None) -> bool:
        """Whether the checkpoint's classifier is left out when it is loaded (a headless build)."""
        return False

    def built_head(self, resolved: Any, model: nn.Module,
                   head: str | None) -> tuple[str | None, bool]:
        """(the head the extractor runs, whether ``head: NAME`` named it) once weights are in."""
        return head, False

    # ------------------------------------------------------------------ size

    def meta_model(self, name: str, kwargs_json: str) -> nn.Module:
        """The headless network on the meta device (no memory, no weights); raises where it
        cannot be built without weights."""
        raise NotImplementedError(f"{self.name} models are not built without their weights")

    def loaded_bytes(self, meta: nn.Module) -> int:
        """Bytes of the parameters and buffers once loaded, from the meta build."""
        return sum(t.numel() * t.element_size() for t in meta.state_dict().values())

    def file_bytes(self, spec: ModelSpec) -> int | None:
        """Bytes of the weight files (where there is no meta build); None when unknown."""
        return file_size(spec.checkpoint) if spec.checkpoint else None

    # ------------------------------------------------------------------ inspect

    def head_classes(self, resolved: Any) -> tuple[str, int | None]:
        """(how the head is run or why there is none, its classes) as EMBED will find it."""
        return "none", 0

    def built_kwargs(self, network: nn.Module) -> dict[str, Any]:
        """``model_kwargs`` the built network fixed (an export rebuilds it with them)."""
        return {}

    def import_root(self, spec: ModelSpec) -> str | None:
        """The top-level module the actors must import to build the model (python factories)."""
        return None


def file_size(uri: str) -> int:
    """Bytes of a local file or object (0 when the store does not say)."""
    from zoorank.store import uris

    info = uris.stat(uri)
    return info.size if info is not None else 0


def combined_digest(parts: list[str]) -> str | None:
    """One digest of the weight parts: None without any, the part itself for one."""
    if not parts:
        return None
    return parts[0] if len(parts) == 1 else hashlib.sha256("+".join(parts).encode()).hexdigest()


def register(cls: _Source) -> _Source:
    """Class decorator: ``cls`` becomes the source of its :attr:`~ModelSource.name` (and the
    config accepts that name)."""
    if not cls.name:
        raise ValueError(f"{cls.__name__}: a model source needs a name")
    _REGISTRY[cls.name] = cls()
    MODEL_SOURCES[cls.name] = cls.traits
    return cls


def _discover() -> None:
    global _discovered
    if not _discovered:
        _discovered = True
        for module in pkgutil.iter_modules(__path__):
            importlib.import_module(f"{__name__}.{module.name}")


def get(name: str) -> ModelSource:
    """The source registered as ``name``; ConfigError naming the known ones otherwise."""
    _discover()
    try:
        return _REGISTRY[name]
    except KeyError:
        raise ConfigError(f"unknown model source {name!r}; the sources: "
                          + ", ".join(_REGISTRY)) from None


def names() -> list[str]:
    """The registered sources' names."""
    _discover()
    return list(_REGISTRY)
