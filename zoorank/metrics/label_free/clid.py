"""Learnability of a representation: CLID's Cluster Learnability and the CLID pool score.

Lu et al., "Expressiveness and Learnability: A Unifying View for Evaluating Self-Supervised
Learning" (specs/clid_lidar.md A.3, A.4). Cluster Learnability (CL) pseudo-labels the
representation with spherical k-means and measures how well a 1-NN learner predicts those labels
online (prequential accuracy); CLID combines CL with the intrinsic dimension over a pool of models.
"""

from __future__ import annotations

from typing import Any, Literal

import numpy as np

from zoorank.metrics._checks import (
    check_array,
    l2_normalize,
    row_norms,
    to_numpy,
    warn_degenerate,
)
from zoorank.metrics.neighbors import kmeans
from zoorank.metrics.registry import fixed, register
from zoorank.metrics.score_options import option

__all__ = ["cluster_learnability", "prequential_knn_accuracy", "clid"]

# Row blocks of the chunk similarity matrix: at most 1024 rows (small enough that the masked upper
# triangle is mostly skipped) and at most 2**24 float32 entries (64 MiB).
_BLOCK_ROWS = 1024
_BLOCK_ELEMENTS = 1 << 24

option("cl_chunk_size", 10_000, "cluster learnability: prequential stream chunk size")


def _normalized_rows(Z: Any, name: str = "Z") -> np.ndarray:
    raw = to_numpy(Z)
    X = check_array(raw, name, min_rows=2)
    n_zero = int((row_norms(X) == 0).sum())
    if n_zero:
        warn_degenerate(f"{name} has {n_zero} all-zero rows; their cosine similarities are 0")
    # Normalise in float64, then search in float32 (the accuracy of the neighbour search). A copy
    # made by check_array is ours to normalise in place: one n × d float64 array less at the peak.
    X = l2_normalize(X, out=None if np.may_share_memory(X, raw) else X)
    return np.ascontiguousarray(X, dtype=np.float32)


def _chunk_predictions(Xc: np.ndarray, yc: np.ndarray, k: int) -> np.ndarray:
    """Prequential k-NN predictions for one stream; entry 0 (no history) is -1."""
    C = Xc.shape[0]
    pred = np.full(C, -1, dtype=np.int64)
    rows = max(1, min(_BLOCK_ROWS, _BLOCK_ELEMENTS // C))
    for r0 in range(1, C, rows):
        r1 = min(r0 + rows, C)
        # Items r0..r1-1 see only items 0..i-1: columns up to r1-1, the rest masked.
        S = Xc[r0:r1] @ Xc[:r1].T
        S[:, r0:r1][np.triu_indices(r1 - r0)] = -np.inf
        if k == 1:
            # argmax returns the lowest index among exact ties (the spec's tie-break).
            pred[r0:r1] = yc[np.argmax(S, axis=1)]
            continue
        kk = min(k, r1 - 1)
        top = np.argpartition(-S, kk - 1, axis=1)[:, :kk]
        top_sim = np.take_along_axis(S, top, axis=1)
        # Nearest first; equal similarities by lowest index.
        order = np.lexsort((top, -top_sim), axis=1)
        top = np.take_along_axis(top, order, axis=1)
        top_sim = np.take_along_axis(top_sim, order, axis=1)
        visible = np.isfinite(top_sim)  # items with i < k see only i earlier items
        labels = np.where(visible, yc[top], -1)
        same = (labels[:, :, None] == labels[:, None, :]) & visible[:, None, :]
        votes = np.where(visible, same.sum(axis=2), -1)
        # The first (nearest) neighbour whose label has the top vote count: majority vote with
        # ties broken by the nearest neighbour among the tied labels.
        winner = np.argmax(votes == votes.max(axis=1, keepdims=True), axis=1)
        pred[r0:r1] = labels[np.arange(r1 - r0), winner]
    return pred


def prequential_knn_accuracy(
    Z: Any,
    labels: Any,
    k: int = 1,
    chunk_size: int = 10000,
    seed: int = 0,
    return_details: bool = False,
) -> float | dict[str, Any]:
    """Prequential (online) k-NN accuracy of ``labels`` on a fixed random stream of ``Z``, chunked.

    The stream order is one permutation from ``np.random.default_rng(seed)``; it is cut into
    consecutive chunks of ``chunk_size``, each an independent stream. In a chunk, item i is
    predicted from its k most cosine-similar *strictly earlier* items of the same chunk (all of them
    when fewer than k): k = 1 takes the nearest one's label; k > 1 a majority vote, ties broken by
    the nearest neighbour among the tied labels; equal similarities by the earlier item. The first
    item of every chunk has no history and is not scored. The result is the mean of the chunk
    accuracies (chunks with a single item have none and are skipped).

    Parameters
    ----------
    Z : (n, d) array or tensor, n ≥ 2; rows are L2-normalised (cosine similarity).
    labels : (n,) labels of any type.
    k : neighbours, ≥ 1. Default 1 (CLID's recommendation).
    chunk_size : stream length, ≥ 2. Default 10,000 (CLID spec, our default).
    seed : seed of the permutation; keep it identical for all models being compared.
    return_details : return {"accuracy", "chunk_accuracies", "n_scored"} instead of the float.

    Returns
    -------
    float in [0, 1]; higher means the labels are easier to learn online from the representation.

    Notes
    -----
    Cost: O(n · chunk_size · d) flops in float32, in row blocks of at most 1024 × chunk_size
    (and 2²⁴) similarities.
    """
    if int(k) != k or k < 1:
        raise ValueError(f"k must be a positive integer, got {k}")
    if int(chunk_size) != chunk_size or chunk_size < 2:
        raise ValueError(f"chunk_size must be an integer >= 2, got {chunk_size}")
    X = _normalized_rows(Z)
    y = _check_label_vector(labels, X.shape[0])
    return _prequential(X, y, int(k), int(chunk_size), seed, return_details)


def _check_label_vector(labels: Any, n: int) -> np.ndarray:
    arr = to_numpy(labels)
    if arr.ndim != 1 or arr.shape[0] != n:
        raise ValueError(f"labels must be 1-D with {n} entries, got shape {arr.shape}")
    _, codes = np.unique(arr, return_inverse=True)
    return codes.reshape(-1).astype(np.int64)


def _prequential(
    X: np.ndarray, y: np.ndarray, k: int, chunk_size: int, seed: int, return_details: bool
) -> float | dict[str, Any]:
    perm = np.random.default_rng(seed).permutation(X.shape[0])
    accs: list[float] = []
    n_scored = 0
    for start in range(0, len(perm), chunk_size):
        chunk = perm[start : start + chunk_size]
        if len(chunk) < 2:
            continue
        yc = y[chunk]
        pred = _chunk_predictions(X[chunk], yc, k)
        accs.append(float(np.mean(pred[1:] == yc[1:])))
        n_scored += len(chunk) - 1
    acc = float(np.mean(accs))
    if return_details:
        return {"accuracy": acc, "chunk_accuracies": accs, "n_scored": n_scored}
    return acc


def cluster_learnability(
    Z: Any,
    n_clusters: int | None = None,
    k: int = 1,
    chunk_size: int = 10000,
    seed: int = 0,
    return_details: bool = False,
) -> float | dict[str, Any]:
    """Cluster Learnability (CL) of CLID (Lu et al., specs/clid_lidar.md A.3).

    Rows are L2-normalised; spherical k-means (k-means++ init, 100 Lloyd iterations, one run, fitted
    on all n rows, ``zoorank.metrics.neighbors.kmeans``) gives pseudo-labels; CL is the prequential
    cosine k-NN accuracy of those labels on one fixed random permutation (``seed``), chunked into
    independent streams of ``chunk_size`` whose accuracies are averaged (see
    :func:`prequential_knn_accuracy`; the first item of each chunk is not scored).

    Parameters
    ----------
    Z : (n, d) array or tensor, n ≥ 2.
    n_clusters : K; default round(√n) (the paper's √N, 224 for ImageNet val).
    k : k-NN neighbours; default 1 (the paper recommends 1).
    chunk_size : default 10,000 (our default; CL grows with it, keep it fixed across models).
    seed : seeds both k-means and the permutation; keep it fixed across models.
    return_details : return {"cl", "n_clusters", "n_clusters_used", "chunk_accuracies", "n_scored"}.

    Returns
    -------
    float in [0, 1]. Higher means more learnable. Extremes do not separate models: K = 1 gives 1.0,
    K = n gives ≈ 0. A collapsed representation (all rows in one cluster) also gives 1.0 and a
    ``DegenerateInputWarning``.

    Notes
    -----
    Cost: k-means O(niter · n · K · d) plus the stream O(n · chunk_size · d), float32; about two
    seconds for n = 10k, d = 2048 on 2 cores.
    """
    X = _normalized_rows(Z)
    n = X.shape[0]
    if n_clusters is None:
        n_clusters = int(round(np.sqrt(n)))
    if int(n_clusters) != n_clusters or not 1 <= n_clusters <= n:
        raise ValueError(f"n_clusters must be an integer in [1, {n}], got {n_clusters}")
    if int(k) != k or k < 1:
        raise ValueError(f"k must be a positive integer, got {k}")
    if int(chunk_size) != chunk_size or chunk_size < 2:
        raise ValueError(f"chunk_size must be an integer >= 2, got {chunk_size}")
    labels, _ = kmeans(X, int(n_clusters), spherical=True, niter=100, seed=seed)
    n_used = int(np.unique(labels).size)
    if n_clusters > 1 and n_used == 1:
        warn_degenerate(
            f"cluster_learnability: all {n} rows fell into one of {n_clusters} clusters "
            "(collapsed representation); CL is 1.0"
        )
    out = _prequential(X, labels.astype(np.int64), int(k), int(chunk_size), seed, True)
    assert isinstance(out, dict)
    if return_details:
        return {
            "cl": out["accuracy"],
            "n_clusters": int(n_clusters),
            "n_clusters_used": n_used,
            "chunk_accuracies": out["chunk_accuracies"],
            "n_scored": out["n_scored"],
        }
    return out["accuracy"]


def _collapsed(details: dict[str, Any]) -> str | None:
    """One cluster makes CL trivially 1.0 (the paper's K = 1 extreme): for ranking, a collapsed
    representation must not get the best learnability, so it is undefined (SCORE: NaN; Tune: floor)."""
    if details["n_clusters"] > 1 and details["n_clusters_used"] == 1:
        return (f"collapsed representation: all rows fell into one of {details['n_clusters']} "
                "clusters, so cluster learnability is undefined (it would be a trivial 1.0)")
    return None


@register(
    "cluster_learnability", +1, "clean", options=("cl_chunk_size",), tune_floor=0.0,
    settings=lambda o, seed: {"k": 1, "chunk_size": o["cl_chunk_size"], "seed": seed},
    notes={"n_clusters": "round(sqrt(n))", "normalize": True, "kmeans": "spherical"},
    guard=_collapsed, default_rank=12,
)
def _cl_metric(Z: Any, **settings: Any) -> tuple[float, dict[str, Any]]:
    """cluster learnability: 1-NN accuracy on k-means labels, K = round(√n)."""
    n_clusters = int(round(np.sqrt(Z.shape[0])))
    d = cluster_learnability(Z, n_clusters=n_clusters, return_details=True, **settings)
    return d["cl"], {"n_clusters": d["n_clusters"], "n_clusters_used": d["n_clusters_used"]}


@register(
    "clid_family", +1, "pool", config_name="clid", primary=False, scope="family",
    requires=("cluster_learnability", "twonn_id"), settings=fixed(mode="zscore"),
    description="CLID within each family", width_sensitive=True,
)
@register(
    "clid", +1, "pool", tune_floor=0.0, requires=("cluster_learnability", "twonn_id"),
    settings=fixed(mode="zscore"), solo={"mode": "raw_percent"},
    description="CLID: z(CL) + z(ID) over the dataset's pool of models", default_rank=8, width_sensitive=True,
)
def clid(
    cl: Any,
    id_: Any,
    mode: Literal["zscore", "raw_percent", "raw_fraction"] = "zscore",
) -> np.ndarray:
    """CLID score of each model in a pool: CL + ID (Lu et al., specs/clid_lidar.md A.4).

    The paper writes CLID = CL + ID without saying how the two are scaled. Modes:

    * ``"zscore"`` (our default): z(CL) + z(ID), each z-scored across the pool with the population
      standard deviation (ddof = 0). A metric constant over the pool contributes 0
      (``DegenerateInputWarning``). Needs ≥ 2 models.
    * ``"raw_percent"``: 100·CL + ID (CL in percent, ID in its own units).
    * ``"raw_fraction"``: CL + ID.

    Parameters
    ----------
    cl : (m,) cluster learnability per model, fractions in [0, 1].
    id_ : (m,) intrinsic dimension per model (e.g. :func:`zoorank.metrics.label_free.geometry.twonn_id`).
    mode : see above.

    Returns
    -------
    (m,) float64 array; higher means a better predicted model (for SSL models; the sign of ID is
    regime-dependent for supervised ones, §4 of the paper).
    """
    c = check_array(cl, "cl", ndim=1)
    d = check_array(id_, "id_", ndim=1)
    if c.shape != d.shape:
        raise ValueError(f"cl and id_ must have the same length, got {c.shape[0]} and {d.shape[0]}")
    if mode == "raw_percent":
        return 100.0 * c + d
    if mode == "raw_fraction":
        return c + d
    if mode != "zscore":
        raise ValueError(f"mode must be 'zscore', 'raw_percent' or 'raw_fraction', got {mode!r}")
    if c.shape[0] < 2:
        raise ValueError(f"clid mode='zscore' needs at least 2 models, got {c.shape[0]}")
    return _zscore(c, "cl") + _zscore(d, "id_")


def _zscore(x: np.ndarray, name: str) -> np.ndarray:
    centred = x - x.mean()
    std = float(np.sqrt(np.mean(centred**2)))
    if std <= 1e-12 * max(1.0, float(np.abs(x).max())):
        warn_degenerate(f"clid: {name} is constant over the pool; it contributes 0")
        return np.zeros_like(x)
    return centred / std
