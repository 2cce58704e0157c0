"""Spectral metrics: RankMe, LiDAR, alpha-ReQ and the MCR² coding rate.

Every function here reads an embedding matrix through one eigen- or singular-value spectrum,
computed in float64 from the *smaller* Gram/scatter matrix (accumulated over row blocks, so a
float32 input is never copied whole into float64). Conventions follow ``specs/clid_lidar.md``:

* RankMe (Garrido et al. 2022; spec B.3) and LiDAR (Thilak et al. 2024; spec B.2) share the
  Roy & Vetterli smooth effective rank ``exp(-Σ p_k log p_k)`` with ``p_k = v_k / ‖v‖₁ + eps``.
  RankMe feeds it singular values of Z; LiDAR feeds it eigenvalues of a covariance-type matrix.
  The two scales differ on purpose (spec B.3): do not swap them.
* A collapsed input (RankMe: Z numerically zero; LiDAR: all class means equal) has no spectrum.
  Both return the sentinel **1.0** — the smallest value a non-empty spectrum can give, so a
  collapsed model ranks last — with a :class:`DegenerateInputWarning` (spec B.2 reference code).
  "Numerically zero" means a Frobenius norm at most ``1e-10`` times that of the raw input, i.e. at
  the level of the roundoff left by centring.
* alpha-ReQ (Agrawal et al. 2022; spec B.4) and MCR² (Yu et al. 2020; spec A.5 item 2).
"""

from __future__ import annotations

from typing import Any, Literal

import numpy as np
import scipy.linalg
from scipy.special import xlogy

from zoorank.metrics._checks import (
    check_array,
    check_labels,
    l2_normalize,
    to_numpy,
    warn_degenerate,
)
from zoorank.metrics.options import option
from zoorank.metrics.registry import register

__all__ = ["alpha_req", "coding_rate", "coding_rate_reduction", "lidar", "rankme"]

# A centred matrix whose norm is below this fraction of the raw input's norm is roundoff.
_COLLAPSE_RTOL = 1e-10
# Float64 working set per block when accumulating scatter matrices (bytes).
_BLOCK_BYTES = 1 << 26
_EPS64 = np.finfo(np.float64).eps

#: ``rankme_proj``: every model's embeddings are projected to this many dimensions first.
PROJECTION_DIM = 64

option("eps", 1e-7, "RankMe / LiDAR: the p_k smoothing of the effective rank")
option("lidar_delta", 1e-6, "LiDAR: ridge δ of the within-class scatter")
option("lidar_delta_mode", "absolute",
       "LiDAR: 'absolute' Σ_w + δI, 'relative' Σ_w + δ·tr(Σ_w)/p·I (benchmarks/lidar_delta.py)")
option("alpha_fit_range", (10, 100), "alpha-ReQ: ranks of the power-law fit [start, stop)")
option("coding_rate_eps2", 0.5, "MCR²: distortion ε²")


# --------------------------------------------------------------------------------------------
# helpers
# --------------------------------------------------------------------------------------------


def _check_float(x: Any, name: str, ndim: int, min_rows: int = 1) -> np.ndarray:
    """``check_array`` keeping float32 (and half) inputs in float32 to spare a float64 copy.

    The maths upcasts block by block, so precision is float64 either way.
    """
    arr = to_numpy(x)
    dtype = np.float32 if arr.dtype in (np.float16, np.float32) else np.float64
    return check_array(arr, name, ndim=ndim, min_rows=min_rows, dtype=dtype)


def _check_eps(value: float, name: str, *, positive: bool = False) -> float:
    value = float(value)
    if not np.isfinite(value) or value < 0 or (positive and value == 0):
        kind = "> 0" if positive else ">= 0"
        raise ValueError(f"{name} must be a finite number {kind}, got {value}")
    return value


def _block_rows(n_cols: int) -> int:
    return max(1, _BLOCK_BYTES // (8 * max(n_cols, 1)))


def _rows64(X: np.ndarray, sl: slice, mean: np.ndarray | None, normalize: bool) -> np.ndarray:
    block = X[sl].astype(np.float64)  # always a copy: safe to modify in place
    if mean is not None:
        block -= mean
    if normalize:
        block = l2_normalize(block)
    return block


def _gram(X: np.ndarray, mean: np.ndarray | None = None, normalize: bool = False) -> np.ndarray:
    """The smaller Gram matrix of ``B = rows(X)`` in float64: BᵀB (d×d) if n ≥ d, else BBᵀ (n×n).

    ``rows`` subtracts ``mean`` and/or L2-normalises each row. Both forms share their non-zero
    eigenvalues (σ² of B), which is all the callers need.
    """
    n, d = X.shape
    if n < d:
        B = _rows64(X, slice(None), mean, normalize)
        return B @ B.T
    G = np.zeros((d, d))
    step = _block_rows(d)
    for start in range(0, n, step):
        B = _rows64(X, slice(start, start + step), mean, normalize)
        G += B.T @ B
    return G


def _sq_norm(X: np.ndarray) -> float:
    """‖X‖²_F in float64 without a full float64 copy."""
    flat = X.reshape(X.shape[0], -1)
    step = _block_rows(flat.shape[1])
    total = 0.0
    for start in range(0, flat.shape[0], step):
        block = flat[start : start + step].astype(np.float64)
        total += float(np.einsum("ij,ij->", block, block))
    return total


def _is_negligible(sq_norm: float, reference_sq_norm: float) -> bool:
    return sq_norm <= (_COLLAPSE_RTOL**2) * reference_sq_norm


def _effective_rank(values: np.ndarray, eps: float, n_zeros: int = 0) -> float:
    """Roy & Vetterli smooth rank of non-negative ``values`` (+ ``n_zeros`` implicit zeros)."""
    p = values / values.sum() + eps
    entropy = -float(np.sum(xlogy(p, p))) - n_zeros * float(xlogy(eps, eps))
    return float(np.exp(entropy))


def _logdet_identity_plus(G: np.ndarray, scale: float) -> float:
    """log det(I + scale·G) for a PSD Gram matrix G, via float64 ``slogdet``."""
    sign, logdet = np.linalg.slogdet(np.eye(G.shape[0]) + scale * G)
    if sign <= 0:  # cannot happen for PSD G up to roundoff far beyond float64's
        raise FloatingPointError("I + c·ZZᵀ is not positive definite; input is ill-scaled")
    return float(logdet)


# --------------------------------------------------------------------------------------------
# RankMe
# --------------------------------------------------------------------------------------------


def _singular_values(X: np.ndarray, mean: np.ndarray | None) -> np.ndarray:
    """Singular values of ``X − mean`` (descending, float64).

    For clearly rectangular inputs they are the square roots of the eigenvalues of the smaller
    Gram matrix: ~5× faster than an SVD at 25,600×2048. Gram eigenvalues below their roundoff
    level λ_max·max(n, d)·ε_mach are set to zero: the Gram form cannot resolve singular values
    under ~sqrt(max(n, d)·ε_mach)·σ_max (~2e-6·σ_max at n = 25,600), which carry less mass than
    eps = 1e-7, and zeroing them keeps rank-deficient (collapsed) spectra exact. Near-square
    inputs take a float64 SVD.
    """
    n, d = X.shape
    if max(n, d) >= 2 * min(n, d):
        lam = np.linalg.eigvalsh(_gram(X, mean))[::-1]
        lam[lam <= lam[0] * max(n, d) * _EPS64] = 0.0
        return np.sqrt(lam)
    B = _rows64(X, slice(None), mean, normalize=False)
    return np.linalg.svd(B, compute_uv=False)


def rankme(Z: Any, eps: float = 1e-7, center: bool = False) -> float:
    """RankMe: smooth effective rank of the singular values of an embedding matrix.

    ``RankMe(Z) = exp(−Σ_k p_k log p_k)`` with ``p_k = σ_k / ‖σ‖₁ + eps`` over the
    ``min(n, d)`` singular values σ of Z (Garrido et al. 2022, "RankMe"; LiDAR spec B.3).

    Parameters
    ----------
    Z : array-like or torch.Tensor, shape (n_samples, dim)
        Embeddings, any float dtype and device.
    eps : float, default 1e-7
        Added to every normalised singular value (Garrido et al.'s value).
    center : bool, default False
        Garrido et al. use the raw, **uncentred** Z (the default). ``True`` subtracts the column
        mean first, which removes the mean direction's singular value.

    Returns
    -------
    float
        Between ~1 and ``min(n, d)``; **higher means a higher-rank (less collapsed) embedding**.
        A numerically zero matrix (with ``center=True``: constant rows) returns **1.0** with a
        :class:`~zoorank.metrics._checks.DegenerateInputWarning`.

    Notes
    -----
    Singular values in float64, never the vectors. Cost O(n·d·min(n, d)); about a second for
    10,000 × 2048 on two cores.
    """
    X = _check_float(Z, "Z", ndim=2)
    eps = _check_eps(eps, "eps")
    mean = X.mean(axis=0, dtype=np.float64) if center else None
    sigma = _singular_values(X, mean)
    if _is_negligible(float(np.sum(sigma**2)), _sq_norm(X)):
        what = "constant rows (zero after centring)" if center else "all zeros"
        warn_degenerate(f"rankme: Z is collapsed ({what}); returning 1.0")
        return 1.0
    return _effective_rank(sigma, eps)


register(
    "rankme", +1, "clean", options=("eps",), tune_floor=1.0,
    settings=lambda o, seed: {"eps": o["eps"], "center": False},
    description="RankMe: exp entropy of the normalised singular values (Garrido 2023)",
)(rankme)


@register(
    "rankme_aug", +1, "augmented", options=("eps",), tune_floor=1.0,
    settings=lambda o, seed: {"eps": o["eps"], "center": False}, notes={"pooled": "n*q rows"},
)
def rankme_aug(E: Any, eps: float = 1e-7, center: bool = False) -> tuple[float, dict[str, Any]]:
    """RankMe of the n·q augmented views pooled (n × q × d → n·q rows)."""
    rows = E.reshape(-1, E.shape[-1])
    return rankme(rows, eps=eps, center=center), {"rows": int(rows.shape[0])}


@register(
    "rankme_norm", +1, "clean", options=("eps",),
    settings=lambda o, seed: {"eps": o["eps"], "center": False}, notes={"divided_by": "width"},
    description="RankMe / embedding width, in (0, 1]: comparable across widths "
                "(a model that spreads over more of its width scores higher)",
)
def rankme_norm(Z: Any, eps: float = 1e-7, center: bool = False) -> tuple[float, dict[str, Any]]:
    """RankMe divided by the embedding width d, in (0, 1]; higher is better.

    RankMe grows with d (a d-dimensional isotropic code scores about d), so a zoo that mixes
    widths is ordered partly by width; dividing by d compares how much of its own width each
    model uses.
    """
    value = rankme(Z, eps=eps, center=center)
    width = int(np.shape(Z)[1])
    return value / width, {"rankme": float(value), "width": width}


@register(
    "rankme_proj", +1, "clean", options=("eps",),
    settings=lambda o, seed: {"eps": o["eps"], "center": False, "seed": seed},
    notes={"projection": "random orthonormal", "dim": PROJECTION_DIM},
    description=f"RankMe after a seeded random orthonormal projection to {PROJECTION_DIM} dims "
                "(the same for every model of a width): at most 64 at any width",
)
def rankme_proj(Z: Any, eps: float = 1e-7, center: bool = False, seed: int = 0
                ) -> tuple[float, dict[str, Any]]:
    """RankMe after one seeded random orthonormal map to ``PROJECTION_DIM`` (64) dimensions.

    The map depends only on (seed, width), so every model of a width sees the same projection:
    orthonormal columns when d ≥ 64 (a random 64-d subspace), orthonormal rows when d < 64 (a
    rotation into 64 dims, which keeps the singular values). Bounded by 64 at any width.
    """
    X = np.asarray(Z, dtype=np.float64)
    d = X.shape[1]
    rng = np.random.default_rng([int(seed), d, PROJECTION_DIM])
    q, _ = np.linalg.qr(rng.standard_normal((max(d, PROJECTION_DIM), min(d, PROJECTION_DIM))))
    R = q if d >= PROJECTION_DIM else q.T
    return rankme(X @ R, eps=eps, center=center), {"width": int(d)}


# --------------------------------------------------------------------------------------------
# LiDAR
# --------------------------------------------------------------------------------------------


def _principal_directions(E: np.ndarray, mean: np.ndarray, r: int) -> np.ndarray:
    """Top-``r`` principal directions (p × r', orthonormal, r' ≤ r) of the pooled rows of E."""
    X = E.reshape(-1, E.shape[-1])
    N, p = X.shape
    G = _gram(X, mean)
    size = G.shape[0]
    r = min(r, size)
    w, U = scipy.linalg.eigh(G, subset_by_index=(size - r, size - 1))
    w, U = w[::-1], U[:, ::-1]
    keep = w > w[0] * max(N, p) * _EPS64
    w, U = w[keep], U[:, keep]
    if N >= p:  # G is the p×p scatter: its eigenvectors are the directions
        return U
    V = _rows64(X, slice(None), mean, normalize=False).T @ (U / np.sqrt(w))
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
        "all": _sq_norm(E),
    }
    if basis is not None:
        between = between @ basis
    Sb = between.T @ between / (n - 1)
    dim = p if basis is None else basis.shape[1]
    Sw = np.zeros((dim, dim))
    step = max(1, _block_rows(p) // q)
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
    X = _check_float(E, "E", ndim=3, min_rows=2)
    n, q, p = X.shape
    if q < 2:
        raise ValueError(f"E needs q >= 2 views per sample for a within-class scatter, got q={q}")
    if p < 1:
        raise ValueError("E needs at least 1 feature, got p=0")
    delta = _check_eps(delta, "delta")
    eps = _check_eps(eps, "eps")
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

    if _is_negligible(norms["between"], norms["class_means"]):
        return _sentinel("all class means are equal (complete collapse, Σ_b = 0)")

    if _is_negligible(norms["within"], norms["all"]):
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
    w = np.maximum(w, max(float(w.max()) * dim * _EPS64, np.finfo(np.float64).tiny))
    # V·diag(w^-1/2) whitens Σ_w + δI; its congruence with Σ_b is orthogonally similar to
    # (Σ_w+δI)^{-1/2} Σ_b (Σ_w+δI)^{-1/2}, so the eigenvalues are the same.
    W = V / np.sqrt(w)
    L = W.T @ Sb @ W
    lam = np.clip(np.linalg.eigvalsh((L + L.T) / 2)[::-1], 0.0, None)
    details["eigenvalues"] = lam
    if not lam.sum() > 0:
        return _sentinel("no between-class scatter beyond view noise (debiased Σ_b = 0)")
    value = _effective_rank(lam, eps, n_zeros=p - dim)
    return (value, details) if return_details else value


@register(
    "lidar", +1, "augmented", options=("lidar_delta", "lidar_delta_mode", "eps"), tune_floor=1.0,
    settings=lambda o, seed: {"delta": o["lidar_delta"], "eps": o["eps"],
                              "delta_mode": o["lidar_delta_mode"]},
)
def _lidar_metric(E: Any, **settings: Any) -> tuple[float, dict[str, Any]]:
    """LiDAR: smooth rank of the LDA matrix (Thilak 2024)."""
    value, details = lidar(E, return_details=True, **settings)
    return value, {"reduced": bool(details["reduced"]), "lda_dim": int(details["dim"])}


# --------------------------------------------------------------------------------------------
# alpha-ReQ
# --------------------------------------------------------------------------------------------


def alpha_req(
    Z: Any, fit_range: tuple[int, int] = (10, 100), return_r2: bool = False
) -> float | tuple[float, float]:
    """alpha-ReQ: power-law decay exponent α of the covariance eigenspectrum, λ_k ∝ k^{−α}.

    Agrawal et al. 2022 (spec B.4): eigenvalues λ_1 ≥ λ_2 ≥ … of the centred covariance of Z
    (float64), then an ordinary (unweighted) least-squares fit of log λ_k = −α log k + c over the
    1-based ranks ``fit_range[0] ≤ k < fit_range[1]`` (start inclusive, stop exclusive: the
    default fits k = 10..99, skipping the head and the noisy tail).

    Parameters
    ----------
    Z : array-like or torch.Tensor, shape (n_samples, dim)
    fit_range : (int, int), default (10, 100)
        Ranks used in the fit. When the stop rank exceeds the number of non-zero eigenvalues
        (at most min(dim, n − 1)) it is clipped there, with a DegenerateInputWarning.
    return_r2 : bool, default False
        Also return the coefficient of determination of the log-log fit.

    Returns
    -------
    float, or (float, float)
        α. The ReQ paper calls α ≈ 1 ideal: α < 1 means a flat, noisy, high-rank spectrum,
        α > 1 a fast-decaying, low-rank one; score with −|α − 1| to make higher better.

    Raises
    ------
    ValueError
        Fewer than 2 ranks left to fit (a collapsed Z, or a start rank beyond the spectrum), a
        bad ``fit_range``, NaN/Inf values, or fewer than 2 samples.

    Notes
    -----
    Cost O(n·d·min(n, d)) for the scatter plus one eigendecomposition of the smaller Gram matrix.
    """
    X = _check_float(Z, "Z", ndim=2, min_rows=2)
    start, stop = _check_fit_range(fit_range)
    n, d = X.shape
    mean = X.mean(axis=0, dtype=np.float64)
    lam = np.clip(np.linalg.eigvalsh(_gram(X, mean) / (n - 1))[::-1], 0.0, None)
    if _is_negligible(float(lam.sum()) * (n - 1), _sq_norm(X)):
        raise ValueError("alpha_req: Z is collapsed (constant rows); no spectrum to fit")
    available = int(np.count_nonzero(lam > lam[0] * max(n, d) * _EPS64))
    if start + 1 > available:
        raise ValueError(
            f"alpha_req: fit_range needs at least 2 non-zero eigenvalues from rank {start}, "
            f"but Z has {available}"
        )
    if stop - 1 > available:
        warn_degenerate(
            f"alpha_req: only {available} non-zero eigenvalues; fit_range ({start}, {stop}) "
            f"clipped to ({start}, {available + 1})"
        )
        stop = available + 1
    k = np.arange(start, stop, dtype=np.float64)
    x, y = np.log(k), np.log(lam[start - 1 : stop - 1])
    slope, intercept = np.polyfit(x, y, 1)
    alpha = float(-slope)
    if not return_r2:
        return alpha
    ss_res = float(np.sum((y - (slope * x + intercept)) ** 2))
    ss_tot = float(np.sum((y - y.mean()) ** 2))
    r2 = 1.0 if ss_tot == 0.0 else 1.0 - ss_res / ss_tot
    return alpha, r2


@register(
    "alpha_req", -1, "clean", options=("alpha_fit_range",), target=1.0,
    settings=lambda o, seed: {"fit_range": tuple(o["alpha_fit_range"])},
    notes={"ranked_by": "-|alpha-1|"},
)
def _alpha_req_metric(Z: Any, fit_range: tuple[int, int]) -> tuple[float, dict[str, Any]]:
    """alpha-ReQ: power-law decay of the spectrum, ranked by |alpha - 1|."""
    alpha, r2 = alpha_req(Z, fit_range=fit_range, return_r2=True)
    return alpha, {"r2": float(r2)}


def _check_fit_range(fit_range: tuple[int, int]) -> tuple[int, int]:
    try:
        start, stop = (int(v) for v in fit_range)
    except (TypeError, ValueError):
        raise ValueError(f"fit_range must be two integers (start, stop), got {fit_range!r}") from None
    if start < 1 or stop - start < 2:
        raise ValueError(
            f"fit_range must satisfy 1 <= start and stop - start >= 2 (1-based ranks, stop "
            f"exclusive), got {fit_range!r}"
        )
    return start, stop


# --------------------------------------------------------------------------------------------
# MCR² coding rate
# --------------------------------------------------------------------------------------------


def _check_coding_input(Z: Any, eps2: float) -> tuple[np.ndarray, float]:
    X = _check_float(Z, "Z", ndim=2)
    eps2 = _check_eps(eps2, "eps2", positive=True)
    n_zero = int(np.count_nonzero(~X.any(axis=1)))
    if n_zero:
        warn_degenerate(f"coding rate: {n_zero} rows of Z are zero and stay zero after L2 normalisation")
    return X, eps2


def _rate(X: np.ndarray, eps2: float) -> float:
    """½ logdet(I + m/(N ε²) ZᵀZ) on L2-normalised rows (Sylvester: the smaller Gram form)."""
    N, m = X.shape
    return 0.5 * _logdet_identity_plus(_gram(X, normalize=True), m / (N * eps2))


def coding_rate(Z: Any, eps2: float = 0.5) -> float:
    """MCR² coding rate R(Z, ε) of L2-normalised embeddings (Yu et al. 2020; spec A.5 item 2).

    With the N L2-normalised rows of Z as the columns of an m × N matrix,
    ``R = ½ logdet(I_m + m/(N ε²) Z Zᵀ)`` in nats, through float64 ``slogdet`` of whichever of the
    m × m and N × N forms is smaller (equal by Sylvester's determinant identity).

    Parameters
    ----------
    Z : array-like or torch.Tensor, shape (n_samples, dim)
        Rows are L2-normalised here (zero rows stay zero, with a DegenerateInputWarning).
    eps2 : float, default 0.5
        ε², the distortion (the official code's ``eps`` argument is ε²; CLID uses 0.5).

    Returns
    -------
    float
        Non-negative; **higher means the embeddings span more volume** (more expressive). CLID
        reports R(Z) as a baseline that correlates *negatively* with accuracy (spec A.9 item 10).

    Notes
    -----
    Cost O(N·m·min(N, m)) plus one min(N, m)-sized determinant.
    """
    X, eps2 = _check_coding_input(Z, eps2)
    return _rate(X, eps2)


register(
    "coding_rate", +1, "clean", options=("coding_rate_eps2",),
    settings=lambda o, seed: {"eps2": o["coding_rate_eps2"]}, notes={"normalize": True},
    description="MCR² coding rate",
)(coding_rate)


def coding_rate_reduction(
    Z: Any, labels: Any, eps2: float = 0.5, *, return_parts: bool = False
) -> float | tuple[float, float, float]:
    """MCR² rate reduction ΔR = R(Z, ε) − R^c(Z, ε | Π) (Yu et al. 2020; spec A.5 item 2).

    ``R^c = Σ_j tr(Π_j)/(2N) · logdet(I_m + m/(tr(Π_j) ε²) Z Π_j Zᵀ)`` over the groups j of
    ``labels`` (Π_j the 0/1 membership diagonal, tr(Π_j) the group size), with R as in
    :func:`coding_rate` on the same L2-normalised rows. CLID takes the labels from K-means with
    K = √N; this function takes any labels.

    Parameters
    ----------
    Z : array-like or torch.Tensor, shape (n_samples, dim)
    labels : array-like, shape (n_samples,)
        Group of each row (any hashable values; empty groups cannot occur).
    eps2 : float, default 0.5
        ε² (see :func:`coding_rate`).
    return_parts : bool, default False
        Return ``(ΔR, R, R^c)`` instead of ΔR alone (CLID reports R, −R^c and ΔR).

    Returns
    -------
    float, or (float, float, float)
        ΔR ≥ 0 (concavity of logdet), 0 up to roundoff for a single group; **higher means the
        groups are more compact relative to the whole**.

    Notes
    -----
    Cost: R as in :func:`coding_rate`, plus one Gram matrix of size min(N_j, m) per group.
    """
    X, eps2 = _check_coding_input(Z, eps2)
    N, m = X.shape
    codes = check_labels(labels, N, name="labels")
    r = _rate(X, eps2)
    r_c = 0.0
    for j in range(int(codes.max()) + 1):
        members = X[codes == j]
        n_j = members.shape[0]
        g = _gram(members, normalize=True)
        r_c += n_j / (2 * N) * _logdet_identity_plus(g, m / (n_j * eps2))
    delta_r = r - r_c
    return (delta_r, r, r_c) if return_parts else delta_r
