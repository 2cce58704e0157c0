"""``source: transformers``: a Hugging Face model directory or a hub id of the local cache
(``org/model@revision``), loaded offline with its ``*ForImageClassification`` head where wanted."""

from __future__ import annotations

import contextlib
import hashlib
import json
from collections.abc import Iterator
from pathlib import Path
from typing import TYPE_CHECKING, Any

from zoorank.config import ModelSpec
from zoorank.config.model_spec import MODEL_SOURCES
from zoorank.errors import ConfigError
from zoorank.zoo import hub, specs
from zoorank.zoo.label_space import heads_wanted
from zoorank.zoo.preprocessing import (
    DEFAULT_GEOMETRY,
    DEFAULT_NORMALIZATION,
    PIL_RESAMPLE,
    Geometry,
    Normalization,
)
from zoorank.zoo.sources import ModelSource, combined_digest, register

if TYPE_CHECKING:
    from torch import nn

    from zoorank.store.uris import DigestCache


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

    name, revision = hub.transformers_revision(directory)  # org/model@rev: that revision, offline
    config = AutoConfig.from_pretrained(name, revision=revision, local_files_only=True,
                                        cache_dir=specs.hub_cache(hub_cache))
    if getattr(config, "vision_config", None) is not None:
        vision = getattr(
            transformers, type(config).__name__.removesuffix("Config") + "VisionModel", None
        )
        if vision is not None:
            return vision, config
    return AutoModel, config


def transformers_head(config: Any, spec: ModelSpec) -> bool:
    """Whether a transformers model is loaded with its image-classification head."""
    if not heads_wanted(spec) or getattr(config, "vision_config", None) is not None:
        return False
    return any(str(a).endswith("ForImageClassification")
               for a in getattr(config, "architectures", None) or ())


def transformers_preprocessing(
    spec: ModelSpec, label: str, directory: Path | None = None
) -> tuple[Geometry, Normalization]:
    """``preprocessor_config.json`` of the directory, else ``config.json``'s image_size.

    A processor that center-crops ``crop_size`` from a resize to ``shortest_edge`` gives
    ``crop_pct = crop / shortest_edge``; one that resizes straight to ``size`` gives 1.0.
    """
    directory = directory or Path(spec.name).expanduser()
    config_file = directory / "config.json"
    if not config_file.is_file():
        raise ConfigError(
            f"{label}: {directory} is not a transformers model directory (no config.json)"
        )
    geometry, normalization = DEFAULT_GEOMETRY, DEFAULT_NORMALIZATION
    config = json.loads(config_file.read_text())
    image_size = specs.image_side(
        config.get("image_size") or config.get("vision_config", {}).get("image_size")
    )
    if image_size:
        geometry = Geometry(image_size, geometry.interpolation, geometry.crop_pct)
    processor_file = directory / "preprocessor_config.json"
    if processor_file.is_file():
        proc = json.loads(processor_file.read_text())
        size, crop = specs.image_side(proc.get("size")), specs.image_side(proc.get("crop_size"))
        if proc.get("do_center_crop", crop is not None) and crop and size:
            geometry = Geometry(crop, geometry.interpolation, min(1.0, crop / size))
        elif size:
            geometry = Geometry(size, geometry.interpolation, 1.0)
        resample = proc.get("resample")
        interpolation = PIL_RESAMPLE.get(resample, "bicubic") if resample is not None else None
        geometry = Geometry(
            geometry.input_size, interpolation or geometry.interpolation, geometry.crop_pct
        )
        normalization = Normalization(
            tuple(proc.get("image_mean") or normalization.mean),
            tuple(proc.get("image_std") or normalization.std),
        )
    return geometry, normalization


def _directory_digest(directory: Path, digests: DigestCache) -> str:
    h = hashlib.sha256()
    for file in sorted(p for p in directory.rglob("*") if p.is_file()):
        relative = file.relative_to(directory).as_posix()
        if relative.startswith(".") or "/." in relative:
            continue  # caches and lock files of hub tooling
        h.update(f"{relative}\0{digests.digest(str(file))}\n".encode())
    return h.hexdigest()


@register
class TransformersSource(ModelSource):
    """Hugging Face transformers vision models (a vision tower of a multimodal model alone)."""

    name = "transformers"
    traits = MODEL_SOURCES["transformers"]
    name_in_fingerprint = False  # the directory's digest covers it
    hf_outputs = True

    def check(self, spec: ModelSpec, label: str) -> Path | None:
        return hub.transformers_directory(spec.name, label)

    def preprocessing(self, spec: ModelSpec, label: str,
                      directory: Path | None) -> tuple[Geometry, Normalization, str]:
        return *transformers_preprocessing(spec, label, directory), "transformers"

    def weights_digest(self, spec: ModelSpec, label: str, digests: DigestCache,
                       directory: Path | None) -> str | None:
        parts = [_directory_digest(directory, digests)] if directory is not None else []
        return combined_digest(parts + ([digests.digest(spec.checkpoint)] if spec.checkpoint else []))

    def build(self, spec: ModelSpec, hub_cache: str | None,
              state: Any) -> tuple[nn.Module, dict[str, Any], str | None]:
        with quiet_transformers():
            cls, config = transformers_class(spec.name, hub_cache)
            head = transformers_head(config, spec)
            if head:
                from transformers import AutoModelForImageClassification as cls

            name, revision = hub.transformers_revision(spec.name)
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

    def meta_model(self, name: str, kwargs_json: str) -> nn.Module:
        import torch

        with quiet_transformers():
            cls, config = transformers_class(name)
            with torch.device("meta"):
                return cls.from_config(config)

    def loaded_bytes(self, meta: nn.Module) -> int:
        return sum(t.numel() * 4 for t in meta.state_dict().values())  # loaded as float32

    def file_bytes(self, spec: ModelSpec) -> int | None:
        if spec.checkpoint:
            return super().file_bytes(spec)
        return sum(p.stat().st_size for p in Path(spec.name).expanduser().rglob("*")
                   if p.suffix in (".safetensors", ".bin"))

    def head_classes(self, resolved: Any) -> tuple[str, int | None]:
        _, config = transformers_class(resolved.spec.name, resolved.hub_cache)
        if not transformers_head(config, resolved.spec):
            return "none (not an *ForImageClassification model)", 0
        return "transformers *ForImageClassification", int(config.num_labels)
