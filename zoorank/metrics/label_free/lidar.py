"""LiDAR (Thilak et al. 2024; ``specs/clid_lidar.md`` B.2): the smooth effective rank of the
LDA-type matrix of augmented views (each sample a class, its views the class's members).

When all class means are equal (a collapsed input) there is no spectrum: the sentinel **1.0**, the
smallest value a non-empty spectrum can give, with a :class:`DegenerateInputWarning` (spec B.2
reference code). The effective rank and its ``eps`` are :mod:`zoorank.metrics.label_free._spectrum`'s.
"""

from __future__ import annotations

from typing import Any, Literal

import numpy as np
import scipy.linalg

from zoorank.metrics._checks import (
    warn_degenerate,
)
from zoorank.metrics.label_free._spectrum import (
    EPS64,
    block_rows,
    check_eps,
    check_float,
    effective_rank,
    gram,
    is_negligible,
    rows64,
    sq_norm,
)
from zoorank.metrics.registry import register
from zoorank.metrics.score_options import option

__all__ = ["lidar"]

option("lidar_delta", 1e-6, "LiDAR: ridge δ of the within-class scatter")

option("lidar_delta_mode", "absolute",
       "LiDAR: 'absolute' Σ_w + δI, 'relative' Σ_w + δ·tr(Σ_w)/p·I (benchmarks/science/lidar_delta.py)")


def _principal_directions(E: np.ndarray, mean: np.ndarray, r: int) -> np.ndarray:
    """Top-``r`` principal directions (p × r', orthonormal, r' ≤ r) of the pooled rows of E."""
    X = E.reshape(-1, E.shape[-1])
    N, p = X.shape
    G = gram(X, mean)
    size = G.shape[0]
    r = min(r, size)
    w, U = scipy.linalg.eigh(G, subset_by_index=(size - r, size - 1))
    w, U = w[::-1], U[:, ::-1]
    keep = w > w[0] * max(N, p) * EPS64
    w, U = w[keep], U[:, keep]
    if N >= p:  # G is the p×p scatter: its eigenvectors are the directions
        return U
    V = rows64(X, slice(None), mean, normalize=False).T @ (U / np.sqrt(w))
    return np.linalg.qr(V)[0]  # restore orthonormality lost to roundoff in small-w directions


def _lidar_scatters(
    E: np.ndarray, basis: np.ndarray | None
) -> tuple[np.ndarray, np.ndarray, dict[str, float]]:
    """Σ̂_b/(n−1) and Σ̂_w/(n(q−1)) (no δ), projected on ``basis`` when given; plus norms."""
    n, q, p = E.shape
    class_means = E.mean(axis=1, dtype=np.float64)
    grand_mean = class_means.mean(axis=0)
    between = class_means - grand_mean
    norms = {
        "between": float(np.einsum("ij,ij->", between, between)),
        "class_means": float(np.einsum("ij,ij->", class_means, class_means)),
        "within": 0.0,
        "all": sq_norm(E),
    }
    if basis is not None:
        between = between @ basis
    Sb = between.T @ between / (n - 1)
    dim = p if basis is None else basis.shape[1]
    Sw = np.zeros((dim, dim))
    step = max(1, block_rows(p) // q)
    for start in range(0, n, step):
        sl = slice(start, start + step)
        D = (E[sl].astype(np.float64) - class_means[sl, None, :]).reshape(-1, p)
        norms["within"] += float(np.einsum("ij,ij->", D, D))
        if basis is not None:
            D = D @ basis
        Sw += D.T @ D
    Sw /= n * (q - 1)
    return Sb, Sw, norms


def _psd_part(S: np.ndarray) -> np.ndarray:
    w, V = np.linalg.eigh((S + S.T) / 2)
    return (V * np.clip(w, 0.0, None)) @ V.T


def lidar(
    E: Any,
    delta: float = 1e-6,
    eps: float = 1e-7,
    *,
    delta_mode: Literal["absolute", "relative"] = "absolute",
    debias_between: bool = False,
    reduce_dim: bool | None = None,
    max_dim: int = 8192,
    return_details: bool = False,
) -> float | tuple[float, dict[str, Any]]:
    """LiDAR: smooth effective rank of the LDA matrix of surrogate classes (views of one image).

    Thilak et al. 2024 (spec B.2). With class means μ̂_i over the q views of clean sample i and
    grand mean μ̂:

    * Σ̂_b = Σ_i (μ̂_i − μ̂)(μ̂_i − μ̂)ᵀ / (n − 1)
    * Σ̂_w = Σ_ij (e_ij − μ̂_i)(e_ij − μ̂_i)ᵀ / (n(q − 1)),  regularised as Σ̂_w + δI
    * Σ_lidar = (Σ̂_w + δI)^{-1/2} Σ̂_b (Σ̂_w + δI)^{-1/2}, eigenvalues λ clamped at ≥ 0
    * LiDAR = exp(−Σ p_i log p_i),  p_i = λ_i / ‖λ‖₁ + eps

    All in float64 with ``eigh``; λ are exactly the generalised eigenvalues of
    Σ̂_b v = λ (Σ̂_w + δI) v.

    Parameters
    ----------
    E : array-like or torch.Tensor, shape (n, q, p)
        n clean samples (the surrogate classes) × q ≥ 2 views each × p features, grouped by
        clean sample (never by queue position: spec B.11 item 4).
    delta : float, default 1e-6
        Ridge δ on Σ̂_w (spec default; the paper says only "small").
    eps : float, default 1e-7
        As in RankMe.
    delta_mode : {"absolute", "relative"}, default "absolute"
        "relative" uses δ·tr(Σ̂_w)/p, so δ follows the scale of the features.
    debias_between : bool, default False
        Use Σ̂_b − Σ̂_w/q clamped to PSD (removes the 1/q noise floor, spec B.11 item 13)
        instead of the standard LDA scatter.
    reduce_dim : bool or None, default None
        Project onto the top-r principal directions of the pooled, centred n·q embeddings first,
        r = max(min(p, n·q − 1, max_dim), min(n, p)) (spec B.2). ``None`` reduces only when
        p > n·q − 1 (Σ̂_w singular without δ) or p > ``max_dim``. When r covers the rank of the
        pooled data (always, in the first case) the result equals the unreduced one exactly:
        the discarded directions carry zero between- and within-class scatter, and they are
        counted as zero eigenvalues so the ε-terms always run over p eigenvalues.
    max_dim : int, default 8192
        Cap on r for the cost of the p × p eigendecompositions.
    return_details : bool, default False
        Also return a dict: ``eigenvalues`` (descending, length r), ``delta`` (the δ used),
        ``dim`` (r), ``reduced``, ``collapsed``, ``invariant``, ``n``, ``q``.

    Returns
    -------
    float, or (float, dict)
        Between ~1 and min(p, n − 1); **higher means more linearly separable information across
        surrogate classes** (better linear-probe accuracy, within one SSL method only).
        Complete collapse (all class means equal, or with ``debias_between`` no between-class
        scatter beyond view noise) returns the sentinel **1.0** with a DegenerateInputWarning
        and ``collapsed=True``. Complete invariance (all views of each sample identical) warns,
        sets ``invariant=True`` and gives the effective rank of Σ̂_b's eigenvalues (whatever δ).

    Raises
    ------
    ValueError
        E is not 3-D, has n < 2 or q < 2, NaN/Inf values, or a bad parameter.

    Notes
    -----
    Cost O(n·q·p²) for the scatters plus two p × p eigendecompositions (r × r when reduced):
    well under a second for n·q = 50,000 and p = 768. The plug-in Σ̂_b contains Σ_w/q, so pure
    view-noise directions get λ ≈ 1/q: keep q fixed within a comparison (spec B.11 item 13).
    """
    X = check_float(E, "E", ndim=3, min_rows=2)
    n, q, p = X.shape
    if q < 2:
        raise ValueError(f"E needs q >= 2 views per sample for a within-class scatter, got q={q}")
    if p < 1:
        raise ValueError("E needs at least 1 feature, got p=0")
    delta = check_eps(delta, "delta")
    eps = check_eps(eps, "eps")
    if delta_mode not in ("absolute", "relative"):
        raise ValueError(f"delta_mode must be 'absolute' or 'relative', got {delta_mode!r}")
    if int(max_dim) < 1:
        raise ValueError(f"max_dim must be >= 1, got {max_dim}")
    max_dim = int(max_dim)

    n_pooled = n * q
    if reduce_dim is None:
        reduce_dim = p > n_pooled - 1 or p > max_dim
    basis = None
    if reduce_dim:
        r = max(min(p, n_pooled - 1, max_dim), min(n, p))
        grand_mean = X.reshape(-1, p).mean(axis=0, dtype=np.float64)
        basis = _principal_directions(X, grand_mean, r)

    Sb, Sw, norms = _lidar_scatters(X, basis)
    dim = Sb.shape[0]
    details: dict[str, Any] = {
        "eigenvalues": np.zeros(dim),
        "delta": delta,
        "dim": dim,
        "reduced": bool(reduce_dim),
        "collapsed": False,
        "invariant": False,
        "n": n,
        "q": q,
    }

    def _sentinel(reason: str) -> float | tuple[float, dict[str, Any]]:
        warn_degenerate(f"lidar: {reason}; returning the sentinel 1.0")
        details["collapsed"] = True
        return (1.0, details) if return_details else 1.0

    if is_negligible(norms["between"], norms["class_means"]):
        return _sentinel("all class means are equal (complete collapse, Σ_b = 0)")

    if is_negligible(norms["within"], norms["all"]):
        # Views identical per sample: Σ̂_w is pure roundoff. Zero it so that Σ_lidar = Σ̂_b/δ,
        # whose normalised spectrum is that of Σ̂_b for every δ > 0 (spec B.11 item 3).
        warn_degenerate(
            "lidar: all views of each sample are identical (Σ_w = 0); LiDAR then "
            "measures the effective rank of Σ_b alone"
        )
        details["invariant"] = True
        Sw = np.zeros_like(Sw)
        norms["within"] = 0.0

    if delta_mode == "relative":
        trace_w = norms["within"] / (n * (q - 1))  # over all p features, reduced or not
        if trace_w > 0:
            delta = delta * trace_w / p
        else:
            delta = delta * float(np.trace(Sb)) / p  # any δ > 0 gives the same value here
    details["delta"] = delta

    if debias_between:
        Sb = _psd_part(Sb - Sw / q)

    w, V = np.linalg.eigh(Sw + delta * np.eye(dim))
    w = np.maximum(w, max(float(w.max()) * dim * EPS64, np.finfo(np.float64).tiny))
    # V·diag(w^-1/2) whitens Σ_w + δI; its congruence with Σ_b is orthogonally similar to
    # (Σ_w+δI)^{-1/2} Σ_b (Σ_w+δI)^{-1/2}, so the eigenvalues are the same.
    W = V / np.sqrt(w)
    L = W.T @ Sb @ W
    lam = np.clip(np.linalg.eigvalsh((L + L.T) / 2)[::-1], 0.0, None)
    details["eigenvalues"] = lam
    if not lam.sum() > 0:
        return _sentinel("no between-class scatter beyond view noise (debiased Σ_b = 0)")
    value = effective_rank(lam, eps, n_zeros=p - dim)
    return (value, details) if return_details else value


@register(
    "lidar", +1, "augmented", options=("lidar_delta", "lidar_delta_mode", "eps"), tune_floor=1.0,
    settings=lambda o, seed: {"delta": o["lidar_delta"], "eps": o["eps"],
                              "delta_mode": o["lidar_delta_mode"]}, default_rank=11, width_sensitive=True,
)
def _lidar_metric(E: Any, **settings: Any) -> tuple[float, dict[str, Any]]:
    """LiDAR: smooth rank of the LDA matrix (Thilak 2024)."""
    value, details = lidar(E, return_details=True, **settings)
    return value, {"reduced": bool(details["reduced"]), "lda_dim": int(details["dim"])}
