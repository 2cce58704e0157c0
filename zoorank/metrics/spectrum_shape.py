"""The shape of the eigenspectrum beyond its effective rank: alpha-ReQ (Agrawal et al. 2022; spec B.4),
the power-law decay of the covariance eigenvalues, and the MCR² coding rate (Yu et al. 2020; spec
A.5 item 2), the log-volume of the embeddings at distortion ε².
"""

from __future__ import annotations

from typing import Any

import numpy as np

from zoorank.metrics._checks import (
    check_labels,
    warn_degenerate,
)
from zoorank.metrics._spectrum import (
    EPS64,
    check_eps,
    check_float,
    gram,
    is_negligible,
    logdet_identity_plus,
    sq_norm,
)
from zoorank.metrics.options import option
from zoorank.metrics.registry import register

__all__ = ["alpha_req", "coding_rate", "coding_rate_reduction"]

option("alpha_fit_range", (10, 100), "alpha-ReQ: ranks of the power-law fit [start, stop)")

option("coding_rate_eps2", 0.5, "MCR²: distortion ε²")


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
    X = check_float(Z, "Z", ndim=2, min_rows=2)
    start, stop = _check_fit_range(fit_range)
    n, d = X.shape
    mean = X.mean(axis=0, dtype=np.float64)
    lam = np.clip(np.linalg.eigvalsh(gram(X, mean) / (n - 1))[::-1], 0.0, None)
    if is_negligible(float(lam.sum()) * (n - 1), sq_norm(X)):
        raise ValueError("alpha_req: Z is collapsed (constant rows); no spectrum to fit")
    available = int(np.count_nonzero(lam > lam[0] * max(n, d) * EPS64))
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


def _check_coding_input(Z: Any, eps2: float) -> tuple[np.ndarray, float]:
    X = check_float(Z, "Z", ndim=2)
    eps2 = check_eps(eps2, "eps2", positive=True)
    n_zero = int(np.count_nonzero(~X.any(axis=1)))
    if n_zero:
        warn_degenerate(f"coding rate: {n_zero} rows of Z are zero and stay zero after L2 normalisation")
    return X, eps2


def _rate(X: np.ndarray, eps2: float) -> float:
    """½ logdet(I + m/(N ε²) ZᵀZ) on L2-normalised rows (Sylvester: the smaller Gram form)."""
    N, m = X.shape
    return 0.5 * logdet_identity_plus(gram(X, normalize=True), m / (N * eps2))


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
        g = gram(members, normalize=True)
        r_c += n_j / (2 * N) * logdet_identity_plus(g, m / (n_j * eps2))
    delta_r = r - r_c
    return (delta_r, r, r_c) if return_parts else delta_r
