"""``zoorank init``'s dataset entries: image folders, Parquet files with an image column, ``.npz``
files with an ``images`` array; and the image sizes seen (for the models' ``input_size``)."""

from __future__ import annotations

import re
import sys
from collections import Counter
from pathlib import Path
from typing import Any

from zoorank.config import NAME_PATTERN
from zoorank.errors import InputError
from zoorank.init.scan import IMAGE_SUFFIXES, Found, scan


def _dataset_name(path: Path, taken: set[str]) -> str:
    stem = path.stem if path.suffix else path.name
    base = re.sub(r"[^A-Za-z0-9_.\-]", "-", stem).strip("-._") or "data"
    if not re.match(NAME_PATTERN, base):
        base = f"d{base}"
    if base.casefold() == "prior":
        base = "prior-data"
    name, n = base, 2
    while name.casefold() in taken:
        name, n = f"{base}-{n}", n + 1
    taken.add(name.casefold())
    return name


def _image_size(data: bytes | str | Path) -> int | None:
    """The longer side of one image (None when it cannot be read)."""
    import io

    from PIL import Image

    try:
        with Image.open(io.BytesIO(data) if isinstance(data, bytes) else data) as img:
            return max(img.size)
    except Exception:  # noqa: BLE001 - the size is a hint only
        return None


def _parquet_columns(path: Path) -> tuple[str | None, str | None, int, int | None]:
    """(image column, label column, rows, the first image's size) of a Parquet file."""
    import pyarrow as pa
    import pyarrow.parquet as pq

    pf = pq.ParquetFile(path)
    schema = pf.schema_arrow
    images = [f.name for f in schema if pa.types.is_binary(f.type) or pa.types.is_large_binary(f.type)
              or (pa.types.is_struct(f.type) and f.type.get_field_index("bytes") >= 0)]
    images.sort(key=lambda n: n.lower() not in ("image", "img", "images"))
    labels = [f.name for f in schema if f.name.lower() in ("label", "labels", "target", "class",
                                                          "fine_label", "y")
              and (pa.types.is_integer(f.type) or pa.types.is_string(f.type)
                   or pa.types.is_large_string(f.type))]
    size = None
    if images and pf.metadata.num_rows:
        value = pf.read_row_group(0, columns=[images[0]]).column(0)[0].as_py()
        value = value.get("bytes") if isinstance(value, dict) else value
        size = _image_size(value) if isinstance(value, bytes) else None
    return (images[0] if images else None, labels[0] if labels else None,
            pf.metadata.num_rows, size)


def find_datasets(found: Found, extra: list[Path]) -> tuple[list[dict[str, Any]], list[int]]:
    """Dataset entries (path as a :class:`Path`, comments under ``#``) and image sizes seen."""
    entries: list[dict[str, Any]] = []
    sizes: list[int] = []
    taken: set[str] = set()
    image_dirs = dict(found.image_dirs)
    for path in extra:
        if path.is_dir():
            sub = scan(path).image_dirs
            if not sub:
                raise InputError(f"--data {path}: no images under it")
            image_dirs.update(sub)
        elif path.suffix.lower() == ".parquet":
            found.parquet.append(path)
        elif path.suffix.lower() == ".npz":
            found.npz.append(path)
        else:
            raise InputError(f"--data {path}: not an image folder, a Parquet or an .npz file")
    # a folder whose sub-folders hold the images (and it none itself): one dataset, labels
    # from the sub-folders' names
    parents = Counter(d.parent for d in image_dirs)
    for parent, n in sorted(parents.items()):
        if n >= 2 and parent not in image_dirs:
            classes = sorted(d for d in image_dirs if d.parent == parent)
            total = sum(image_dirs.pop(d) for d in classes)
            first = next(p for p in sorted(classes[0].iterdir()) if p.suffix.lower() in IMAGE_SUFFIXES)
            sizes += [s for s in [_image_size(first)] if s]
            entries.append({"name": _dataset_name(parent, taken), "source": "image_folder",
                            "path": parent, "labels_from_folders": True,
                            "#": f"{total} images in {len(classes)} class folders (labels from "
                                 "their names)"})
    for folder, n in sorted(image_dirs.items()):
        first = next(p for p in sorted(folder.iterdir()) if p.suffix.lower() in IMAGE_SUFFIXES)
        sizes += [s for s in [_image_size(first)] if s]
        entries.append({"name": _dataset_name(folder, taken), "source": "image_folder",
                        "path": folder, "#": f"an image folder: {n} images, no labels"})
    for path in sorted(set(found.parquet)):
        try:
            image, label, rows, size = _parquet_columns(path)
        except Exception as err:  # noqa: BLE001 - a Parquet file zoorank cannot read is no dataset
            print(f"zoorank init: {path}: skipped ({str(err).splitlines()[0]})", file=sys.stderr)
            continue
        if image is None:
            continue  # a table without images (results, embeddings)
        sizes += [size] if size else []
        entry = {"name": _dataset_name(path, taken), "source": "parquet", "path": path,
                 "image_column": image, "#": f"Parquet: {rows} rows"
                 + (f", labels in {label!r}" if label else ", no label column")}
        if label:
            entry["label_column"] = label
        entries.append(entry)
    for path in sorted(set(found.npz)):
        import numpy as np

        try:
            with np.load(path, allow_pickle=False) as npz:
                if "images" not in npz.files:
                    continue
                shape = npz["images"].shape
                labelled = "labels" in npz.files
        except Exception:  # noqa: BLE001
            continue
        if len(shape) >= 3:
            sizes.append(int(max(shape[1], shape[2])))
        entries.append({"name": _dataset_name(path, taken), "source": "numpy", "path": path,
                        "#": f".npz: {shape[0]} images" + (" with labels" if labelled else "")})
    return entries, sizes
