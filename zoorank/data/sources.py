"""Dataset sources: the stable sample list without image bytes (:class:`SampleIndex`, the one
dataset model) and a content digest. Reading the encoded images: :mod:`zoorank.data.sample_reader`.

Conventions:

- ``sample_id`` (int64) is stable for a dataset whatever reads it, wherever it lives and however
  large the cluster: the row index in a Parquet file (from the row-group offsets in its footer), the
  index of the file in the sorted list of relative paths of an image folder, the index in
  scikit-learn's digits or in a ``.npz`` array. ``limit`` keeps a seeded, sorted subset of those ids
  (:func:`select_subset`), so it depends on the number of samples only.
- ``path`` may be a local path or any URI pyarrow.fs understands (``s3://``, ``gs://``); credentials
  come from the environment or the instance role (:mod:`zoorank.store.uris`).
- The driver reads footers, listings (names, sizes, times) and the label column, never image bytes:
  :func:`index_samples` is O(samples) in ids and names only. Image bytes are read by Ray Data read
  tasks on the workers (:func:`zoorank.data.sample_reader.read_encoded`), a bounded number of rows at a time.
- Content digest (in every embedding fingerprint): a Parquet or ``.npz`` file is digested by its
  bytes, once per (URI, size, mtime) through :class:`zoorank.store.uris.DigestCache`; an image folder by
  the sorted listing of (relative path, size, mtime) of its images, which changes whenever a file is
  added, removed, renamed or rewritten, and costs one listing instead of reading every image; digits
  by scikit-learn's bundled file.
"""

from __future__ import annotations

import hashlib
import json
from dataclasses import dataclass, field
from typing import TYPE_CHECKING, Any

import numpy as np
import pandas as pd

from zoorank.data.undecodable import known_undecodable
from zoorank.errors import InputError
from zoorank.store import uris

if TYPE_CHECKING:
    from zoorank.config import DatasetSpec

IMAGE_EXTENSIONS = (
    ".jpg", ".jpeg", ".png", ".bmp", ".gif", ".webp", ".tif", ".tiff", ".ppm", ".pgm", ".pbm",
)
@dataclass(frozen=True)
class SampleIndex:
    """The sample list of one dataset: ids, names and labels, without image bytes (the one dataset
    model: EMBED streams from it, small sets carry their encoded ``images``).

    ``sample_id`` is the selected (``limit``) sorted subset of ``0..total-1``. ``label`` (nullable
    Int64, aligned with ``sample_id``) is None without a label column. ``row_groups`` holds
    (first row, rows) per Parquet row group; ``relpaths`` every image of a folder, sorted;
    ``arrays`` the in-memory uint8 images of small built-in sources (digits, ``.npz``).
    """

    dataset: str
    kind: str  # "parquet" | "image_folder" | "memory"
    uri: str | None
    sample_id: np.ndarray
    total: int
    content_digest: str
    image_column: str | None = None
    label: pd.Series | None = None
    label_names: tuple[str, ...] | None = None
    row_groups: np.ndarray | None = None
    relpaths: tuple[str, ...] | None = None
    arrays: np.ndarray | None = field(default=None, repr=False)
    names: tuple[str, ...] | None = None  # memory sources: a readable name per sample
    #: selected sample_ids a previous decode of this content found undecodable (sorted; part of
    #: the dataset's identity in every embedding fingerprint, see :func:`record_undecodable`)
    undecodable: np.ndarray = field(default_factory=lambda: np.zeros(0, np.int64), repr=False)
    #: the encoded image of each selected sample (aligned with ``sample_id``), read on the driver by
    #: :func:`zoorank.data.load_samples` for small sets only (probe sets, tests); None in an index
    #: EMBED streams from: bytes (Parquet, image folder) or a uint8 array (H, W[, C]) (digits,
    #: ``.npz``). Never part of a fingerprint.
    images: list[Any] | None = field(default=None, repr=False)

    def __len__(self) -> int:
        return len(self.sample_id)

    def source_names(self) -> list[str]:
        """:meth:`source_name` of every selected sample, in ``sample_id`` order."""
        return [self.source_name(s) for s in self.sample_id]

    def source_name(self, sample_id: int) -> str:
        """A readable reference to one sample (``file.parquet#row=12``, a relative path, ...)."""
        if self.kind == "parquet":
            return f"{uris.basename(self.uri)}#row={int(sample_id)}"
        if self.kind == "image_folder":
            return self.relpaths[int(sample_id)]
        return self.names[int(sample_id)]

    def frame(self) -> pd.DataFrame:
        """sample_id, label (nullable Int64), label_name, source — what the store keeps."""
        n = len(self)
        label = (pd.array([pd.NA] * n, dtype="Int64") if self.label is None
                 else pd.array(self.label, dtype="Int64"))
        names: list[str | None] = [None] * n
        if self.label is not None and self.label_names is not None:
            k = len(self.label_names)
            names = [self.label_names[int(v)] if not pd.isna(v) and 0 <= int(v) < k else None
                     for v in label]
        return pd.DataFrame({
            "sample_id": pd.array(self.sample_id, dtype="int64"),
            "label": label,
            "label_name": pd.array(names, dtype="string"),
            "source": pd.array(self.source_names(), dtype="string"),
        })


def _label_names_beside(uri: str) -> tuple[str, ...] | None:
    """``classes.json`` ({"classes": [...]}, or a plain list) next to a data file, when present."""
    try:
        data = json.loads(uris.read_bytes(uris.child(uris.parent(uri), "classes.json")))
    except (InputError, OSError, ValueError):
        return None
    names = data.get("classes") if isinstance(data, dict) else data
    if isinstance(names, list) and all(isinstance(x, str) for x in names):
        return tuple(names)
    return None


def class_labels(values: Any, what: str, names: tuple[str, ...] | None = None
                 ) -> tuple[pd.Series, tuple[str, ...] | None]:
    """Labels as class indices (nullable Int64) and the class names, from a column's values.

    Integers (and booleans) are class indices; floats must be whole numbers (``3.0``; NaN is a
    missing label). Strings are class names, mapped to their index in ``names`` (a ``classes.json``
    or ``label_names`` beside the data) when every name is there, else to the index in their
    sorted set, as folder names are. Anything else is an :class:`InputError` naming ``what``.
    """
    arr = np.asarray(values, dtype=object) if isinstance(values, list) else np.asarray(values)
    present = [v for v in arr.tolist() if v is not None and not (isinstance(v, float) and
                                                                 np.isnan(v))]
    if present and all(isinstance(v, str) for v in present):
        known = names if names is not None and set(present) <= set(names) else \
            tuple(sorted(set(present)))
        index = {c: i for i, c in enumerate(known)}
        codes = [index[v] if isinstance(v, str) else pd.NA for v in arr.tolist()]
        return pd.Series(pd.array(codes, dtype="Int64"), name="label"), known
    if any(isinstance(v, bool | np.bool_) for v in present):
        present = [int(v) for v in present]
    if not all(isinstance(v, int | float | np.integer | np.floating) for v in present):
        kinds = sorted({type(v).__name__ for v in present})
        raise InputError(f"{what} holds {', '.join(kinds)} values; labels must be integers "
                         "(class indices) or strings (class names)")
    if any(float(v) != int(v) for v in present if np.isfinite(v)) or \
            any(not np.isfinite(v) for v in present):
        raise InputError(f"{what} holds fractional or infinite values; labels must be whole "
                         "numbers (class indices) or strings (class names)")
    codes = [pd.NA if v is None or (isinstance(v, float) and np.isnan(v)) else int(v)
             for v in arr.tolist()]
    return pd.Series(pd.array(codes, dtype="Int64"), name="label"), names


# -- indexing (driver: footers, listings, label columns) ------------------------------------------
def _index_parquet(spec: DatasetSpec, digests: uris.DigestCache) -> dict[str, Any]:
    import pyarrow as pa
    import pyarrow.parquet as pq

    where = uris.redact(spec.path)
    try:
        with uris.open_input(spec.path) as f:
            meta = pq.ParquetFile(f).metadata  # the footer only
            schema = meta.schema.to_arrow_schema()
            wanted = [spec.image_column] + ([spec.label_column] if spec.label_column else [])
            for col in wanted:
                if col not in schema.names:
                    raise InputError(f"dataset {spec.name!r}: column {col!r} not in {where} "
                                     f"(columns: {schema.names})")
            itype = schema.field(spec.image_column).type
            if pa.types.is_struct(itype):  # Hugging Face `Image` feature: {bytes, path}
                itype = itype.field("bytes").type
            if not (pa.types.is_binary(itype) or pa.types.is_large_binary(itype)):
                raise InputError(f"dataset {spec.name!r}: column {spec.image_column!r} of {where} "
                                 f"holds {itype}, not encoded image bytes")
            label = names = None
            if spec.label_column:  # one column: no image bytes are read
                col = pq.ParquetFile(f).read(columns=[spec.label_column]).column(0)
                label, names = class_labels(
                    col.to_pylist(), f"dataset {spec.name!r}: label column "
                    f"{spec.label_column!r} of {where}", _label_names_beside(spec.path))
    except (OSError, pa.ArrowInvalid) as err:
        raise InputError(f"dataset {spec.name!r}: cannot read Parquet file {where}: {err}") \
            from None
    if meta.num_rows == 0:
        raise InputError(f"dataset {spec.name!r}: Parquet file {where} has no rows")
    rows = np.asarray([meta.row_group(i).num_rows for i in range(meta.num_row_groups)], np.int64)
    starts = np.concatenate([[0], np.cumsum(rows)[:-1]]).astype(np.int64)
    return {
        "kind": "parquet", "total": int(meta.num_rows), "label": label,
        "label_names": names,
        "row_groups": np.stack([starts, rows], axis=1) if len(rows) else np.zeros((0, 2), np.int64),
        "content_digest": digests.digest(spec.path), "image_column": spec.image_column,
    }


def list_image_folder(uri: str) -> list[tuple[str, int, int]]:
    """(relative path, size, mtime_ns) of every image under a folder (local or URI), sorted.

    Hidden files and folders (a part starting with ``.``) are left out.
    """
    import pyarrow.fs as pafs

    fs, root = uris.resolve(uri)
    root = root.rstrip("/")
    info = fs.get_file_info(root)
    if info.type == pafs.FileType.File:
        raise InputError(f"{uris.redact(uri)} is a file, not an image folder")
    infos = fs.get_file_info(pafs.FileSelector(root, recursive=True, allow_not_found=True))
    out = []
    for i in infos:
        if i.type != pafs.FileType.File or not i.path.lower().endswith(IMAGE_EXTENSIONS):
            continue
        rel = i.path[len(root) + 1:]
        if any(part.startswith(".") for part in rel.split("/")):
            continue
        out.append((rel, int(i.size or 0), int(i.mtime_ns if i.mtime_ns is not None else -1)))
    return sorted(out)


def _index_image_folder(spec: DatasetSpec, digests: uris.DigestCache) -> dict[str, Any]:
    listing = list_image_folder(spec.path)
    if not listing:
        raise InputError(f"dataset {spec.name!r}: no images ({', '.join(IMAGE_EXTENSIONS)}) "
                         f"under {uris.redact(spec.path)}")
    rel = [r for r, _, _ in listing]
    h = hashlib.sha256()
    for r, size, mtime in listing:
        h.update(f"{r}\0{size}\0{mtime}\n".encode())
    label = names = None
    if spec.labels_from_folders:
        classes = sorted({r.split("/", 1)[0] for r in rel if "/" in r})
        if not classes:
            raise InputError(f"dataset {spec.name!r}: labels_from_folders needs class "
                             f"sub-folders under {uris.redact(spec.path)}")
        index = {c: i for i, c in enumerate(classes)}
        label = pd.Series(pd.array([index[r.split("/", 1)[0]] if "/" in r else pd.NA for r in rel],
                                   dtype="Int64"), name="label")
        names = tuple(classes)
    return {"kind": "image_folder", "total": len(rel), "label": label, "label_names": names,
            "relpaths": tuple(rel), "content_digest": "listing:" + h.hexdigest()}


def select_subset(sample_ids: np.ndarray, n: int | None, seed: int, salt: int = 0) -> np.ndarray:
    """A seeded choice of ``n`` of ``sample_ids``, sorted (all of them when ``n`` is None or ≥ len)."""
    sample_ids = np.sort(np.asarray(sample_ids, dtype=np.int64))
    if n is None or n >= len(sample_ids):
        return sample_ids
    rng = np.random.default_rng(np.random.SeedSequence([seed, salt]))
    return np.sort(rng.choice(sample_ids, size=n, replace=False))


def to_uint8_images(images: np.ndarray, what: str) -> np.ndarray:
    """(N, H, W[, C]) integer or float images → uint8; floats in [0, 1] are scaled by 255."""
    images = np.asarray(images)
    if images.ndim not in (3, 4) or (images.ndim == 4 and images.shape[-1] not in (1, 3, 4)):
        raise InputError(f"{what}: images must be (N, H, W) or (N, H, W, C) with C in 1/3/4, "
                         f"got shape {images.shape}")
    if images.dtype == np.uint8:
        return images
    if np.issubdtype(images.dtype, np.floating):
        if not np.all(np.isfinite(images)):
            raise InputError(f"{what}: images contain NaN or Inf")
        scale = 255.0 if images.size and float(images.max()) <= 1.0 else 1.0
        return np.clip(np.rint(images * scale), 0, 255).astype(np.uint8)
    if np.issubdtype(images.dtype, np.integer) or images.dtype == np.bool_:
        return np.clip(images, 0, 255).astype(np.uint8)
    raise InputError(f"{what}: unsupported image dtype {images.dtype}")


def _index_digits(spec: DatasetSpec, digests: uris.DigestCache) -> dict[str, Any]:
    import sklearn
    from sklearn.datasets import load_digits

    d = load_digits()
    images = to_uint8_images(np.rint(d.images * (255.0 / 16.0)), "digits")  # 0..16 → 0..255
    n = len(images)
    digest = hashlib.sha256(np.ascontiguousarray(images).tobytes()).hexdigest()
    return {"kind": "memory", "total": n, "arrays": images,
            "names": tuple(f"digits[{i}]" for i in range(n)),
            "label": pd.Series(pd.array(d.target, dtype="Int64"), name="label"),
            "label_names": tuple(str(i) for i in range(10)),
            "content_digest": f"sklearn-digits:{sklearn.__version__}:{digest[:16]}"}


def _index_numpy(spec: DatasetSpec, digests: uris.DigestCache) -> dict[str, Any]:
    where = uris.redact(spec.path)
    if not uris.is_file(spec.path):
        raise InputError(f"dataset {spec.name!r}: file {where} not found")
    labels = names = None
    try:
        # allow_pickle=False: a data file must never execute code.
        with uris.open_input(spec.path) as f:
            loaded = np.load(f, allow_pickle=False)
            if isinstance(loaded, np.ndarray):  # a `.npy`: the images array alone, no labels
                images = loaded
            else:
                with loaded as npz:
                    if "images" not in npz.files:
                        raise InputError(f"dataset {spec.name!r}: {where} has no 'images' array "
                                         f"(arrays: {npz.files})")
                    images = npz["images"]
                    labels = npz["labels"] if "labels" in npz.files else None
                    names = npz["label_names"] if "label_names" in npz.files else None
    except (OSError, ValueError, EOFError) as err:
        raise InputError(f"dataset {spec.name!r}: cannot read {where}: {err}") from None
    images = to_uint8_images(images, f"dataset {spec.name!r} ({where})")
    n = len(images)
    if n == 0:
        raise InputError(f"dataset {spec.name!r}: {where} holds no images")
    names = None if names is None else tuple(str(x) for x in np.asarray(names).reshape(-1))
    label = None
    if labels is not None:
        labels = np.asarray(labels)
        if labels.ndim != 1 or len(labels) != n:
            raise InputError(f"dataset {spec.name!r}: array 'labels' of {where} has shape "
                             f"{labels.shape}; one label per image ({n},) is needed")
        label, names = class_labels(labels.tolist(), f"dataset {spec.name!r}: array 'labels' "
                                    f"of {where}", names)
    base = uris.basename(spec.path)
    return {"kind": "memory", "total": n, "arrays": images, "label": label,
            "names": tuple(f"{base}[{i}]" for i in range(n)),
            "label_names": names, "content_digest": digests.digest(spec.path)}


_INDEXERS = {
    "parquet": _index_parquet,
    "image_folder": _index_image_folder,
    "sklearn_digits": _index_digits,
    "numpy": _index_numpy,
}


def index_samples(
    spec: DatasetSpec, seed: int, digests: uris.DigestCache | None = None
) -> SampleIndex:
    """The dataset's stable sample list (ids, names, labels, content digest); no image bytes.

    ``limit`` keeps a seeded sorted subset of the ids. ``digests`` (one per store) avoids reading a
    Parquet or ``.npz`` file again to digest it once its (URI, size, mtime) is known; with a store,
    the selected samples known to be undecodable come with the index (``undecodable``).
    """
    parts = _INDEXERS[spec.source](spec, digests if digests is not None else uris.DigestCache())
    total = parts["total"]
    ids = select_subset(np.arange(total, dtype=np.int64), spec.limit, seed)
    label = parts.get("label")
    keep_labels = spec.source in ("sklearn_digits", "numpy") or bool(spec.label_column) or (
        spec.source == "image_folder" and spec.labels_from_folders)
    if not keep_labels:
        label = None
    if label is not None:
        label = label.iloc[ids].reset_index(drop=True)
    return SampleIndex(
        dataset=spec.name, kind=parts["kind"], uri=spec.path, sample_id=ids, total=total,
        content_digest=parts["content_digest"], image_column=parts.get("image_column"),
        label=label, label_names=parts.get("label_names") if label is not None else None,
        row_groups=parts.get("row_groups"), relpaths=parts.get("relpaths"),
        arrays=parts.get("arrays"), names=parts.get("names"),
        undecodable=np.intersect1d(known_undecodable(
            digests.store if digests is not None else None, spec.name, parts["content_digest"]),
            ids),
    )
