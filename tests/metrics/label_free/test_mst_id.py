"""mst_length against closed forms and a brute-force Prim reference; mst_id on manifolds of known
dimension; its registration and its errors."""

from __future__ import annotations

import warnings

import numpy as np
import pytest

from zoorank.metrics import DegenerateInputWarning, mst_id, registry
from zoorank.metrics.label_free.mst_id import mst_length


def _rotate_into(X: np.ndarray, dim: int, seed: int) -> np.ndarray:
    q, _ = np.linalg.qr(np.random.default_rng(seed).standard_normal((dim, X.shape[1])))
    return X @ q.T


def _prim(X: np.ndarray, gamma: float) -> float:
    """O(n²) Prim's algorithm on the dense Euclidean distances: an independent reference."""
    n = len(X)
    D = np.sqrt(((X[:, None, :] - X[None, :, :]) ** 2).sum(-1))
    inside = np.zeros(n, dtype=bool)
    inside[0] = True
    best = D[0].copy()
    total = 0.0
    for _ in range(n - 1):
        j = int(np.argmin(np.where(inside, np.inf, best)))
        total += best[j] ** gamma
        inside[j] = True
        best = np.minimum(best, D[j])
    return total


def test_collinear_points_span_their_range():
    t = np.random.default_rng(0).uniform(-3, 5, size=200)
    X = _rotate_into(t[:, None], 6, seed=1)
    assert mst_length(X) == pytest.approx(t.max() - t.min(), rel=1e-10)


def test_a_square_grid_is_n_minus_one_unit_edges():
    m, h = 9, 0.25
    g = np.stack(np.meshgrid(np.arange(m), np.arange(m)), -1).reshape(-1, 2) * h
    assert mst_length(g) == pytest.approx((m * m - 1) * h, rel=1e-12)
    assert mst_length(g, gamma=2.0) == pytest.approx((m * m - 1) * h**2, rel=1e-12)


@pytest.mark.parametrize("gamma", [1.0, 2.0, 0.5])
def test_mst_length_matches_prim(gamma):
    X = np.random.default_rng(3).standard_normal((120, 7))
    assert mst_length(X, gamma) == pytest.approx(_prim(X, gamma), rel=1e-10)


@pytest.mark.parametrize("d", [1, 2, 3])
def test_mst_id_recovers_the_dimension_of_a_flat_cube(d):
    rng = np.random.default_rng(10 + d)
    X = _rotate_into(rng.random((800, d)), 12, seed=d)
    est = mst_id(X, normalize=False)
    assert est == pytest.approx(d, rel=0.12)  # the finite-n estimate falls a little short at d = 3


def test_a_circle_is_one_dimensional_and_a_sphere_two():
    rng = np.random.default_rng(5)
    a = rng.uniform(0, 2 * np.pi, 600)
    circle = mst_id(_rotate_into(np.stack([np.cos(a), np.sin(a)], 1), 8, seed=2))
    sphere = mst_id(rng.standard_normal((800, 3)))  # normalised rows: the 2-sphere
    assert circle == pytest.approx(1.0, abs=0.1)
    assert sphere == pytest.approx(2.0, rel=0.1)


def test_the_registered_metric_is_the_function_at_its_settings():
    Z = np.random.default_rng(7).standard_normal((400, 16))
    entry = registry.info("mst_id")
    assert "mst_id" in registry.config_names() and entry.direction == 1
    value, _ = entry.run(Z, None, seed=4)
    assert value == mst_id(Z, seed=4)
    assert 0 < mst_id(Z, seed=4, return_details=True)["slope"] < 1


def test_duplicates_are_dropped_and_bad_input_is_refused():
    Z = np.random.default_rng(8).standard_normal((300, 5))
    with warnings.catch_warnings(record=True) as caught:
        warnings.simplefilter("always")
        d = mst_id(np.concatenate([Z, Z[:50]]), return_details=True)
    assert d["n_duplicates_dropped"] == 50 and d["n_used"] == 300
    assert any(issubclass(w.category, DegenerateInputWarning) for w in caught)
    with pytest.raises(ValueError, match="distinct rows"):
        mst_id(Z[:40])
    bad = Z.copy()
    bad[0, 0] = np.nan
    with pytest.raises(ValueError):
        mst_id(bad)
    with pytest.raises(ValueError, match="duplicate"):
        mst_length(np.concatenate([Z[:5], Z[:1]]))
    with pytest.raises(ValueError, match="gamma"):
        mst_id(Z, gamma=0)
