"""The shared faiss backend against brute force (scipy cdist)."""

from __future__ import annotations

import numpy as np
import pytest
from scipy.spatial.distance import cdist

from zoorank.metrics.neighbors import kmeans, kmeans_plusplus, knn


@pytest.mark.parametrize("metric", ["euclidean", "cosine"])
def test_knn_matches_brute_force(metric):
    rng = np.random.default_rng(0)
    q, db = rng.normal(size=(50, 7)), rng.normal(size=(80, 7))
    dist, idx = knn(q, db, k=5, metric=metric, block_size=16)
    full = cdist(q, db, metric=metric)
    expected = np.argsort(full, axis=1)[:, :5]
    np.testing.assert_array_equal(idx, expected)
    np.testing.assert_allclose(dist, np.take_along_axis(full, expected, axis=1), atol=1e-6)
    assert idx.dtype == np.int64 and dist.dtype == np.float64


def test_self_search_excludes_each_point_but_keeps_its_duplicates():
    rng = np.random.default_rng(1)
    Z = rng.normal(size=(30, 4))
    Z[7] = Z[3]  # an exact duplicate pair
    dist, idx = knn(Z, k=3, block_size=8)
    assert not (idx == np.arange(30)[:, None]).any()
    assert idx[3, 0] == 7 and idx[7, 0] == 3 and dist[3, 0] == 0.0
    full = cdist(Z, Z)
    np.fill_diagonal(full, np.inf)
    np.testing.assert_allclose(dist, np.sort(full, axis=1)[:, :3], atol=1e-6)


def test_distances_are_exact_for_close_points():
    # ‖x‖² + ‖y‖² − 2xy in float32 would lose these 1e-4 gaps next to norms of 1e3.
    base = np.full((1, 3), 1000.0)
    Z = np.vstack([base, base + [1e-3, 0, 0], base + [0, 3e-3, 0]])
    dist, _ = knn(Z, k=2)
    np.testing.assert_allclose(dist[0], [1e-3, 3e-3], rtol=1e-3)


def test_k_out_of_range_is_a_clear_error():
    with pytest.raises(ValueError, match="k=5"):
        knn(np.zeros((5, 2)), k=5)


def test_kmeans_plusplus_picks_distinct_rows_spread_over_separated_blobs():
    rng = np.random.default_rng(2)
    centres = 100.0 * np.eye(6)
    X = centres[rng.integers(0, 6, 600)] + rng.normal(size=(600, 6))
    start = kmeans_plusplus(X, 6, seed=0)
    # far-apart blobs: D² sampling puts one seed in each blob (with overwhelming probability)
    assert sorted(np.argmax(start, axis=1).tolist()) == list(range(6))
    labels, _ = kmeans(X, 6, seed=0)
    truth = np.argmax(X, axis=1)
    assert all(len(np.unique(labels[truth == b])) == 1 for b in range(6))
    np.testing.assert_array_equal(kmeans_plusplus(X, 6, seed=0), start)


def test_kmeans_plusplus_on_identical_points_returns_k_centres():
    assert kmeans_plusplus(np.ones((5, 3)), 3).shape == (3, 3)
