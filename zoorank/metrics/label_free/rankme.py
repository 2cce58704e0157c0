"""RankMe (Garrido et al. 2022; ``specs/clid_lidar.md`` B.3) and its variants: on augmented views
(``rankme_aug``), normalised by the width (``rankme_norm``) and after a seeded projection to
:data:`PROJECTION_DIM` dimensions (``rankme_proj``).

RankMe feeds the smooth effective rank (:mod:`zoorank.metrics.label_free._spectrum`) the singular values of
Z; LiDAR (:mod:`zoorank.metrics.label_free.lidar`) feeds it eigenvalues of a covariance-type matrix. The two
scales differ on purpose (spec B.3): do not swap them. A collapsed input (Z numerically zero: a
Frobenius norm at most ``1e-10`` times that of the raw input) has no spectrum: the sentinel
**1.0**, the smallest value a non-empty spectrum can give, with a :class:`DegenerateInputWarning`.
"""

from __future__ import annotations

from typing import Any

import numpy as np

from zoorank.metrics._checks import (
    warn_degenerate,
)
from zoorank.metrics.label_free._spectrum import (
    EPS64,
    check_eps,
    check_float,
    effective_rank,
    gram,
    is_negligible,
    rows64,
    sq_norm,
)
from zoorank.metrics.registry import register

__all__ = ["rankme"]

#: ``rankme_proj``: every model's embeddings are projected to this many dimensions first.
PROJECTION_DIM = 64


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
        lam = np.linalg.eigvalsh(gram(X, mean))[::-1]
        lam[lam <= lam[0] * max(n, d) * EPS64] = 0.0
        return np.sqrt(lam)
    B = rows64(X, slice(None), mean, normalize=False)
    return np.linalg.svd(B, compute_uv=False)


@register(
    "rankme", +1, "clean", options=("eps",), tune_floor=1.0,
    settings=lambda o, seed: {"eps": o["eps"], "center": False},
    description="RankMe: exp entropy of the normalised singular values (Garrido 2023)",
    default_rank=1, width_sensitive=True,
)
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
    X = check_float(Z, "Z", ndim=2)
    eps = check_eps(eps, "eps")
    mean = X.mean(axis=0, dtype=np.float64) if center else None
    sigma = _singular_values(X, mean)
    if is_negligible(float(np.sum(sigma**2)), sq_norm(X)):
        what = "constant rows (zero after centring)" if center else "all zeros"
        warn_degenerate(f"rankme: Z is collapsed ({what}); returning 1.0")
        return 1.0
    return effective_rank(sigma, eps)


@register(
    "rankme_aug", +1, "augmented", options=("eps",), tune_floor=1.0,
    settings=lambda o, seed: {"eps": o["eps"], "center": False}, notes={"pooled": "n*q rows"},
    default_rank=9, width_sensitive=True,
)
def rankme_aug(E: Any, eps: float = 1e-7, center: bool = False) -> tuple[float, dict[str, Any]]:
    """RankMe of the n·q augmented views pooled (n × q × d → n·q rows)."""
    rows = E.reshape(-1, E.shape[-1])
    return rankme(rows, eps=eps, center=center), {"rows": int(rows.shape[0])}


@register(
    "rankme_norm", +1, "clean", options=("eps",),
    settings=lambda o, seed: {"eps": o["eps"], "center": False}, notes={"divided_by": "width"},
    description="RankMe / embedding width, in (0, 1]: comparable across widths "
                "(a model that spreads over more of its width scores higher)", default_rank=3,
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
                "(the same for every model of a width): at most 64 at any width", default_rank=2,
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
