"""Views: the clean view and the augmentation recipes of a decoded image, and the decode-and-view
step of the EMBED pipeline.

Conventions:

- The clean view is timm's eval transform: resize the shorter side to
  ``floor(input_size / crop_pct)``, then center-crop ``input_size`` (PIL resampling, as timm).
- Augmented views draw from an independent ``numpy.random.Generator`` per
  (seed, sample_id, view_index) made by ``numpy.random.SeedSequence``, never from torch's global RNG,
  so reruns and every model see identical views.
"""

from __future__ import annotations

import math
from collections.abc import Callable, Sequence
from dataclasses import dataclass
from typing import TYPE_CHECKING, NamedTuple, Protocol

import numpy as np
from PIL import Image, ImageEnhance, ImageFilter

from zoorank.data.images import decode_image
from zoorank.data.sample_reader import UNREADABLE
from zoorank.data.sources import select_subset
from zoorank.errors import ConfigError, InputError

if TYPE_CHECKING:
    from zoorank.config import ViewSpec

_INTERPOLATION = {
    "bilinear": Image.Resampling.BILINEAR,
    "bicubic": Image.Resampling.BICUBIC,
    "nearest": Image.Resampling.NEAREST,
}



class GeometryLike(Protocol):
    """What the views need of ``zoorank.zoo.Geometry``."""

    input_size: int
    interpolation: str
    crop_pct: float


# -- views -----------------------------------------------------------------------------------------
def _resample(geometry: GeometryLike) -> Image.Resampling:
    try:
        return _INTERPOLATION[geometry.interpolation]
    except KeyError:
        raise ConfigError(f"unknown interpolation {geometry.interpolation!r}; "
                          f"known: {sorted(_INTERPOLATION)}") from None


#: aspect ratios beyond this resample only the center crop's box (:func:`clean_view`).
EXTREME_ASPECT = 4
def clean_view(img: Image.Image, geometry: GeometryLike) -> np.ndarray:
    """timm's eval transform: shorter side → floor(input_size / crop_pct), center crop → uint8 HWC."""
    size = int(geometry.input_size)
    scale = int(math.floor(size / geometry.crop_pct))
    w, h = img.size
    # torchvision's Resize(int): the shorter side becomes `scale`, the longer one is truncated.
    if w <= h:
        new_w, new_h = scale, int(scale * h / w)
    else:
        new_w, new_h = int(scale * w / h), scale
    top = int(round((new_h - size) / 2.0))
    left = int(round((new_w - size) / 2.0))
    if new_w * new_h > EXTREME_ASPECT * scale * scale:
        # a 1×20000 strip would resize to 256 × 5,120,000 px (3.9 GB) before the crop: resample the
        # crop's box of the source only (the same pixels up to the filter's support at its edges).
        sx, sy = w / new_w, h / new_h
        box = (left * sx, top * sy, (left + size) * sx, (top + size) * sy)
        return np.array(img.resize((size, size), _resample(geometry), box=box), dtype=np.uint8)
    if (new_w, new_h) != (w, h):
        img = img.resize((new_w, new_h), _resample(geometry))
    out = np.array(img.crop((left, top, left + size, top + size)), dtype=np.uint8)
    return out


def _random_resized_crop(
    img: Image.Image,
    size: int,
    resample: Image.Resampling,
    rng: np.random.Generator,
    scale: tuple[float, float] = (0.08, 1.0),
    ratio: tuple[float, float] = (3 / 4, 4 / 3),
) -> Image.Image:
    """torchvision's RandomResizedCrop sampling (10 tries, then a center crop), with our RNG."""
    w, h = img.size
    area = w * h
    log_ratio = (math.log(ratio[0]), math.log(ratio[1]))
    box = None
    for _ in range(10):
        target_area = area * rng.uniform(scale[0], scale[1])
        aspect = math.exp(rng.uniform(log_ratio[0], log_ratio[1]))
        cw = int(round(math.sqrt(target_area * aspect)))
        ch = int(round(math.sqrt(target_area / aspect)))
        if 0 < cw <= w and 0 < ch <= h:
            top = int(rng.integers(0, h - ch + 1))
            left = int(rng.integers(0, w - cw + 1))
            box = (left, top, left + cw, top + ch)
            break
    if box is None:
        in_ratio = w / h
        if in_ratio < ratio[0]:
            cw, ch = w, int(round(w / ratio[0]))
        elif in_ratio > ratio[1]:
            cw, ch = int(round(h * ratio[1])), h
        else:
            cw, ch = w, h
        top, left = (h - ch) // 2, (w - cw) // 2
        box = (left, top, left + cw, top + ch)
    return img.resize((size, size), resample, box=box)


def _adjust_hue(img: Image.Image, factor: float) -> Image.Image:
    h, s, v = img.convert("HSV").split()
    # torchvision's PIL convention: the shift truncates toward zero and wraps around.
    shifted = (np.asarray(h, dtype=np.int16) + int(factor * 255)) % 256
    h = Image.fromarray(shifted.astype(np.uint8), "L")
    return Image.merge("HSV", (h, s, v)).convert("RGB")


def _color_jitter(
    img: Image.Image,
    rng: np.random.Generator,
    brightness: float,
    contrast: float,
    saturation: float,
    hue: float,
) -> Image.Image:
    """torchvision's ColorJitter on PIL images: the four adjustments in a random order."""
    b = rng.uniform(max(0.0, 1 - brightness), 1 + brightness)
    c = rng.uniform(max(0.0, 1 - contrast), 1 + contrast)
    s = rng.uniform(max(0.0, 1 - saturation), 1 + saturation)
    hf = rng.uniform(-hue, hue)
    for op in rng.permutation(4):
        if op == 0:
            img = ImageEnhance.Brightness(img).enhance(b)
        elif op == 1:
            img = ImageEnhance.Contrast(img).enhance(c)
        elif op == 2:
            img = ImageEnhance.Color(img).enhance(s)
        else:
            img = _adjust_hue(img, hf)
    return img


def simclr_view(img: Image.Image, geometry: GeometryLike, rng: np.random.Generator) -> np.ndarray:
    """SimCLR (Chen et al. 2020): random resized crop (0.08, 1), flip, colour jitter
    (0.4, 0.4, 0.4, 0.1) p=0.8, grayscale p=0.2, gaussian blur p=0.5.

    The blur's sigma range (0.1, 2.0) is for 224 px inputs; it scales with ``input_size / 224``, so
    tiny images (CIFAR, digits) are barely blurred, as in SimCLR's CIFAR recipe.
    """
    size = int(geometry.input_size)
    out = _random_resized_crop(img, size, _resample(geometry), rng)
    # Every draw below happens whether or not it is applied, so one view's draws never shift with the
    # outcome of another coin.
    flip = rng.random() < 0.5
    jitter = rng.random() < 0.8
    jitter_rng = np.random.default_rng(rng.integers(0, 2**63))
    gray = rng.random() < 0.2
    blur = rng.random() < 0.5
    sigma = rng.uniform(0.1, 2.0) * min(1.0, size / 224.0)
    if flip:
        out = out.transpose(Image.Transpose.FLIP_LEFT_RIGHT)
    if jitter:
        out = _color_jitter(out, jitter_rng, 0.4, 0.4, 0.4, 0.1)
    if gray:
        out = out.convert("L").convert("RGB")
    if blur:
        out = out.filter(ImageFilter.GaussianBlur(radius=sigma))
    return np.array(out, dtype=np.uint8)  # writable (torch.from_numpy needs it)


def _clean_recipe(img: Image.Image, geometry: GeometryLike, rng: np.random.Generator) -> np.ndarray:
    return clean_view(img, geometry)


Recipe = Callable[[Image.Image, GeometryLike, np.random.Generator], np.ndarray]

#: view recipes by name: (decoded RGB image, geometry, rng) → uint8 (input_size, input_size, 3).
VIEW_RECIPES: dict[str, Recipe] = {
    "clean": _clean_recipe,
    "simclr": simclr_view,
}


def get_recipe(recipe: str, view: str | None = None) -> Recipe:
    """The recipe function; ConfigError naming the view when the recipe is unknown."""
    try:
        return VIEW_RECIPES[recipe]
    except KeyError:
        who = f"views: {view!r}: " if view else ""
        raise ConfigError(f"{who}unknown view recipe {recipe!r}; known: {sorted(VIEW_RECIPES)}") \
            from None


def check_views(views: Sequence[ViewSpec]) -> None:
    """Every view names a known recipe (ConfigError naming the view otherwise)."""
    for v in views:
        get_recipe(v.recipe_name, v.name)


def view_rng(seed: int, sample_id: int, view_index: int) -> np.random.Generator:
    """The independent RNG of one view: SeedSequence((seed, sample_id, view_index))."""
    return np.random.default_rng(np.random.SeedSequence([int(seed), int(sample_id),
                                                         int(view_index)]))


def augment(
    img: Image.Image, recipe: str, geometry: GeometryLike, rng: np.random.Generator
) -> np.ndarray:
    """One view of ``img`` by ``recipe`` → uint8 (input_size, input_size, 3)."""
    return get_recipe(recipe)(img, geometry, rng)


def make_views(
    img: Image.Image, sample_id: int, recipe: str, geometry: GeometryLike, q: int, seed: int
) -> list[np.ndarray]:
    """The ``q`` views (view_index 0..q-1) of one sample, each from its own seeded RNG."""
    fn = get_recipe(recipe)
    return [fn(img, geometry, view_rng(seed, sample_id, i)) for i in range(q)]


def view_subset(sample_ids: np.ndarray, view: ViewSpec, seed: int) -> np.ndarray:
    """The samples a view covers: all for ``clean``; a seeded ``samples``-subset for augmented views.

    The subset depends on (seed, n) only, so augmented views with the same ``samples`` share samples.
    """
    return select_subset(sample_ids, view.samples, seed, salt=1)


# -- decoding and views in the EMBED pipeline (Ray tasks; no torch is imported here) ---------------
class ViewGeometry(NamedTuple):
    """A plain copy of ``zoorank.zoo.Geometry`` (sending the zoo's class would import torch)."""

    input_size: int
    interpolation: str
    crop_pct: float


@dataclass(frozen=True)
class ViewPlan:
    """A view to make in a pipeline: its recipe, q, and the sample_ids it covers (sorted)."""

    name: str
    recipe: str
    per_sample: int
    samples: np.ndarray
    is_clean: bool = False

    def covers(self, sample_id: int) -> bool:
        i = np.searchsorted(self.samples, sample_id)
        return bool(i < len(self.samples) and self.samples[i] == sample_id)


def decode_views(
    batch: dict[str, np.ndarray], geometry: GeometryLike, plans: list[ViewPlan], seed: int
) -> dict[str, np.ndarray]:
    """Decode each sample (columns sample_id, payload, name) once and make every planned view.

    Returns rows (sample_id, view, view_index, image uint8 HWC, bad, error). A sample that cannot
    be decoded gives one row per view it belongs to, flagged ``bad`` with the message in ``error``
    and a black image, so the embedding actors can count it. A sample whose bytes could not be read
    (``name`` starting with :data:`zoorank.data.sample_reader.UNREADABLE`) is flagged the same way with that
    ``error``, so the view cache can tell it from an undecodable image.
    """
    size = geometry.input_size
    black = np.zeros((size, size, 3), dtype=np.uint8)
    rows: list[tuple[int, str, int, np.ndarray, bool, str]] = []
    for sid, payload, name in zip(batch["sample_id"], batch["payload"], batch["name"]):
        sid = int(sid)
        members = [p for p in plans if p.covers(sid)]
        if not members:
            continue
        if payload is None and str(name).startswith(UNREADABLE):  # a read failure, not an image's
            rows += [(sid, p.name, 0, black, True, str(name)) for p in members]
            continue
        try:
            img = decode_image(payload, name=str(name))
        except InputError as err:
            rows += [(sid, p.name, 0, black, True, str(err)) for p in members]
            continue
        for p in members:
            if p.is_clean:
                view = clean_view(img, geometry)
                rows += [(sid, p.name, i, view, False, "") for i in range(p.per_sample)]
            else:
                views = make_views(img, sid, p.recipe, geometry, p.per_sample, seed)
                rows += [(sid, p.name, i, v, False, "") for i, v in enumerate(views)]
    return {
        "sample_id": np.asarray([r[0] for r in rows], dtype=np.int64),
        "view": np.asarray([r[1] for r in rows], dtype=object),
        "view_index": np.asarray([r[2] for r in rows], dtype=np.int32),
        "image": (np.stack([r[3] for r in rows]) if rows
                  else np.zeros((0, size, size, 3), dtype=np.uint8)),
        "bad": np.asarray([r[4] for r in rows], dtype=bool),
        "error": np.asarray([r[5] for r in rows], dtype=object),
    }
