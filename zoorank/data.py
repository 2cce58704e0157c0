"""Datasets and views: stable sample lists, image decoding, the clean view and augmentation recipes.

Conventions:

- ``sample_id`` (int64) is stable for a dataset: the row index in a Parquet file, the index of the
  file in the sorted list of relative paths of an image folder, the index in scikit-learn's digits or
  in a ``.npz`` array (sources, indexing and streaming reads: :mod:`zoorank.sources`). ``limit``
  keeps a seeded, sorted subset of those ids.
- Images are decoded with Pillow to RGB (grayscale is replicated to three channels), upright (EXIF
  orientation applied), first frame of an animation, 16-bit and float images mapped to 8 bits by
  their range, transparency composited onto white; memory per image is bounded by a pixel cap and
  a JPEG's DCT reduction (:func:`decode_image`).
- The clean view is timm's eval transform: resize the shorter side to
  ``floor(input_size / crop_pct)``, then center-crop ``input_size`` (PIL resampling, as timm).
- Augmented views draw from an independent ``numpy.random.Generator`` per
  (seed, sample_id, view_index) made by ``numpy.random.SeedSequence``, never from torch's global RNG,
  so reruns and every model see identical views.
"""

from __future__ import annotations

import dataclasses
import io
import math
from collections.abc import Callable, Sequence
from dataclasses import dataclass
from pathlib import Path
from typing import TYPE_CHECKING, Any, NamedTuple, Protocol

import numpy as np
import pandas as pd
from PIL import Image, ImageEnhance, ImageFilter, ImageOps

from zoorank.errors import ConfigError, InputError
from zoorank.sources import (  # noqa: F401  (re-exported)
    IMAGE_EXTENSIONS,
    UNREADABLE,
    SampleIndex,
    select_subset,
    to_uint8_images,
)
from zoorank.store.layout import samples_table

if TYPE_CHECKING:
    from zoorank.config import DatasetSpec, ViewSpec
    from zoorank.store import Store

SAMPLES_COLUMNS = ["sample_id", "label", "label_name", "source"]

_INTERPOLATION = {
    "bilinear": Image.Resampling.BILINEAR,
    "bicubic": Image.Resampling.BICUBIC,
    "nearest": Image.Resampling.NEAREST,
}


class BadImageError(InputError):
    """An image that cannot be decoded; the message names the file or sample."""


class GeometryLike(Protocol):
    """What the views need of ``zoorank.zoo.Geometry``."""

    input_size: int
    interpolation: str
    crop_pct: float


# -- sample lists ----------------------------------------------------------------------------------
def load_samples(spec: DatasetSpec, seed: int) -> SampleIndex:
    """The dataset's index with its encoded ``images`` read here (small sets only).

    For probe sets and tests; the EMBED stage never holds the images on the driver (it indexes with
    :func:`zoorank.sources.index_samples` and streams with :func:`zoorank.sources.read_encoded`).
    ``limit`` keeps a seeded sorted subset.
    """
    from zoorank.sources import index_samples, read_unit, read_units

    index = index_samples(spec, seed)
    if index.kind == "memory":
        images = [index.arrays[int(s)] for s in index.sample_id]
    else:
        images = []
        for unit in read_units(index, index.sample_id):
            for block in read_unit(index, unit):
                images += list(block["payload"])
    return dataclasses.replace(index, images=images)


def samples_path(dataset: str) -> str:
    """The dataset's samples/labels table (a Delta table; :mod:`zoorank.store.layout`)."""
    return samples_table(dataset)


def write_samples(store: Store, dataset: str, table: SampleIndex) -> None:
    """Keep the ``datasets/<dataset>/samples`` table (sample_id, label, label_name, source);
    committed only when its rows change."""
    store.replace_table(samples_path(dataset), table.frame())


def read_samples(store: Store, dataset: str) -> pd.DataFrame:
    """The sample list EMBED wrote for ``dataset`` (labels by sample_id for SCORE and the oracle)."""
    if not store.table_exists(samples_path(dataset)):
        raise InputError(f"no sample list for dataset {dataset!r} in {store.name}; run embed first")
    df = store.read_frame(samples_path(dataset))
    df["sample_id"] = df["sample_id"].astype("int64")
    df["label"] = df["label"].astype("Int64")
    return df[SAMPLES_COLUMNS]


# -- decoding --------------------------------------------------------------------------------------
#: the most pixels one image may hold once decoded (after a JPEG's DCT reduction): 48 Mpx is
#: 144 MB as RGB. Larger images are undecodable with that reason, whatever Pillow's own bomb limit.
MAX_DECODE_PIXELS = 48_000_000
#: background that transparent pixels (RGBA, LA, palette with transparency) are composited onto.
ALPHA_BACKGROUND = (255, 255, 255)
#: modes whose values are not 8-bit: mapped to 0..255 by their range (:func:`_to_8bit`).
_WIDE_MODES = ("I;16", "I;16L", "I;16B", "I;16N", "I", "F")


def _to_8bit(img: Image.Image) -> Image.Image:
    """A 16/32-bit integer or float image → ``L`` by its real range.

    ``I;16*`` spans 0..65535: value / 257 (the 8-bit copy of 16-bit data). ``I`` (32-bit) is taken as
    8-bit when its values are within 0..255, as 16-bit within 0..65535, else min–max scaled. ``F``
    within [0, 1] is scaled by 255, else min–max scaled. Pillow's ``convert`` clips instead, which
    turns a 16-bit photo almost white.
    """
    arr = np.asarray(img)
    if img.mode.startswith("I;16"):
        out = np.rint(arr.astype(np.float64) / 257.0)
    else:
        a = arr.astype(np.float64)
        finite = a[np.isfinite(a)]
        lo, hi = (float(finite.min()), float(finite.max())) if finite.size else (0.0, 0.0)
        if img.mode == "F" and lo >= 0.0 and hi <= 1.0:
            out = np.rint(a * 255.0)
        elif img.mode == "I" and lo >= 0 and hi <= 255:
            out = a
        elif img.mode == "I" and lo >= 0 and hi <= 65535:
            out = np.rint(a / 257.0)
        else:
            out = np.rint((a - lo) * (255.0 / (hi - lo))) if hi > lo else np.zeros_like(a)
        out = np.nan_to_num(out, nan=0.0)
    return Image.fromarray(np.clip(out, 0, 255).astype(np.uint8), "L")


def _to_rgb(img: Image.Image) -> Image.Image:
    """Any Pillow mode → RGB: wide modes by their range, transparency composited onto
    :data:`ALPHA_BACKGROUND`, CMYK/YCbCr/L/1/P by Pillow's conversions."""
    if img.mode == "RGB":
        return img
    if img.mode in _WIDE_MODES:
        return _to_8bit(img).convert("RGB")
    if img.mode == "P" and "transparency" in img.info or img.mode in ("PA", "LA", "La", "RGBa"):
        img = img.convert("RGBA")
    if img.mode == "RGBA":
        bg = Image.new("RGB", img.size, ALPHA_BACKGROUND)
        bg.paste(img, mask=img.getchannel("A"))
        return bg
    return img.convert("RGB")


def decode_image(source: Any, name: str | None = None) -> Image.Image:
    """Encoded bytes, a file path or a uint8 array → an upright RGB ``PIL.Image`` of its first frame.

    Memory stays bounded per image: the header's size is checked before any pixel is decoded
    (Pillow's bomb check, then :data:`MAX_DECODE_PIXELS`); a JPEG over the cap is decoded at 1/2,
    1/4 or 1/8 scale (Pillow's ``draft``) instead. Smaller images decode at full size whatever the
    model, so every caller (EMBED, the Tune probe, tests) gets the same pixels. The
    EXIF orientation is applied (``ImageOps.exif_transpose``); 16-bit and float images are mapped to
    8 bits by their range; transparency is composited onto :data:`ALPHA_BACKGROUND`; an animation
    gives its first frame.

    Raises :class:`BadImageError` (an InputError) naming ``name`` (or the path) when the source cannot
    be decoded, with the reason.
    """
    what = name or (str(source) if isinstance(source, str | Path) else "image bytes")
    if source is None or (isinstance(source, bytes | bytearray | memoryview) and not len(source)):
        raise BadImageError(f"cannot decode {what}: no image bytes (null or empty)")
    try:
        if isinstance(source, np.ndarray):
            arr = source
            if arr.ndim == 3 and arr.shape[-1] == 1:
                arr = arr[..., 0]
            if arr.dtype != np.uint8:
                arr = to_uint8_images(arr[None], what)[0]
            img = Image.fromarray(arr)
        else:
            if isinstance(source, bytes | bytearray | memoryview):
                img = Image.open(io.BytesIO(bytes(source)))
            elif isinstance(source, str | Path):
                img = Image.open(source)
            else:
                raise BadImageError(f"{what}: unsupported image source {type(source).__name__}")
            w, h = img.size
            if img.format == "JPEG" and w * h > MAX_DECODE_PIXELS:
                # a JPEG over the cap decodes at 1/2, 1/4 or 1/8 scale (DCT reduction, Pillow's
                # draft): a 12000² photo decodes as 6000² and never holds 432 MB of pixels.
                s = next((k for k in (2, 4) if (w // k) * (h // k) <= MAX_DECODE_PIXELS), 8)
                img.draft(img.mode, (max(1, w // s), max(1, h // s)))
            w, h = img.size
            if w * h > MAX_DECODE_PIXELS:
                raise BadImageError(
                    f"cannot decode {what}: {w}×{h} = {w * h / 1e6:.0f} Mpx is more than the "
                    f"{MAX_DECODE_PIXELS / 1e6:.0f} Mpx zoorank decodes per image")
            img.seek(0)  # an animation's first frame
            img.load()  # decode now, so truncated or corrupt data fails here
            img = ImageOps.exif_transpose(img)
        return _to_rgb(img)
    except BadImageError:
        raise
    except (OSError, ValueError, SyntaxError, Image.DecompressionBombError, TypeError,
            EOFError) as err:
        raise BadImageError(f"cannot decode {what}: {type(err).__name__}: {err}") from None


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
    (``name`` starting with :data:`zoorank.sources.UNREADABLE`) is flagged the same way with that
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
