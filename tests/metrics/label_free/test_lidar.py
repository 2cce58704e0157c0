"""LiDAR: closed forms (generalised eigenvalues of the scatter pencil), invariances and degenerate input."""

from __future__ import annotations

import numpy as np
import pytest
import scipy.linalg
from spectral_cases import class_structured_views, orthonormal, smooth_rank

from zoorank.metrics._checks import DegenerateInputWarning
from zoorank.metrics.label_free.lidar import lidar
from zoorank.metrics.label_free.rankme import rankme

# --------------------------------------------------------------------------------------------
# independent references
# --------------------------------------------------------------------------------------------


def scatter_matrices(E):
    """Σ_b/(n−1) and Σ_w/(n(q−1)) by explicit loops over classes and views."""
    n, q, p = E.shape
    means = [E[i].mean(axis=0) for i in range(n)]
    grand = sum(means) / n
    Sb = sum(np.outer(m - grand, m - grand) for m in means) / (n - 1)
    Sw = sum(np.outer(E[i, j] - means[i], E[i, j] - means[i]) for i in range(n) for j in range(q))
    return Sb, Sw / (n * (q - 1))


def reference_lidar(E, delta, eps, *, Sb=None, n_features=None):
    """LiDAR from generalised eigenvalues of (Σ_b, Σ_w + δI) (spec B.2 cross-check)."""
    Sb_loop, Sw = scatter_matrices(E)
    Sb = Sb_loop if Sb is None else Sb
    lam = scipy.linalg.eigh(Sb, Sw + delta * np.eye(Sw.shape[0]), eigvals_only=True)
    lam = np.clip(lam, 0, None)
    n_zeros = 0 if n_features is None else n_features - lam.size
    return smooth_rank(np.concatenate([lam, np.zeros(n_zeros)]), eps)


@pytest.mark.parametrize("delta", [1e-6, 1e-2])
def test_lidar_matches_generalised_eigenvalues_of_the_scatter_pencil(delta):
    E = class_structured_views(30, 5, [3, 2, 1, 0.5, 0.2, 0.1], noise=0.4, n_null=2)
    value, details = lidar(E, delta=delta, return_details=True)
    assert value == pytest.approx(reference_lidar(E, delta, 1e-7), rel=1e-8)
    Sb, Sw = scatter_matrices(E)
    expected = scipy.linalg.eigh(Sb, Sw + delta * np.eye(8), eigvals_only=True)[::-1]
    np.testing.assert_allclose(details["eigenvalues"], np.clip(expected, 0, None), atol=1e-9)
    assert details["dim"] == 8 and not details["reduced"] and not details["collapsed"]


def test_lidar_relative_delta_is_scaled_by_mean_within_variance():
    E = class_structured_views(25, 4, [2, 1, 0.5, 0.1], noise=0.3)
    _, Sw = scatter_matrices(E)
    delta = 1e-2 * np.trace(Sw) / 4
    value, details = lidar(E, delta=1e-2, delta_mode="relative", return_details=True)
    assert details["delta"] == pytest.approx(delta, rel=1e-12)
    assert value == pytest.approx(reference_lidar(E, delta, 1e-7), rel=1e-8)
    # relative δ makes LiDAR scale-free; absolute δ does not
    assert lidar(1e-3 * E, delta=1e-2, delta_mode="relative") == pytest.approx(value, rel=1e-9)
    assert lidar(1e-3 * E, delta=1e-2) != pytest.approx(lidar(E, delta=1e-2), rel=1e-3)


def test_lidar_is_invariant_to_invertible_maps_while_rankme_is_not():
    rng = np.random.default_rng(4)
    E = class_structured_views(40, 6, [3, 2, 1, 0.5, 0.2], noise=0.5, seed=4)
    A = orthonormal(5, 5, rng) @ np.diag([5.0, 2.0, 1.0, 0.5, 0.1]) @ orthonormal(5, 5, rng)
    EA = E @ A.T
    assert lidar(EA, delta=0.0) == pytest.approx(lidar(E, delta=0.0), rel=1e-8)
    flat, flat_a = E.reshape(-1, 5), EA.reshape(-1, 5)
    assert abs(rankme(flat_a) / rankme(flat) - 1) > 0.1


def test_lidar_barely_moves_with_appended_noise_dims_while_rankme_rises():
    # Proposition 1 (spec B.10): fresh noise per view, q large so the 1/q floor is small
    rng = np.random.default_rng(5)
    n, q = 60, 200
    E = class_structured_views(n, q, np.linspace(2, 0.5, 6), noise=0.3, seed=5)
    noisy = np.concatenate([E, rng.standard_normal((n, q, 16))], axis=-1)
    lidar_change = lidar(noisy) / lidar(E) - 1
    debiased_change = lidar(noisy, debias_between=True) / lidar(E, debias_between=True) - 1
    rankme_change = rankme(noisy.reshape(n * q, -1)) / rankme(E.reshape(n * q, -1)) - 1
    assert 0 <= lidar_change < 0.02
    assert abs(debiased_change) < 0.005
    assert rankme_change > 1.0


def test_lidar_jumps_up_when_views_are_grouped_at_random():
    # a grouping bug makes Σ_b ≈ Σ_total/q and Σ_w ≈ Σ_total: a flat LDA spectrum (spec Part C)
    rng = np.random.default_rng(6)
    n, q, p = 100, 10, 16
    E = class_structured_views(n, q, [3, 2, 1, 0.5], noise=0.3, n_null=12, seed=6)
    shuffled = E.reshape(n * q, p)[rng.permutation(n * q)].reshape(n, q, p)
    assert lidar(E) < 5
    assert lidar(shuffled) > 0.8 * p


def test_lidar_debiased_between_scatter_subtracts_within_over_q():
    E = class_structured_views(30, 4, [2, 1, 0.3], noise=0.6, n_null=3, seed=7)
    Sb, Sw = scatter_matrices(E)
    w, V = np.linalg.eigh(Sb - Sw / 4)
    Sb_debiased = (V * np.clip(w, 0, None)) @ V.T
    expected = reference_lidar(E, 1e-6, 1e-7, Sb=Sb_debiased)
    assert lidar(E, debias_between=True) == pytest.approx(expected, rel=1e-7)
    assert lidar(E, debias_between=True) < lidar(E)


def test_lidar_reduction_is_lossless_when_features_outnumber_pooled_views():
    rng = np.random.default_rng(8)
    n, q, p = 6, 3, 40  # p > n·q − 1: Σ_w is singular without δ
    E = rng.standard_normal((n, 1, p)) + 0.5 * rng.standard_normal((n, q, p))
    value, details = lidar(E, return_details=True)
    assert details["reduced"] and details["dim"] == n * q - 1
    assert value == pytest.approx(reference_lidar(E, 1e-6, 1e-7), rel=1e-6)
    assert value == pytest.approx(lidar(E, reduce_dim=False), rel=1e-6)


def test_lidar_reduction_projects_on_top_principal_directions_of_pooled_views():
    n, q, p, max_dim = 20, 5, 30, 25
    E = class_structured_views(n, q, np.linspace(2, 0.2, p), noise=0.5, seed=9)
    pooled = E.reshape(n * q, p)
    _, _, Vt = np.linalg.svd(pooled - pooled.mean(axis=0))
    projected = E @ Vt[:max_dim].T
    expected = reference_lidar(projected, 1e-6, 1e-7, n_features=p)
    value, details = lidar(E, max_dim=max_dim, return_details=True)
    assert details["reduced"] and details["dim"] == max_dim
    assert value == pytest.approx(expected, rel=1e-8)


def test_lidar_of_identical_embeddings_returns_sentinel_not_nan():
    E = np.ones((10, 4, 6))
    with pytest.warns(DegenerateInputWarning, match="collapse"):
        value, details = lidar(E, return_details=True)
    assert value == 1.0 and details["collapsed"]


def test_lidar_with_equal_class_means_returns_sentinel():
    rng = np.random.default_rng(10)
    u = rng.standard_normal((12, 1, 5))
    E = 0.7 + np.concatenate([u, -u], axis=1)  # views differ, every class mean is 0.7
    with pytest.warns(DegenerateInputWarning):
        assert lidar(E) == 1.0


def test_lidar_with_identical_views_is_effective_rank_of_between_scatter():
    rng = np.random.default_rng(11)
    means = rng.standard_normal((30, 5)) * np.array([3, 2, 1, 0.5, 0.1])
    E = np.repeat(means[:, None, :], 3, axis=1)
    expected = smooth_rank(np.linalg.eigvalsh(np.cov(means.T)), 1e-7)
    for delta, mode in [(1e-6, "absolute"), (1e-2, "absolute"), (1e-6, "relative")]:
        with pytest.warns(DegenerateInputWarning, match="identical"):
            value, details = lidar(E, delta=delta, delta_mode=mode, return_details=True)
        assert details["invariant"]
        assert value == pytest.approx(expected, rel=1e-8)


def test_lidar_debiased_without_between_signal_beyond_view_noise_returns_sentinel():
    # n = q = 2, p = 1: Σ_b = (1 − 1.5)²/2 = 0.125 < Σ_w/q = 1/2, so the debiased Σ_b is 0
    E = np.array([[[0.0], [2.0]], [[1.5], [1.5]]])
    assert lidar(E) == pytest.approx(smooth_rank([1.0], 1e-7), rel=1e-12)
    with pytest.warns(DegenerateInputWarning, match="debiased"):
        value, details = lidar(E, debias_between=True, return_details=True)
    assert value == 1.0 and details["collapsed"]


@pytest.mark.parametrize("shape", [(10, 1, 4), (1, 5, 4)], ids=["one-view", "one-sample"])
def test_lidar_needs_two_views_and_two_samples(shape):
    with pytest.raises(ValueError, match="q >= 2|at least 2 rows"):
        lidar(np.random.default_rng(0).standard_normal(shape))


def test_lidar_rejects_flat_input_and_bad_parameters():
    E = np.random.default_rng(0).standard_normal((5, 3, 4))
    with pytest.raises(ValueError, match="3-D"):
        lidar(E.reshape(15, 4))
    with pytest.raises(ValueError, match="delta"):
        lidar(E, delta=-1.0)
    with pytest.raises(ValueError, match="delta_mode"):
        lidar(E, delta_mode="scaled")
