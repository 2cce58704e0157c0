"""Geometry of a representation: intrinsic dimension (TwoNN, MLE) and alignment / uniformity.

Intrinsic dimension is CLID's *expressiveness* term (Lu et al., specs/clid_lidar.md A.2);
alignment and uniformity are Wang & Isola's (2020) contrastive baselines (A.5). Every function takes
an (n, d) NumPy array or torch tensor of any float dtype on any device and returns a Python float.
"""

from __future__ import annotations

import math
from typing import Any, Literal

import numpy as np

from zoorank.metrics._checks import (
    check_array,
    l2_normalize,
    row_norms,
    to_numpy,
    warn_degenerate,
)
from zoorank.metrics.neighbors import knn
from zoorank.metrics.registry import fixed, register
from zoorank.metrics.score_options import option

__all__ = ["twonn_id", "mle_id", "alignment", "uniformity"]

# A relative slack for floor((1 - f) * n): (1 - 0.1) * 30 is 27.000000000000004 in floating point,
# and other fractions land just below an integer; the estimator must keep the mathematical count.
_FLOOR_SLACK = 1e-9

#: Wang & Isola's (2020) exponents, also CLID's (spec A.5).
ALIGNMENT_ALPHA = 2.0
UNIFORMITY_T = 2.0

option("mle_k", 20, "MLE intrinsic dimension: neighbours k")


def _prepare_rows(Z: Any, name: str, normalize: bool, min_rows: int) -> np.ndarray:
    raw = to_numpy(Z)
    X = check_array(raw, name, min_rows=min_rows)
    if normalize:
        n_zero = int((row_norms(X) == 0).sum())
        if n_zero:
            warn_degenerate(
                f"{name} has {n_zero} all-zero rows; they stay at the origin after L2 normalisation"
            )
        # A float64 copy made by check_array is ours: normalise it in place (one n × d float64
        # array less at the peak, e.g. 800 MB at 50k × 2048); never write into the caller's array.
        X = l2_normalize(X, out=None if np.may_share_memory(X, raw) else X)
    return X


def twonn_id(
    Z: Any,
    discard_fraction: float = 0.1,
    normalize: bool = False,
    fit_intercept: bool = False,
    return_details: bool = False,
) -> float | dict[str, float | int]:
    """TwoNN intrinsic dimension (Facco et al. 2017), in the scikit-dimension convention.

    For every point, μ_i = r_i2 / r_i1 is the ratio of the Euclidean distances (not squared) to
    its second and first nearest neighbours, the point itself excluded. Under local uniformity μ
    follows a Pareto law with CDF F(μ) = 1 − μ^(−d), so −log(1 − F) = d·log μ. The μ are sorted,
    the largest ``discard_fraction`` are dropped, F_emp = arange(n_keep) / n, and d is the
    least-squares slope of y = −log(1 − F_emp) on x = log μ, through the origin (d = Σxy / Σx², the
    ``skdim.id.TwoNN`` default, also Ansuini et al. 2019) or with an intercept.

    Points with r_i1 = 0 (exact duplicates, a collapsed representation) have an undefined μ; they
    are dropped and counted (``DegenerateInputWarning``), and n above counts the remaining points.

    Parameters
    ----------
    Z : (n, d) array or tensor, n ≥ 3.
    discard_fraction : fraction of the largest μ left out of the fit, in [0, 1). Default 0.1 (Facco;
        skdim). The largest μ must go in any case: F_emp = 1 would make y infinite.
    normalize : L2-normalise rows first, as CLID does (Euclidean distance on the sphere, i.e.
        sqrt(2 − 2cos), never the squared 2 − 2cos, which would halve the estimate). Default False,
        the textbook estimator on raw features.
    fit_intercept : fit y = a + d·x instead of y = d·x.
    return_details : return a dict {"id", "intercept", "n_used", "n_duplicates_dropped"} instead of
        the float; ``n_used`` is the number of points in the fit.

    Returns
    -------
    float
        The intrinsic dimension. Higher means a more expressive (less compressed) representation.

    Raises
    ------
    ValueError
        NaN/Inf input, fewer than 3 points, fewer than 3 points left after dropping duplicates and
        discarding, or all kept μ equal to 1 (no slope to fit).

    Notes
    -----
    Cost: one exact 2-NN self-search, O(n² d), in row blocks (``zoorank.metrics.neighbors.knn``);
    distances in float32 recomputed exactly in float64; ratios and logs in float64.
    """
    if not 0.0 <= discard_fraction < 1.0:
        raise ValueError(f"discard_fraction must be in [0, 1), got {discard_fraction}")
    X = _prepare_rows(Z, "Z", normalize, min_rows=3)
    dist, _ = knn(X, k=2, metric="euclidean")
    r1, r2 = dist[:, 0], dist[:, 1]
    duplicate = r1 <= 0.0
    n_dup = int(duplicate.sum())
    if n_dup:
        warn_degenerate(
            f"twonn_id dropped {n_dup} of {len(r1)} points whose nearest neighbour is at "
            "distance 0 (duplicates or a collapsed representation)"
        )
    mu = np.sort(r2[~duplicate] / r1[~duplicate])
    n = mu.shape[0]
    n_keep = math.floor(n * (1.0 - discard_fraction) + _FLOOR_SLACK)
    if n_keep < 3:
        raise ValueError(
            f"twonn_id needs at least 3 points in the fit, got {n_keep} "
            f"({n_dup} duplicates dropped, discard_fraction={discard_fraction})"
        )
    x = np.log(mu[:n_keep])
    y = -np.log1p(-np.arange(n_keep, dtype=np.float64) / n)
    if fit_intercept:
        xc = x - x.mean()
        sxx = float(xc @ xc)
        if sxx <= 0.0:
            raise ValueError("twonn_id: all kept distance ratios are equal; the slope is undefined")
        slope = float(xc @ (y - y.mean())) / sxx
        intercept = float(y.mean() - slope * x.mean())
    else:
        sxx = float(x @ x)
        if sxx <= 0.0:
            raise ValueError("twonn_id: all kept distance ratios are 1; the slope is undefined")
        slope = float(x @ y) / sxx
        intercept = 0.0
    if return_details:
        return {
            "id": slope,
            "intercept": intercept,
            "n_used": int(n_keep),
            "n_duplicates_dropped": n_dup,
        }
    return slope


@register(
    "twonn_id", +1, "clean", tune_floor=0.0,
    settings=fixed(discard_fraction=0.1, normalize=True, fit_intercept=False),
    notes={"distance": "euclidean"}, default_rank=5, width_sensitive=True,
)
def _twonn_metric(Z: Any, **settings: Any) -> tuple[float, dict[str, Any]]:
    """TwoNN intrinsic dimension on L2-normalised rows."""
    d = twonn_id(Z, return_details=True, **settings)
    return d["id"], {"n_used": d["n_used"], "n_duplicates_dropped": d["n_duplicates_dropped"]}


def mle_id(
    Z: Any,
    k: int = 20,
    normalize: bool = False,
    aggregate: Literal["mean", "mackay"] = "mean",
    return_details: bool = False,
) -> float | dict[str, float | int]:
    """Levina–Bickel (2004) maximum-likelihood intrinsic dimension.

    With T_j(x) the Euclidean distance from x to its j-th nearest neighbour (x excluded), the local
    estimate is D̂(x, k) = [(1/(k−1)) Σ_{j=1}^{k−1} log(T_k(x) / T_j(x))]^(−1). The global
    estimate is the mean of the local ones (``aggregate="mean"``, Levina–Bickel) or the inverse of
    the mean of their inverses (``aggregate="mackay"``, MacKay & Ghahramani 2005).

    A point whose local estimate is undefined is dropped and counted (``DegenerateInputWarning``):
    T_1 = 0 (an exact duplicate among its neighbours) or T_1 = T_k (all k neighbours equidistant).

    Parameters
    ----------
    Z : (n, d) array or tensor, n ≥ k + 1.
    k : neighbours per point, ≥ 2. Default 20 (the Ma et al. 2018 convention; CLID App. B leaves it
        open).
    normalize : L2-normalise rows first (Euclidean distance on the sphere), as for CLID.
    aggregate : ``"mean"`` or ``"mackay"``.
    return_details : return a dict {"id", "n_used", "n_degenerate_dropped"} instead of the float.

    Returns
    -------
    float
        The intrinsic dimension; higher means a more expressive representation.

    Raises
    ------
    ValueError
        NaN/Inf input, bad ``k`` or ``aggregate``, fewer than k + 1 points, or no point left with a
        defined local estimate.

    Notes
    -----
    Cost: one exact k-NN self-search, O(n² d); logs in float64.
    """
    if aggregate not in ("mean", "mackay"):
        raise ValueError(f"aggregate must be 'mean' or 'mackay', got {aggregate!r}")
    if int(k) != k or k < 2:
        raise ValueError(f"k must be an integer >= 2, got {k}")
    k = int(k)
    X = _prepare_rows(Z, "Z", normalize, min_rows=k + 1)
    T, _ = knn(X, k=k, metric="euclidean")
    undefined = (T[:, 0] <= 0.0) | (T[:, 0] >= T[:, -1])
    n_bad = int(undefined.sum())
    if n_bad == len(T):
        raise ValueError(
            "mle_id: every point has a duplicate or equidistant neighbours; "
            "the estimate is undefined"
        )
    if n_bad:
        warn_degenerate(
            f"mle_id dropped {n_bad} of {len(T)} points with a duplicate neighbour (T_1 = 0) or "
            "equidistant neighbours (T_1 = T_k)"
        )
    logT = np.log(T[~undefined])
    # Inverse local estimates: mean over j < k of log(T_k / T_j); strictly positive here.
    inv_local = logT[:, -1] - logT[:, :-1].mean(axis=1)
    if aggregate == "mean":
        value = float(np.mean(1.0 / inv_local))
    else:
        value = float(1.0 / np.mean(inv_local))
    if return_details:
        return {"id": value, "n_used": int(inv_local.shape[0]), "n_degenerate_dropped": n_bad}
    return value


@register(
    "mle_id", +1, "clean", options=("mle_k",),
    settings=lambda o, seed: {"k": o["mle_k"], "normalize": True, "aggregate": "mean"},
    default_rank=15, width_sensitive=True,
)
def _mle_metric(Z: Any, **settings: Any) -> tuple[float, dict[str, Any]]:
    """Levina-Bickel MLE intrinsic dimension."""
    d = mle_id(Z, return_details=True, **settings)
    return d["id"], {"n_used": d["n_used"], "n_degenerate_dropped": d["n_degenerate_dropped"]}


def alignment(Z1: Any, Z2: Any, alpha: float = 2) -> float:
    """Alignment loss of positive pairs (Wang & Isola 2020): E ‖f̂(x) − f̂(x')‖₂^α.

    Row i of ``Z1`` and row i of ``Z2`` are the embeddings of two views of the same input; rows are
    L2-normalised first, as in the official code (``(x − y).norm(dim=1).pow(2).mean()``).

    Parameters
    ----------
    Z1, Z2 : (n, d) arrays or tensors of the same shape.
    alpha : exponent, > 0. Default 2 (Wang & Isola; CLID A.5).

    Returns
    -------
    float in [0, 2^α]. Lower is better (positive pairs closer); CLID's predictor is −alignment.

    Notes
    -----
    Cost: O(n d), float64.
    """
    if not alpha > 0:
        raise ValueError(f"alpha must be > 0, got {alpha}")
    A = _prepare_rows(Z1, "Z1", normalize=True, min_rows=1)
    B = _prepare_rows(Z2, "Z2", normalize=True, min_rows=1)
    if A.shape != B.shape:
        raise ValueError(f"Z1 and Z2 must have the same shape, got {A.shape} and {B.shape}")
    return float(np.mean(np.linalg.norm(A - B, axis=1) ** alpha))


@register(
    "alignment", -1, "augmented", settings=fixed(alpha=ALIGNMENT_ALPHA),
    notes={"views": [0, 1], "normalize": True}, default_rank=6, collapse_degenerate=True,
)
def _alignment_metric(E: Any, alpha: float) -> float:
    """alignment of views 0 and 1 (Wang & Isola 2020)."""
    if E.ndim != 3 or E.shape[1] < 2:
        raise ValueError(f"alignment needs n×q views with q >= 2, got shape {tuple(E.shape)}")
    return alignment(E[:, 0], E[:, 1], alpha=alpha)


@register(
    "uniformity", -1, "clean", settings=fixed(t=UNIFORMITY_T), notes={"normalize": True},
    description="uniformity on the sphere (Wang & Isola 2020)", default_rank=7, collapse_degenerate=True,
)
def uniformity(Z: Any, t: float = 2, block_size: int = 2048) -> float:
    """Uniformity loss (Wang & Isola 2020): log E exp(−t ‖f̂(x_i) − f̂(x_j)‖₂²).

    The expectation runs over the n(n−1)/2 distinct pairs i < j (the ``torch.pdist`` convention of
    the official code, ``torch.pdist(x).pow(2).mul(-t).exp().mean().log()``), on L2-normalised rows.

    Parameters
    ----------
    Z : (n, d) array or tensor, n ≥ 2.
    t : temperature, > 0. Default 2 (Wang & Isola; CLID A.5).
    block_size : side of the square tiles of the pair matrix. Memory is O(block_size² + n d); the
        n × n matrix is never formed, so n = 50k is fine.

    Returns
    -------
    float in [−4t, 0]. Lower is better (embeddings spread more uniformly on the sphere); a collapsed
    representation gives 0. CLID's predictor is −uniformity.

    Notes
    -----
    Exact: float64 tiles combined with a running log-sum-exp, so nothing underflows for large t.
    Cost: O(n² d / 2) flops.
    """
    if not t > 0:
        raise ValueError(f"t must be > 0, got {t}")
    if int(block_size) != block_size or block_size < 1:
        raise ValueError(f"block_size must be a positive integer, got {block_size}")
    block_size = int(block_size)
    X = _prepare_rows(Z, "Z", normalize=True, min_rows=2)
    n = X.shape[0]
    sq_norms = np.einsum("ij,ij->i", X, X)
    run_max = -np.inf
    run_sum = 0.0
    for r0 in range(0, n, block_size):
        r1 = min(r0 + block_size, n)
        for c0 in range(r0, n, block_size):
            c1 = min(c0 + block_size, n)
            sq = sq_norms[r0:r1, None] + sq_norms[None, c0:c1] - 2.0 * (X[r0:r1] @ X[c0:c1].T)
            np.maximum(sq, 0.0, out=sq)
            vals = -t * sq
            if c0 == r0:  # diagonal tile: only pairs strictly above the diagonal
                vals = vals[np.triu_indices(r1 - r0, k=1, m=c1 - c0)]
            if vals.size == 0:
                continue
            tile_max = float(vals.max())
            if tile_max > run_max:
                run_sum = run_sum * math.exp(run_max - tile_max) if run_sum else 0.0
                run_max = tile_max
            run_sum += float(np.exp(vals - run_max).sum())
    n_pairs = n * (n - 1) / 2
    return float(run_max + math.log(run_sum) - math.log(n_pairs))


