"""Image decoding: encoded bytes, a file or a uint8 array → an upright RGB ``PIL.Image``.

Conventions:

- Images are decoded with Pillow to RGB (grayscale is replicated to three channels), upright (EXIF
  orientation applied), first frame of an animation, 16-bit and float images mapped to 8 bits by
  their range, transparency composited onto white; memory per image is bounded by a pixel cap and
  a JPEG's DCT reduction (:func:`decode_image`).
"""

from __future__ import annotations

import io
from pathlib import Path
from typing import Any

import numpy as np
from PIL import Image, ImageOps

from zoorank.data.sources import to_uint8_images
from zoorank.errors import InputError


class BadImageError(InputError):
    """An image that cannot be decoded; the message names the file or sample."""



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
