"""Per-sample representation reliability of a seed ensemble: Neighborhood Consistency and baselines.

Park, Wang, Ardeshir & Azizan, *Quantifying Representation Reliability in Self-Supervised Learning
Models* (UAI 2024), as reconstructed in ``specs/url_sdl_nc.md`` PART C from the official code
(``azizanlab/repreli``).

Every function here is label-free and returns one value per test point. A per-model reliability is
the mean over test points. Sign conventions differ between the functions and are part of each
docstring:

* ``neighborhood_consistency`` and ``embedding_norm`` are *scores*: higher = more reliable.
* ``mean_knn_distance`` and ``feature_variance`` are *uncertainties*: higher = less reliable; the
  paper correlates their negatives (``-AvgDist``, ``-FV``) with reliability.

An ensemble is a list (or tuple) with one array per member, ``M >= 2`` members, the same test points
and the same reference points in the same order for every member. Members may have different
embedding widths (each is only compared with itself), except for ``feature_variance``, which
compares raw coordinates across members and so needs a common width.
"""

from __future__ import annotations

from collections.abc import Sequence
from typing import Any

import numpy as np

from zoorank.metrics._checks import check_array, l2_normalize, warn_degenerate
from zoorank.metrics.neighbors import Metric, knn
from zoorank.metrics.registry import fixed, register

__all__ = [
    "neighborhood_consistency",
    "mean_knn_distance",
    "embedding_norm",
    "feature_variance",
]

_METRICS = ("euclidean", "cosine")


def _check_metric(metric: str) -> None:
    if metric not in _METRICS:
        raise ValueError(f"metric must be 'euclidean' or 'cosine', got {metric!r}")


def _check_k(k: Any, n_ref: int) -> int:
    if isinstance(k, bool) or not isinstance(k, (int, np.integer)):
        raise ValueError(f"k must be an integer, got {k!r}")
    if not 1 <= k <= n_ref:
        raise ValueError(f"k={k} must be between 1 and the number of reference points {n_ref}")
    return int(k)


def _is_ensemble(x: Any) -> bool:
    return isinstance(x, (list, tuple))


def _members(
    x: Any, name: str, *, min_members: int, dtype: type = np.float64
) -> list[np.ndarray]:
    """Validate an ensemble: a list/tuple of 2-D arrays (or one 3-D array, members on axis 0)."""
    if not _is_ensemble(x):
        if getattr(x, "ndim", None) == 3:
            x = [x[m] for m in range(x.shape[0])]
        else:
            raise ValueError(
                f"{name} must be a list with one (n, d) array per ensemble member, got {type(x)}"
            )
    if len(x) < min_members:
        raise ValueError(f"{name} needs at least {min_members} ensemble members, got {len(x)}")
    arrays = [check_array(z, f"{name}[{m}]", dtype=dtype) for m, z in enumerate(x)]
    _same_along(arrays, name, 0, "rows", "every member must embed the same points in the same order")
    return arrays


def _same_along(arrays: list[np.ndarray], name: str, axis: int, what: str, why: str) -> None:
    """ValueError naming the first member whose size along ``axis`` differs from member 0's."""
    size = arrays[0].shape[axis]
    for m, z in enumerate(arrays):
        if z.shape[axis] != size:
            raise ValueError(f"{name}[{m}] has {z.shape[axis]} {what} but {name}[0] has {size}: {why}")


def _check_pairs(test: list[np.ndarray], ref: list[np.ndarray]) -> None:
    if len(test) != len(ref):
        raise ValueError(
            f"test has {len(test)} ensemble members but ref has {len(ref)}: one of each per member"
        )
    for m, (t, r) in enumerate(zip(test, ref)):
        if t.shape[1] != r.shape[1]:
            raise ValueError(
                f"member {m}: test width {t.shape[1]} differs from ref width {r.shape[1]}"
            )


def _warn_if_ties_decide(ref: np.ndarray, k: int, metric: str, member: int) -> None:
    # With fewer than k + 1 distinct reference embeddings (e.g. a collapsed model), the k-NN cut-off
    # is decided by index order, identically in every member, so NC would look perfectly reliable.
    r = l2_normalize(ref) if metric == "cosine" else ref
    distinct = np.unique(r, axis=0).shape[0]
    if distinct <= k:
        warn_degenerate(
            f"ref[{member}] has only {distinct} distinct embeddings for k={k}: neighbour sets are "
            "decided by ties (index order), so the consistency is not meaningful"
        )


def _pairwise_mean_jaccard(neighbours: list[np.ndarray], k: int) -> np.ndarray:
    """Mean Jaccard similarity over unordered member pairs of equal-size (n, k) index sets."""
    n = neighbours[0].shape[0]
    total = np.zeros(n, dtype=np.float64)
    pairs = 0
    for a in range(len(neighbours)):
        for b in range(a + 1, len(neighbours)):
            # Each row holds k distinct indices, so a value appears twice in the merged row exactly
            # when it is in both sets: |A ∩ B| = number of equal adjacent entries after sorting.
            merged = np.sort(np.concatenate([neighbours[a], neighbours[b]], axis=1), axis=1)
            inter = np.count_nonzero(merged[:, 1:] == merged[:, :-1], axis=1)
            total += inter / (2 * k - inter)
            pairs += 1
    return total / pairs


def neighborhood_consistency(
    test: Sequence[Any],
    ref: Sequence[Any],
    k: int = 100,
    metric: Metric = "cosine",
) -> np.ndarray:
    """Neighborhood Consistency NC_k of each test point across a seed ensemble (higher = reliable).

    For every member ``m``, ``N_k^m(x)`` is the index set of the ``k`` nearest reference points of
    ``test[m][x]`` among ``ref[m]`` (exact search; the reference set is a separate database, so no
    self-exclusion). Then

        NC_k(x) = mean over member pairs i < j of |N_k^i(x) ∩ N_k^j(x)| / |N_k^i(x) ∪ N_k^j(x)|,

    the mean Jaccard similarity over the ``M(M-1)/2`` unordered pairs (the official code's
    normalisation; Park et al. 2024, Eq. 7). Because the neighbours are *indices* into a reference
    set shared by all members, no alignment of the embedding spaces is needed: NC is invariant to
    any per-member map that preserves neighbour order (rotations for cosine; rotations, translations
    and scalings for Euclidean).

    Parameters
    ----------
    test : list of M >= 2 arrays (n_test, d_m)
        Test embeddings of each member; the same test points in the same order. ``d_m`` may differ
        across members.
    ref : list of M arrays (n_ref, d_m)
        Embeddings of the *same* reference points (paper: 5,000 unlabeled pre-training images) under
        each member, in the same order.
    k : int, default 100
        Neighbours per set (paper default 100 ≈ 2% of |D_ref|); ``1 <= k <= n_ref``.
    metric : {"cosine", "euclidean"}, default "cosine"
        ``"cosine"`` L2-normalises rows first (the paper's main tables); ``"euclidean"`` uses raw
        embeddings (its appendix tables).

    Returns
    -------
    (n_test,) float64 array in [0, 1]: 1 = identical neighbour sets in every member, 0 = pairwise
    disjoint sets. Resolution is coarse: each pair contributes one of k + 1 overlap values.

    Notes
    -----
    Ties at the k-th neighbour are broken by the search backend's order. With fewer than ``k + 1``
    distinct reference embeddings in a member (a collapsed model) the sets are decided by ties alone
    and a ``DegenerateInputWarning`` is raised. Zero-norm rows under ``"cosine"`` have no direction
    and are treated as the zero vector (similarity 0 to everything).

    Cost: M exact k-NN searches, O(M · n_test · n_ref · d) (faiss, blocked, memory
    O(block · n_ref)), plus O(M² · n_test · k log k) for the Jaccard step. n_test = 10,000,
    n_ref = 5,000, d = 512, k = 100, M = 5 takes seconds on two CPU cores.
    """
    _check_metric(metric)
    test_m = _members(test, "test", min_members=2, dtype=np.float32)
    ref_m = _members(ref, "ref", min_members=2, dtype=np.float32)
    _check_pairs(test_m, ref_m)
    k = _check_k(k, ref_m[0].shape[0])
    neighbours = []
    for m, (t, r) in enumerate(zip(test_m, ref_m)):
        _warn_if_ties_decide(r, k, metric, m)
        _, idx = knn(t, r, k, metric=metric, exact_distances=False)
        neighbours.append(idx)
    return _pairwise_mean_jaccard(neighbours, k)


def mean_knn_distance(
    test: Any,
    ref: Any,
    k: int = 1,
    metric: Metric = "cosine",
) -> np.ndarray:
    """AvgDist_k: mean distance of each test point to its k nearest reference points (uncertainty).

    ``AvgDist_k(x) = (1/k) Σ_{n ∈ N_k(x)} d(f(x), f(x_n))`` (novelty score of Tack et al. 2020 for
    k = 1; Park et al. 2024 App. E, Eq. 40). With an ensemble (lists of arrays) the value is the
    point-wise mean over members, as in the paper's tables. **Higher = less reliable**: the paper's
    score is ``-AvgDist_k``.

    Parameters
    ----------
    test : (n_test, d) array, or a list of M such arrays (one per member; widths may differ).
    ref : (n_ref, d) array, or a list of M arrays of the same reference points.
    k : int, default 1
        The paper's baseline uses k = 1 (k = 100 is a worse ablation).
    metric : {"cosine", "euclidean"}, default "cosine"
        ``"cosine"``: 1 - cos on L2-normalised rows (the paper's main tables); ``"euclidean"``:
        ‖·‖₂ on raw embeddings (on raw embeddings reliable points tend to have large norms and lie
        in sparse regions, which flips the sign of its correlation, spec C.9.3).

    Returns
    -------
    (n_test,) float64 array, >= 0.

    Cost: one exact k-NN search per member, O(n_test · n_ref · d).
    """
    _check_metric(metric)
    if _is_ensemble(test) != _is_ensemble(ref):
        raise ValueError("test and ref must both be arrays or both be lists of member arrays")
    if _is_ensemble(test):
        test_m = _members(test, "test", min_members=1, dtype=np.float32)
        ref_m = _members(ref, "ref", min_members=1, dtype=np.float32)
        _check_pairs(test_m, ref_m)
    else:
        test_m = [check_array(test, "test", dtype=np.float32)]
        ref_m = [check_array(ref, "ref", dtype=np.float32)]
        _check_pairs(test_m, ref_m)
    k = _check_k(k, ref_m[0].shape[0])
    total = np.zeros(test_m[0].shape[0], dtype=np.float64)
    for t, r in zip(test_m, ref_m):
        dist, _ = knn(t, r, k, metric=metric)
        total += dist.mean(axis=1)
    return total / len(test_m)


def embedding_norm(Z: Any) -> np.ndarray:
    """ℓ2 norm of each *raw* embedding (a score: higher = more reliable; Tack et al. 2020).

    With an ensemble (a list of M arrays of the same points; widths may differ) the value is the
    point-wise mean ``(1/M) Σ_m ‖f_m(x)‖₂``, as in Park et al. 2024. Compute it on raw, unnormalised
    embeddings only: after L2 normalisation it is the constant 1 (spec C.9.2). Needs no reference
    set. URL's InfoNCE baseline uses the inverse norm, ``1 / embedding_norm``, as an uncertainty.

    Returns
    -------
    (n,) float64 array, >= 0. Cost O(M · n · d).
    """
    members = (
        _members(Z, "Z", min_members=1) if _is_ensemble(Z) else [check_array(Z, "Z")]
    )
    total = np.zeros(members[0].shape[0], dtype=np.float64)
    for z in members:
        total += np.linalg.norm(z, axis=1)
    return total / len(members)


@register(
    "embedding_norm_mean", +1, "clean", config_name="embedding_norm", primary=False,
    settings=fixed(), notes={"raw": True},
)
def _norm_metric(Z: Any) -> tuple[float, dict[str, Any]]:
    """mean raw embedding norm (std, min, max in the details)."""
    norms = embedding_norm(Z)
    return float(norms.mean()), {"std": float(norms.std()), "min": float(norms.min()),
                                 "max": float(norms.max())}


def feature_variance(test: Sequence[Any], normalize: bool = True) -> np.ndarray:
    """Feature variance FV across ensemble members (an uncertainty: higher = less reliable).

    ``FV(x) = Σ_d Var_m[f_m(x)_d]``: the population variance (ddof = 0) over the M members of each
    coordinate, summed over coordinates (the trace of the across-member covariance). The paper's
    score is ``-FV``. It compares raw coordinates of independently trained models *without any
    alignment*, which Park et al. (2024, Theorem 1) show is not a valid reliability measure: FV can
    be maximal while every downstream prediction agrees (e.g. rotated copies). It is the
    supervised-uncertainty baseline NC is compared against.

    Parameters
    ----------
    test : list of M >= 2 arrays (n, d), all of the same width d.
    normalize : bool, default True
        L2-normalise each row first, as in the paper's main (cosine) tables; then FV is in [0, 1].

    Returns
    -------
    (n,) float64 array, >= 0. Cost O(M · n · d), memory O(n · d).
    """
    members = _members(test, "test", min_members=2)
    _same_along(members, "test", 1, "columns", "feature variance compares coordinates across "
                "members and needs a common width")
    if normalize:
        members = [l2_normalize(z) for z in members]
    mean = sum(members) / len(members)
    total = np.zeros(members[0].shape[0], dtype=np.float64)
    for z in members:
        total += np.einsum("ij,ij->i", z - mean, z - mean)
    return total / len(members)
