"""What ``zoorank init`` looks for: one walk of a folder (:func:`scan`) into :class:`Found`, and
the suffixes and limits the other modules of :mod:`zoorank.init` share."""

from __future__ import annotations

import os
from dataclasses import dataclass, field
from pathlib import Path

from zoorank.errors import InputError

CHECKPOINT_SUFFIXES = (".safetensors", ".ckpt", ".pt", ".pth", ".bin")
IMAGE_SUFFIXES = (".jpg", ".jpeg", ".png", ".bmp", ".gif", ".webp", ".tif", ".tiff", ".ppm",
                  ".pgm", ".pbm")
#: files looked at, at most (a folder with more is a data lake, not a zoo).
MAX_FILES = 200_000
#: images up to this side set the models' ``input_size`` (CIFAR, digits): no upsampling.
SMALL_IMAGE = 64


@dataclass
class Found:
    """What a folder holds, as paths."""

    checkpoints: list[Path] = field(default_factory=list)
    image_dirs: dict[Path, int] = field(default_factory=dict)  # folder → images directly in it
    parquet: list[Path] = field(default_factory=list)
    npz: list[Path] = field(default_factory=list)
    zoo_files: list[Path] = field(default_factory=list)
    transformers_dirs: list[Path] = field(default_factory=list)


def _skipped(name: str) -> bool:
    return name.startswith(".") or name in ("__pycache__", "node_modules") or \
        name.startswith("zoorank-store")


def scan(folder: Path) -> Found:
    """Walk ``folder`` once (sorted, hidden folders and stores skipped, at most
    :data:`MAX_FILES` files)."""
    found = Found()
    seen = 0
    for root, dirs, files in os.walk(folder):
        dirs[:] = sorted(d for d in dirs if not _skipped(d))
        here = Path(root)
        images = 0
        for name in sorted(files):
            seen += 1
            if seen > MAX_FILES:
                raise InputError(f"{folder}: more than {MAX_FILES} files; point zoorank init at "
                                 "the folder of the checkpoints or of the images")
            suffix = Path(name).suffix.lower()
            if name.startswith("."):
                continue
            if name == "zoo.yaml":
                found.zoo_files.append(here / name)
            elif suffix in CHECKPOINT_SUFFIXES:
                found.checkpoints.append(here / name)
            elif suffix in IMAGE_SUFFIXES:
                images += 1
            elif suffix == ".parquet":
                found.parquet.append(here / name)
            elif suffix == ".npz":
                found.npz.append(here / name)
        if images:
            found.image_dirs[here] = images
        if "config.json" in files and {"model.safetensors", "pytorch_model.bin"} & set(files):
            found.transformers_dirs.append(here)
    owned = [z.parent for z in found.zoo_files] + found.transformers_dirs
    found.checkpoints = [c for c in found.checkpoints
                         if not any(c.is_relative_to(t) for t in owned)]
    return found
