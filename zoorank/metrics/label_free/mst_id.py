"""Intrinsic dimension from the growth of the minimum spanning tree (MST) with the sample size.

For n points drawn from a density on a d-dimensional manifold, the total γ-weighted length of
their Euclidean MST grows as L_γ(n) = Σ_edges |e|^γ ≈ β · n^((d − γ)/d) (Beardwood–Halton–Hammersley;
Steele 1988; the geodesic-MST estimator of Costa & Hero 2004). Fitting log L_γ against log n over
nested subsamples gives the slope a = (d − γ)/d, hence d = γ / (1 − a).

Conventions: rows are L2-normalised first (Euclidean distance on the sphere, as ``twonn_id`` and
``mle_id`` are for CLID); exact duplicate rows are dropped first (a zero-length edge carries no
scale); the sizes are ``n_sizes`` geometric fractions of n down to n / 2^(n_sizes − 1), each the
mean length over ``repeats`` seeded subsamples (one for the full set). Higher = a more expressive
representation, as for the other intrinsic dimensions. Float64 throughout.
"""

from __future__ import annotations

from typing import Any

import numpy as np
from scipy.sparse.csgraph import minimum_spanning_tree
from scipy.spatial.distance import pdist, squareform

from zoorank.metrics._checks import check_array, warn_degenerate
from zoorank.metrics.registry import register

__all__ = ["mst_id", "mst_length"]


def mst_length(X: Any, gamma: float = 1.0) -> float:
    """Σ |e|^γ over the edges of the Euclidean minimum spanning tree of the rows of ``X``.

    Rows must be distinct (a zero distance is read by scipy as a missing edge): ValueError
    otherwise. Cost: O(n² d) for the distances, O(n²) for the tree.
    """
    A = check_array(X, "X", ndim=2).astype(np.float64)
    if A.shape[0] < 2:
        raise ValueError(f"an MST needs at least 2 points, got {A.shape[0]}")
    D = pdist(A)
    if np.any(D <= 0):
        raise ValueError("mst_length: X has duplicate rows (drop them first)")
    tree = minimum_spanning_tree(squareform(D))
    edges = tree.data
    if edges.shape[0] != A.shape[0] - 1:  # pragma: no cover - guarded by the duplicate check
        raise ValueError("mst_length: the distance graph is not connected")
    return float(np.sum(edges**gamma))


@register(
    "mst_id", +1, "clean", tune_floor=0.0,
    settings=lambda o, seed: {"gamma": 1.0, "n_sizes": 4, "repeats": 3, "normalize": True,
                              "seed": seed},
    notes={"distance": "euclidean", "sizes": "n, n/2, n/4, n/8"},
    description="MST intrinsic dimension: γ/(1 − slope) of log MST length on log n (Costa & Hero)",
)
def mst_id(
    Z: Any,
    gamma: float = 1.0,
    n_sizes: int = 4,
    repeats: int = 3,
    normalize: bool = True,
    seed: int = 0,
    return_details: bool = False,
) -> float | dict[str, Any]:
    """MST-length intrinsic dimension d = γ / (1 − a), a the log–log slope of L_γ(n) on n.

    Parameters
    ----------
    Z : (n, d) array or tensor; at least 2^(n_sizes − 1) · 8 distinct rows.
    gamma : edge-length exponent, 0 < γ. Default 1 (the MST's length).
    n_sizes : number of subsample sizes (≥ 2), n, n/2, …, n/2^(n_sizes − 1).
    repeats : seeded subsamples averaged at each size below n (≥ 1).
    normalize : L2-normalise rows first (default True).
    seed : the subsamples' seed.
    return_details : a dict {"id", "slope", "sizes", "lengths", "n_used", "n_duplicates_dropped"}.

    Raises
    ------
    ValueError
        NaN/Inf, too few distinct rows, bad settings, or a slope ≥ 1 (the length does not shrink
        relative to n: no finite dimension).
    """
    if not gamma > 0:
        raise ValueError(f"gamma must be > 0, got {gamma}")
    if int(n_sizes) != n_sizes or n_sizes < 2 or int(repeats) != repeats or repeats < 1:
        raise ValueError(f"n_sizes must be an integer >= 2 and repeats >= 1, got {n_sizes}, {repeats}")
    X = check_array(Z, "Z", ndim=2).astype(np.float64)
    if normalize:
        norms = np.linalg.norm(X, axis=1, keepdims=True)
        if np.any(norms <= 0):
            raise ValueError("mst_id: a row of Z is all zeros (cannot L2-normalise)")
        X = X / norms
    unique = np.unique(X, axis=0)
    n_dup = X.shape[0] - unique.shape[0]
    if n_dup:
        warn_degenerate(f"mst_id dropped {n_dup} duplicate rows of {X.shape[0]}")
    X = unique[np.random.default_rng([int(seed), 0]).permutation(unique.shape[0])]
    n = X.shape[0]
    smallest = n // 2 ** (int(n_sizes) - 1)
    if smallest < 8:
        raise ValueError(f"mst_id needs at least {8 * 2 ** (int(n_sizes) - 1)} distinct rows for "
                         f"{n_sizes} sizes, got {n}")
    sizes = [n // 2**k for k in range(int(n_sizes))][::-1]
    lengths = []
    rng = np.random.default_rng([int(seed), 1])
    for m in sizes:
        draws = 1 if m == n else int(repeats)
        lengths.append(np.mean([mst_length(X[rng.choice(n, size=m, replace=False)] if m < n else X,
                                           gamma) for _ in range(draws)]))
    slope = float(np.polyfit(np.log(sizes), np.log(lengths), 1)[0])
    if not slope < 1:
        raise ValueError(f"mst_id: the MST length grows as n^{slope:.3f} (slope >= 1): no finite "
                         "intrinsic dimension")
    value = float(gamma / (1.0 - slope))
    if return_details:
        return {"id": value, "slope": slope, "sizes": sizes, "lengths": [float(v) for v in lengths],
                "n_used": n, "n_duplicates_dropped": n_dup}
    return value
