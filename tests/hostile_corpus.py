"""A corpus of hostile image files and datasets, generated at test time (no binary blobs committed).

Each image case is ``(file name, encoded bytes, outcome)`` where outcome is ``"embedded"`` (decodes
to a defined image) or ``"skipped"`` (an undecodable image: skipped and counted with its reason).
The reference pictures are seeded, smooth and structured (gradients and blocks), so a rotated,
clipped or wrong-frame decode is far from the right one.
"""

from __future__ import annotations

import io
import struct
import zlib
from dataclasses import dataclass
from pathlib import Path

import numpy as np
from PIL import Image

#: the upright reference photo's size (width, height): not square, so a sideways decode differs in
#: shape as well as in pixels; multiples of 16 keep JPEG blocks aligned when rotated.
PHOTO_SIZE = (96, 64)


@dataclass(frozen=True)
class Case:
    name: str
    data: bytes
    outcome: str  # "embedded" | "skipped"
    reason: str = ""  # a word the skip reason contains


def photo(size: tuple[int, int] = PHOTO_SIZE, seed: int = 0) -> np.ndarray:
    """A seeded structured RGB picture (H, W, 3) uint8: two gradients and a few solid blocks."""
    w, h = size
    rng = np.random.default_rng(seed)
    y, x = np.mgrid[0:h, 0:w]
    img = np.stack([x * 255 // max(1, w - 1), y * 255 // max(1, h - 1),
                    (x + y) * 255 // max(1, w + h - 2)], axis=-1).astype(np.uint8)
    for _ in range(4):
        x0, y0 = int(rng.integers(0, w // 2)), int(rng.integers(0, h // 2))
        img[y0:y0 + h // 4, x0:x0 + w // 4] = rng.integers(0, 256, 3)
    return img


def encode(img: Image.Image, fmt: str, **kw) -> bytes:
    buf = io.BytesIO()
    img.save(buf, format=fmt, **kw)
    return buf.getvalue()


def upright_jpeg() -> bytes:
    return encode(Image.fromarray(photo()), "JPEG", quality=95, subsampling=0)


def exif_rotated_jpeg() -> bytes:
    """The upright photo stored turned 90° counter-clockwise, tagged orientation 6 (turn it back
    90° clockwise to view), as phones write portrait shots."""
    stored = Image.fromarray(photo()).transpose(Image.Transpose.ROTATE_90)
    exif = Image.Exif()
    exif[0x0112] = 6
    return encode(stored, "JPEG", quality=95, subsampling=0, exif=exif.tobytes())


def gray16_png() -> tuple[bytes, np.ndarray]:
    """A 16-bit grayscale gradient spanning 0..65535, and its 8-bit copy (value / 257)."""
    ramp = np.linspace(0, 65535, 128).round().astype(np.uint16)
    arr = np.tile(ramp, (32, 1))
    img = Image.fromarray(arr)  # mode I;16
    return encode(img, "PNG"), np.rint(arr / 257.0).astype(np.uint8)


def palette_alpha_png() -> bytes:
    """A palette image whose left half is fully transparent (palette index 0) and right half red."""
    img = Image.new("P", (32, 16), 0)
    img.putpalette([0, 0, 0, 255, 0, 0] + [0] * (254 * 3))
    img.paste(1, (16, 0, 32, 16))
    return encode(img, "PNG", transparency=0)


def animated_gif() -> bytes:
    """Two frames: red, then blue (the first frame is the sample)."""
    red = Image.new("RGB", (16, 16), (255, 0, 0))
    blue = Image.new("RGB", (16, 16), (0, 0, 255))
    return encode(red, "GIF", save_all=True, append_images=[blue], duration=100, loop=0)


def bomb_png(width: int = 40000, height: int = 40000) -> bytes:
    """A tiny valid PNG whose header claims ``width × height`` (more than Pillow's bomb limit)."""
    data = encode(Image.new("L", (8, 8)), "PNG")
    ihdr = struct.pack(">IIBBBBB", width, height, 8, 0, 0, 0, 0)
    chunk = b"IHDR" + ihdr
    start = data.index(b"IHDR") - 4
    return (data[:start] + struct.pack(">I", len(ihdr)) + chunk
            + struct.pack(">I", zlib.crc32(chunk) & 0xFFFFFFFF) + data[start + 8 + 13 + 4:])


def image_cases(big: bool = True) -> list[Case]:
    """The hostile image corpus; ``big`` adds the 12000² images (≈ 1 s and 150 MB to make)."""
    good = upright_jpeg()
    rgb = Image.fromarray(photo())
    cases = [
        Case("upright.jpg", good, "embedded"),
        Case("exif-rotated.jpg", exif_rotated_jpeg(), "embedded"),
        Case("truncated.jpg", good[: len(good) // 2], "skipped", "truncated"),
        Case("zero-bytes.jpg", b"", "skipped", "no image bytes"),
        Case("text.jpg", b"this is a text file, not an image\n", "skipped", "cannot identify"),
        Case("cmyk.jpg", encode(rgb.convert("CMYK"), "JPEG", quality=95), "embedded"),
        Case("palette-alpha.png", palette_alpha_png(), "embedded"),
        Case("la.png", encode(Image.fromarray(photo()[..., 0]).convert("LA"), "PNG"), "embedded"),
        Case("rgba.png", encode(rgb.convert("RGBA"), "PNG"), "embedded"),
        Case("gray16.png", gray16_png()[0], "embedded"),
        Case("animated.gif", animated_gif(), "embedded"),
        Case("lossless.webp", encode(rgb, "WEBP", lossless=True), "embedded"),
        Case("strip-1x20000.png", encode(Image.new("RGB", (1, 20000), (10, 200, 30)), "PNG"),
             "embedded"),
        Case("bomb-header.png", bomb_png(), "skipped", "decompression bomb"),
    ]
    if big:
        side = 12000
        gray = Image.new("L", (side, side), 128)
        gray.paste(40, (0, 0, side // 2, side))  # left half dark: a visible structure
        cases.append(Case("huge-12000.jpg", encode(gray, "JPEG", quality=80), "embedded"))
        del gray
        cases.append(Case("huge-12000.png", encode(Image.new("1", (side, side), 1), "PNG"),
                          "skipped", "Mpx"))
    return cases


def write_folder(root: Path, cases: list[Case]) -> Path:
    root.mkdir(parents=True, exist_ok=True)
    for c in cases:
        (root / c.name).write_bytes(c.data)
    return root


def write_parquet(path: Path, images: list[bytes | None], labels: list | None = None) -> Path:
    """A Parquet dataset with an ``image`` binary column (nulls allowed) and an optional label."""
    import pyarrow as pa
    import pyarrow.parquet as pq

    cols = {"image": pa.array(images, type=pa.binary())}
    if labels is not None:
        cols["label"] = pa.array(labels)
    pq.write_table(pa.table(cols), path)
    return path
