"""The MCR² coding rate (Yu et al. 2020; spec A.5 item 2): the log-volume of L2-normalised
embeddings at distortion ε², and the rate reduction of a grouping of them.
"""

from __future__ import annotations

from typing import Any

import numpy as np

from zoorank.metrics._checks import check_labels, warn_degenerate
from zoorank.metrics.label_free._spectrum import (
    check_eps,
    check_float,
    gram,
    logdet_identity_plus,
)
from zoorank.metrics.registry import register
from zoorank.metrics.score_options import option

__all__ = ["coding_rate", "coding_rate_reduction"]

option("coding_rate_eps2", 0.5, "MCR²: distortion ε²")


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


@register(
    "coding_rate", +1, "clean", options=("coding_rate_eps2",),
    settings=lambda o, seed: {"eps2": o["coding_rate_eps2"]}, notes={"normalize": True},
    description="MCR² coding rate", default_rank=10, width_sensitive=True,
)
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
