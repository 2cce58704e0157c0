"""The numerics the spectral metrics share (RankMe, LiDAR, alpha-ReQ, MCR²): input checks, float64
Gram/scatter matrices accumulated over row blocks (a float32 input is never copied whole into
float64), the Roy & Vetterli smooth effective rank and a stable ``log det(I + a·G)``.

The effective rank ``exp(-Σ p_k log p_k)`` with ``p_k = v_k / ‖v‖₁ + eps`` (``specs/clid_lidar.md``
B.2, B.3) is shared by RankMe and LiDAR, and so is its ``score:`` option ``eps``, declared here.
"""

from __future__ import annotations

from typing import Any

import numpy as np
from scipy.special import xlogy

from zoorank.metrics._checks import (
    check_array,
    l2_normalize,
    to_numpy,
)
from zoorank.metrics.score_options import option

# A centred matrix whose norm is below this fraction of the raw input's norm is roundoff.
_COLLAPSE_RTOL = 1e-10

# Float64 working set per block when accumulating scatter matrices (bytes).
_BLOCK_BYTES = 1 << 26

EPS64 = np.finfo(np.float64).eps

option("eps", 1e-7, "RankMe / LiDAR: the p_k smoothing of the effective rank")


def check_float(x: Any, name: str, ndim: int, min_rows: int = 1) -> np.ndarray:
    """``check_array`` keeping float32 (and half) inputs in float32 to spare a float64 copy.

    The maths upcasts block by block, so precision is float64 either way.
    """
    arr = to_numpy(x)
    dtype = np.float32 if arr.dtype in (np.float16, np.float32) else np.float64
    return check_array(arr, name, ndim=ndim, min_rows=min_rows, dtype=dtype)


def check_eps(value: float, name: str, *, positive: bool = False) -> float:
    value = float(value)
    if not np.isfinite(value) or value < 0 or (positive and value == 0):
        kind = "> 0" if positive else ">= 0"
        raise ValueError(f"{name} must be a finite number {kind}, got {value}")
    return value


def block_rows(n_cols: int) -> int:
    return max(1, _BLOCK_BYTES // (8 * max(n_cols, 1)))


def rows64(X: np.ndarray, sl: slice, mean: np.ndarray | None, normalize: bool) -> np.ndarray:
    block = X[sl].astype(np.float64)  # always a copy: safe to modify in place
    if mean is not None:
        block -= mean
    if normalize:
        block = l2_normalize(block)
    return block


def gram(X: np.ndarray, mean: np.ndarray | None = None, normalize: bool = False) -> np.ndarray:
    """The smaller Gram matrix of ``B = rows(X)`` in float64: BᵀB (d×d) if n ≥ d, else BBᵀ (n×n).

    ``rows`` subtracts ``mean`` and/or L2-normalises each row. Both forms share their non-zero
    eigenvalues (σ² of B), which is all the callers need.
    """
    n, d = X.shape
    if n < d:
        B = rows64(X, slice(None), mean, normalize)
        return B @ B.T
    G = np.zeros((d, d))
    step = block_rows(d)
    for start in range(0, n, step):
        B = rows64(X, slice(start, start + step), mean, normalize)
        G += B.T @ B
    return G


def sq_norm(X: np.ndarray) -> float:
    """‖X‖²_F in float64 without a full float64 copy."""
    flat = X.reshape(X.shape[0], -1)
    step = block_rows(flat.shape[1])
    total = 0.0
    for start in range(0, flat.shape[0], step):
        block = flat[start : start + step].astype(np.float64)
        total += float(np.einsum("ij,ij->", block, block))
    return total


def is_negligible(sq_norm: float, reference_sq_norm: float) -> bool:
    return sq_norm <= (_COLLAPSE_RTOL**2) * reference_sq_norm


def effective_rank(values: np.ndarray, eps: float, n_zeros: int = 0) -> float:
    """Roy & Vetterli smooth rank of non-negative ``values`` (+ ``n_zeros`` implicit zeros)."""
    p = values / values.sum() + eps
    entropy = -float(np.sum(xlogy(p, p))) - n_zeros * float(xlogy(eps, eps))
    return float(np.exp(entropy))


def logdet_identity_plus(G: np.ndarray, scale: float) -> float:
    """log det(I + scale·G) for a PSD Gram matrix G, via float64 ``slogdet``."""
    sign, logdet = np.linalg.slogdet(np.eye(G.shape[0]) + scale * G)
    if sign <= 0:  # cannot happen for PSD G up to roundoff far beyond float64's
        raise FloatingPointError("I + c·ZZᵀ is not positive definite; input is ill-scaled")
    return float(logdet)

