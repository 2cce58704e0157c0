"""The one input check every metric starts with (the sklearn ``check_array`` of zoorank)."""

from __future__ import annotations

import warnings
from typing import Any

import numpy as np


class DegenerateInputWarning(UserWarning):
    """Input is degenerate (collapsed, constant, duplicated); the metric returns a documented value."""


def to_numpy(x: Any) -> np.ndarray:
    """NumPy view of an array-like or a torch tensor on any device (detached, moved to CPU)."""
    if hasattr(x, "detach") and hasattr(x, "cpu"):  # torch.Tensor without importing torch
        x = x.detach()
        if str(getattr(x, "dtype", "")) in ("torch.bfloat16", "torch.float16"):
            x = x.float()
        x = x.cpu().numpy()
    return np.asarray(x)


def check_array(
    x: Any,
    name: str = "Z",
    *,
    ndim: int | tuple[int, ...] = 2,
    min_rows: int = 1,
    min_cols: int = 1,
    dtype: type = np.float64,
    allow_nan: bool = False,
) -> np.ndarray:
    """Validate and convert ``x`` to a C-contiguous array of ``dtype``.

    Raises ``ValueError`` naming ``name`` when the dimensionality is wrong, there are fewer than
    ``min_rows`` rows or ``min_cols`` columns (last axis), or values are NaN/Inf. Never mutates ``x``:
    the result is a copy whenever a conversion happens, and callers must not write into it otherwise.
    """
    arr = to_numpy(x)
    if arr.dtype == object or not (
        np.issubdtype(arr.dtype, np.number) or np.issubdtype(arr.dtype, np.bool_)
    ):
        raise ValueError(f"{name} must be a numeric array, got dtype {arr.dtype}")
    allowed = (ndim,) if isinstance(ndim, int) else tuple(ndim)
    if arr.ndim not in allowed:
        want = " or ".join(f"{d}-D" for d in allowed)
        raise ValueError(f"{name} must be {want}, got shape {arr.shape}")
    if arr.ndim >= 1 and arr.shape[0] < min_rows:
        raise ValueError(f"{name} needs at least {min_rows} rows, got {arr.shape[0]}")
    if arr.ndim >= 2 and arr.shape[-1] < min_cols:
        raise ValueError(f"{name} needs at least {min_cols} columns, got {arr.shape[-1]}")
    arr = np.ascontiguousarray(arr, dtype=dtype)
    if not allow_nan and not np.isfinite(arr).all():
        bad = int((~np.isfinite(arr)).sum())
        raise ValueError(f"{name} contains {bad} NaN/Inf values")
    return arr


def check_labels(y: Any, n: int, name: str = "y") -> np.ndarray:
    """Validate a 1-D label vector of length ``n``; returns int64 codes 0..C-1 (via np.unique)."""
    arr = to_numpy(y)
    if arr.ndim != 1 or arr.shape[0] != n:
        raise ValueError(f"{name} must be 1-D with {n} entries, got shape {arr.shape}")
    _, codes = np.unique(arr, return_inverse=True)
    return codes.astype(np.int64)


# Row blocks of row_norms: np.linalg.norm's squared temporary stays under 64 MiB per block.
_NORM_BLOCK_BYTES = 1 << 26


def row_norms(Z: np.ndarray) -> np.ndarray:
    """``np.linalg.norm(Z, axis=1, keepdims=True)`` bit for bit, computed in row blocks.

    Each row's reduction is independent of the others, so blocking changes no value; it keeps
    ``norm``'s n × d squared temporary from ever existing whole (800 MB at 50k × 2048 float64).
    """
    step = max(1, _NORM_BLOCK_BYTES // max(1, Z.shape[1] * Z.itemsize))
    if Z.shape[0] <= step:
        return np.linalg.norm(Z, axis=1, keepdims=True)
    blocks = [np.linalg.norm(Z[s : s + step], axis=1, keepdims=True) for s in range(0, Z.shape[0], step)]
    return np.concatenate(blocks)


def l2_normalize(Z: np.ndarray, eps: float = 1e-12, out: np.ndarray | None = None) -> np.ndarray:
    """Rows divided by their L2 norm (zero rows stay zero). Returns a new array, or ``out``.

    ``out=Z`` normalises in place: for callers that own ``Z`` (e.g. a copy ``check_array`` made),
    sparing an n × d copy.
    """
    return np.divide(Z, np.maximum(row_norms(Z), eps), out=out)


def warn_degenerate(message: str) -> None:
    warnings.warn(message, DegenerateInputWarning, stacklevel=3)


def check_train_test(
    train_Z: Any, train_y: Any, test_Z: Any, test_y: Any, *, dtype: type = np.float64
) -> tuple[np.ndarray, np.ndarray, np.ndarray, np.ndarray]:
    """Validate a labelled train/test pair; labels come back raw (checked for shape only)."""
    Xtr = check_array(train_Z, "train_Z", dtype=dtype)
    Xte = check_array(test_Z, "test_Z", dtype=dtype)
    if Xtr.shape[1] != Xte.shape[1]:
        raise ValueError(f"train_Z width {Xtr.shape[1]} differs from test_Z width {Xte.shape[1]}")
    check_labels(train_y, Xtr.shape[0], "train_y")
    check_labels(test_y, Xte.shape[0], "test_y")
    return Xtr, to_numpy(train_y), Xte, to_numpy(test_y)


def joint_codes(*label_arrays: np.ndarray) -> tuple[int, list[np.ndarray]]:
    """Encode several label vectors with one shared code book; returns (n_classes, codes...)."""
    classes, codes = np.unique(np.concatenate(label_arrays), return_inverse=True)
    splits = np.cumsum([len(y) for y in label_arrays])[:-1]
    return len(classes), [c.astype(np.int64) for c in np.split(codes.ravel(), splits)]


def check_labelled(Z: Any, y: Any, min_per_class: int = 1) -> tuple[np.ndarray, np.ndarray, int]:
    """The few-label scores' input check: (float64 features, int codes 0..C−1, C).

    ValueError on fewer than 2 classes, a class with fewer than ``min_per_class`` samples,
    constant features or NaN/Inf.
    """
    X = check_array(Z, "Z", ndim=2, min_rows=2)
    codes = check_labels(y, X.shape[0])
    n_classes = int(codes.max()) + 1
    if n_classes < 2:
        raise ValueError("y has a single class; a transferability score needs at least 2")
    counts = np.bincount(codes, minlength=n_classes)
    if counts.min() < min_per_class:
        raise ValueError(f"every class needs at least {min_per_class} samples, the smallest has "
                         f"{int(counts.min())}")
    spread = np.ptp(X, axis=0)
    if not np.any(spread > 1e-12 * max(1.0, float(np.abs(X).max()))):
        raise ValueError("Z is constant (every row equal): features carry no information")
    return X, codes, n_classes
