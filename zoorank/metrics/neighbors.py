"""The one exact nearest-neighbour and k-means backend every metric shares (faiss).

Conventions
-----------
* Exact search only (``IndexFlatL2`` / ``IndexFlatIP``); a GPU index when faiss-gpu and a GPU are
  present, otherwise CPU. Queries are processed in blocks, so memory stays O(block × n_database),
  never O(N²) for the whole set.
* Indices are int64. Distances are returned ascending as float64 and *recomputed exactly* in
  float64 for the returned pairs: faiss' ``‖x‖² + ‖y‖² − 2xy`` trick loses precision for close
  points, which matters for ratio estimators such as TwoNN.
* ``metric="euclidean"`` gives ‖q − x‖ (not squared); ``metric="cosine"`` gives 1 − cos(q, x)
  on L2-normalised rows.
* Self-search (``database=None``) excludes each point from its own neighbours. With exact
  duplicates the self-match may not be ranked first; the point's own index is removed wherever it
  appears, so a duplicate of the point is kept as a genuine neighbour at distance 0.
"""

from __future__ import annotations

import functools
from typing import Literal

import numpy as np

Metric = Literal["euclidean", "cosine"]

DEFAULT_BLOCK_SIZE = 8192


@functools.lru_cache(maxsize=1)
def _faiss():
    import faiss

    return faiss


@functools.lru_cache(maxsize=1)
def gpu_available() -> bool:
    """True when faiss was built with GPU support and sees at least one GPU."""
    faiss = _faiss()
    return hasattr(faiss, "StandardGpuResources") and faiss.get_num_gpus() > 0


def _build_index(database: np.ndarray, metric: Metric, use_gpu: bool):
    faiss = _faiss()
    d = database.shape[1]
    index = faiss.IndexFlatIP(d) if metric == "cosine" else faiss.IndexFlatL2(d)
    if use_gpu:
        index = faiss.index_cpu_to_gpu(_gpu_resources(), 0, index)
    index.add(database)
    return index


@functools.lru_cache(maxsize=1)
def _gpu_resources():
    return _faiss().StandardGpuResources()


def _prepare(x: np.ndarray, metric: Metric) -> np.ndarray:
    x = np.ascontiguousarray(x, dtype=np.float32)
    if metric == "cosine":
        norms = np.linalg.norm(x, axis=1, keepdims=True)
        x = x / np.maximum(norms, 1e-12)
    return np.ascontiguousarray(x, dtype=np.float32)


def _rows64(x: np.ndarray, metric: Metric) -> np.ndarray:
    x = np.asarray(x, dtype=np.float64)
    if metric == "cosine":
        x = x / np.maximum(np.linalg.norm(x, axis=1, keepdims=True), 1e-12)
    return x


def _exact_distances(q: np.ndarray, db: np.ndarray, idx: np.ndarray, metric: Metric) -> np.ndarray:
    """Distances of the found pairs in float64 from the caller's rows (not the float32 copies)."""
    q64 = _rows64(q, metric)
    out = np.empty(idx.shape, dtype=np.float64)
    for j in range(idx.shape[1]):
        nb = _rows64(db[idx[:, j]], metric)  # always a fresh array (fancy indexing): ours to overwrite
        if metric == "cosine":
            out[:, j] = 1.0 - np.einsum("ij,ij->i", q64, nb)
        else:
            # One difference, in place: half the passes over block × d float64 of the former
            # einsum(q64 - nb, q64 - nb), with bit-identical results.
            np.subtract(q64, nb, out=nb)
            out[:, j] = np.sqrt(np.einsum("ij,ij->i", nb, nb))
    return np.maximum(out, 0.0)


def _drop_self(idx: np.ndarray, dist: np.ndarray, first_row: int, k: int):
    rows = np.arange(first_row, first_row + idx.shape[0])[:, None]
    is_self = idx == rows
    # Rows without their own index (possible with many duplicates) drop the last neighbour instead.
    no_self = ~is_self.any(axis=1)
    is_self[no_self, -1] = True
    # Keep only the first occurrence to drop exactly one column per row.
    first = np.argmax(is_self, axis=1)
    keep = np.ones_like(is_self)
    keep[np.arange(idx.shape[0]), first] = False
    return idx[keep].reshape(-1, k), dist[keep].reshape(-1, k)


def knn(
    queries: np.ndarray,
    database: np.ndarray | None = None,
    k: int = 1,
    *,
    metric: Metric = "euclidean",
    block_size: int = DEFAULT_BLOCK_SIZE,
    use_gpu: bool | None = None,
    exact_distances: bool = True,
) -> tuple[np.ndarray, np.ndarray]:
    """Exact k nearest neighbours of each query row.

    Parameters
    ----------
    queries : (n, d) array.
    database : (m, d) array, or None to search ``queries`` against themselves with self-exclusion.
    k : neighbours per query (``k <= m``, or ``k <= n - 1`` for self-search).
    metric : ``"euclidean"`` (‖q − x‖) or ``"cosine"`` (1 − cos).
    block_size : queries per faiss call; bounds memory for large n.
    use_gpu : None = automatic (GPU when faiss-gpu sees one).
    exact_distances : False skips the float64 recomputation (the dominant cost for large k) and
        returns faiss' float32 distances; the neighbour sets are the same. For callers that only
        need indices (e.g. neighbourhood consistency).

    Returns
    -------
    distances : (n, k) float64, ascending per row.
    indices : (n, k) int64 into ``database`` (or ``queries`` for self-search).
    """
    if metric not in ("euclidean", "cosine"):
        raise ValueError(f"metric must be 'euclidean' or 'cosine', got {metric!r}")
    self_search = database is None
    queries = np.asarray(queries)
    database = None if self_search else np.asarray(database)
    q = _prepare(queries, metric)
    db = q if self_search else _prepare(database, metric)
    if q.ndim != 2 or db.ndim != 2 or q.shape[1] != db.shape[1]:
        raise ValueError(f"queries {q.shape} and database {db.shape} must be 2-D with equal d")
    available = db.shape[0] - (1 if self_search else 0)
    if not 1 <= k <= available:
        raise ValueError(f"k={k} must be between 1 and {available} (the searchable points)")
    if use_gpu is None:
        use_gpu = gpu_available()
    index = _build_index(db, metric, use_gpu)
    kk = k + 1 if self_search else k
    dists = np.empty((q.shape[0], k), dtype=np.float64)
    idxs = np.empty((q.shape[0], k), dtype=np.int64)
    for start in range(0, q.shape[0], block_size):
        qb = q[start : start + block_size]
        fb, ib = index.search(qb, kk)
        ib = ib.astype(np.int64)
        if exact_distances:
            source_db = queries if self_search else database
            db_exact = _exact_distances(queries[start : start + block_size], source_db, ib, metric)
        elif metric == "cosine":
            db_exact = np.maximum(1.0 - fb.astype(np.float64), 0.0)
        else:
            db_exact = np.sqrt(np.maximum(fb.astype(np.float64), 0.0))
        if self_search:
            ib, db_exact = _drop_self(ib, db_exact, start, k)
        order = np.argsort(db_exact, axis=1, kind="stable")
        dists[start : start + len(qb)] = np.take_along_axis(db_exact, order, axis=1)
        idxs[start : start + len(qb)] = np.take_along_axis(ib, order, axis=1)
    return dists, idxs


def kmeans_plusplus(X: np.ndarray, n_clusters: int, seed: int = 0) -> np.ndarray:
    """Classic k-means++ seeding (Arthur & Vassilvitskii 2007): each new centre is drawn with
    probability proportional to the squared distance to the nearest centre chosen so far.

    Returns (n_clusters, d) float32 centres (rows of ``X``). O(N·K·d) time, O(N) extra memory.
    """
    x = np.ascontiguousarray(X, dtype=np.float32)
    n = x.shape[0]
    rng = np.random.default_rng(seed)
    sq_norms = np.einsum("ij,ij->i", x, x, dtype=np.float64)
    chosen = [int(rng.integers(n))]
    closest = np.maximum(sq_norms + sq_norms[chosen[0]] - 2.0 * (x @ x[chosen[0]]), 0.0)
    for _ in range(1, n_clusters):
        total = closest.sum()
        if total <= 0:  # every point coincides with a centre: pick the rest uniformly
            rest = np.setdiff1d(np.arange(n), chosen)
            chosen += rng.choice(rest, n_clusters - len(chosen), replace=False).tolist()
            break
        nxt = int(np.searchsorted(np.cumsum(closest), rng.random() * total, side="right"))
        nxt = min(nxt, n - 1)
        chosen.append(nxt)
        dist = np.maximum(sq_norms + sq_norms[nxt] - 2.0 * (x @ x[nxt]), 0.0)
        np.minimum(closest, dist, out=closest)
    return np.ascontiguousarray(x[chosen], dtype=np.float32)


def kmeans(
    X: np.ndarray,
    n_clusters: int,
    *,
    spherical: bool = False,
    niter: int = 100,
    seed: int = 0,
    init: Literal["k-means++", "random"] = "k-means++",
    use_gpu: bool | None = None,
) -> tuple[np.ndarray, np.ndarray]:
    """Lloyd k-means (faiss) fitted on *all* rows (no subsampling); returns (labels int64, centroids).

    ``spherical=True`` L2-normalises rows and centroids and assigns by cosine similarity.
    ``init="k-means++"`` (the CLID spec's default) seeds the centroids with classic k-means++
    (:func:`kmeans_plusplus`, O(N·K·d)); ``"random"`` is faiss' own
    start from randomly chosen points. Lloyd stops early once assignments no longer change.
    Deterministic for a given ``seed`` on one machine.
    """
    faiss = _faiss()
    n, d = X.shape
    if not 1 <= n_clusters <= n:
        raise ValueError(f"n_clusters={n_clusters} must be between 1 and the number of rows {n}")
    metric: Metric = "cosine" if spherical else "euclidean"
    x = _prepare(X, metric)
    if use_gpu is None:
        use_gpu = gpu_available()
    km = faiss.Kmeans(
        d,
        n_clusters,
        niter=niter,
        seed=seed,
        spherical=spherical,
        gpu=bool(use_gpu),
        verbose=False,
        max_points_per_centroid=max(n, 1),  # fit on every point, as the CLID spec asks
        min_points_per_centroid=1,
    )
    if init == "k-means++":
        km.train(x, init_centroids=kmeans_plusplus(x, n_clusters, seed=seed))
    elif init == "random":
        km.train(x)
    else:
        raise ValueError(f"init must be 'k-means++' or 'random', got {init!r}")
    centroids = km.centroids.copy()
    index = _build_index(_prepare(centroids, metric), metric, use_gpu)
    labels = np.empty(n, dtype=np.int64)
    for start in range(0, n, DEFAULT_BLOCK_SIZE):
        _, ib = index.search(x[start : start + DEFAULT_BLOCK_SIZE], 1)
        labels[start : start + DEFAULT_BLOCK_SIZE] = ib[:, 0]
    return labels, centroids
