"""alpha-ReQ (Agrawal et al. 2022; spec B.4): the shape of the eigenspectrum beyond its effective
rank, the power-law decay of the covariance eigenvalues (ranked by ``|alpha - 1|``).
"""

from __future__ import annotations

from typing import Any

import numpy as np

from zoorank.metrics._checks import (
    warn_degenerate,
)
from zoorank.metrics.label_free._spectrum import (
    EPS64,
    check_float,
    gram,
    is_negligible,
    sq_norm,
)
from zoorank.metrics.registry import register
from zoorank.metrics.score_options import option

__all__ = ["alpha_req"]

option("alpha_fit_range", (10, 100), "alpha-ReQ: ranks of the power-law fit [start, stop)")


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
    notes={"ranked_by": "-|alpha-1|"}, default_rank=13,
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
