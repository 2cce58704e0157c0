"""Preprocessing of a model's input: :class:`Geometry` (resize + centre crop) and :class:`Normalization`.

Resolved from timm's data config (``resolve_data_config``), a transformers directory's
``preprocessor_config.json``/``config.json``, or the defaults, and overridden field by field by the
model spec (``input_size``, ``interpolation``, ``crop_pct``, ``mean``, ``std``).
"""

from __future__ import annotations

import math
from dataclasses import dataclass
from typing import Any

from zoorank.config import ModelSpec

IMAGENET_MEAN = (0.485, 0.456, 0.406)
IMAGENET_STD = (0.229, 0.224, 0.225)


PIL_RESAMPLE = {0: "nearest", 2: "bilinear", 3: "bicubic"}


@dataclass(frozen=True)
class Geometry:
    """How a clean image becomes the model's input (models with equal Geometry share decoding).

    Clean view (timm's eval transform): resize the shorter side to ``resize_size``, then
    center-crop ``input_size`` × ``input_size``.
    """

    input_size: int
    interpolation: str  # "bilinear" | "bicubic" | "nearest"
    crop_pct: float

    @property
    def resize_size(self) -> int:
        # timm's transforms_factory uses floor (224 / 0.95 -> 235), not round.
        return math.floor(self.input_size / self.crop_pct)


@dataclass(frozen=True)
class Normalization:
    """Per-channel ``(x - mean) / std`` on RGB values scaled to [0, 1]."""

    mean: tuple[float, float, float]
    std: tuple[float, float, float]


DEFAULT_GEOMETRY = Geometry(input_size=224, interpolation="bicubic", crop_pct=0.875)
DEFAULT_NORMALIZATION = Normalization(mean=IMAGENET_MEAN, std=IMAGENET_STD)
#: models without a data config of their own (python, torchscript): no zoom, so an image that
#: already has the input size is used pixel for pixel.
NATIVE_GEOMETRY = Geometry(input_size=224, interpolation="bicubic", crop_pct=1.0)
_OVERRIDES = ("input_size", "interpolation", "crop_pct", "mean", "std")


def with_overrides(
    spec: ModelSpec, base: Geometry, normalization: Normalization, origin: str
) -> tuple[Geometry, Normalization, str]:
    """(geometry, normalization, origin) of a model spec, from its source's own data config.

    The base is the model's own data config (timm's ``resolve_data_config``, a transformers
    processor: :meth:`zoorank.zoo.sources.ModelSource.preprocessing`) or, for python/torchscript
    models, :data:`NATIVE_GEOMETRY` and ImageNet statistics; each of ``input_size``,
    ``interpolation``, ``crop_pct``, ``mean``, ``std`` set in the spec overrides it. An
    ``input_size`` other than the data config's, without a ``crop_pct``, gets ``crop_pct`` 1.0:
    the config's crop was chosen for its own size, and zooming a native-size image (a CIFAR net
    at 32 px) by 1/0.875 costs accuracy. ``origin`` says where the values came from, e.g.
    ``"timm"``, ``"default + config (input_size)"``.
    """
    crop_pct = spec.crop_pct
    notes = [f for f in _OVERRIDES if getattr(spec, f) is not None]
    if (crop_pct is None and spec.input_size and spec.input_size != base.input_size
            and base.crop_pct != 1.0):
        crop_pct = 1.0
        notes.append("crop_pct 1.0 as input_size is not the data config's")
    geometry = Geometry(
        input_size=spec.input_size or base.input_size,
        interpolation=spec.interpolation or base.interpolation,
        crop_pct=crop_pct or base.crop_pct,
    )
    normalization = Normalization(
        mean=tuple(spec.mean or normalization.mean), std=tuple(spec.std or normalization.std)
    )
    if notes:
        origin += f" + config ({', '.join(notes)})"
    return geometry, normalization, origin


def describe_preprocessing(resolved: Any) -> str:
    """One line for a resolved model's preprocessing, e.g.
    ``resize 36 bicubic, crop 32 (crop_pct 0.875), mean (0.485, 0.456, 0.406) std (...) [timm]``.

    With ``crop_pct`` 1.0 an image that already has the input size is not resampled (others are
    resized to it).
    """
    g, n = resolved.geometry, resolved.normalization
    rounded = lambda values: "(" + ", ".join(f"{v:.4g}" for v in values) + ")"  # noqa: E731
    resize = (f"resize {g.resize_size} {g.interpolation}" if g.crop_pct < 1.0
              else f"resize only if not {g.input_size}px ({g.interpolation})")
    return (f"{resize}, crop {g.input_size} (crop_pct {g.crop_pct:g}), "
            f"mean {rounded(n.mean)} std {rounded(n.std)} [{resolved.preprocessing_origin}]")
