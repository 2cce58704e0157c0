"""Tests for the spectral metrics: RankMe (metrics.rankme_family), LiDAR (metrics.lidar_scatter),
alpha-ReQ and the MCR² coding rate (metrics.spectrum_shape).

Every expected value is computed independently of the module: the entropy formula by hand on
known singular values, LiDAR from scipy's generalised symmetric eigensolver on scatter matrices
built with explicit loops, alpha-ReQ on data with an exactly known covariance spectrum, the coding
rate from the m × m determinant formula of Yu et al., and invariances from the papers.
"""

from __future__ import annotations

import warnings

import numpy as np
import pytest
import scipy.linalg
import torch

from zoorank.metrics import alpha_req, coding_rate, coding_rate_reduction
from zoorank.metrics._checks import DegenerateInputWarning
from zoorank.metrics.label_free.lidar import lidar
from zoorank.metrics.label_free.rankme import rankme

# --------------------------------------------------------------------------------------------
# independent references
# --------------------------------------------------------------------------------------------


def smooth_rank(values, eps):
    """exp(−Σ p log p), p = v/‖v‖₁ + eps, written out by hand."""
    values = np.asarray(values, dtype=np.float64)
    p = values / values.sum() + eps
    return float(np.exp(-sum(pi * np.log(pi) for pi in p)))


def orthonormal(rows, cols, rng):
    q, _ = np.linalg.qr(rng.standard_normal((rows, cols)))
    return q


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


def class_structured_views(n, q, scales, noise, n_null=0, seed=0):
    """n classes with means spread by ``scales`` per feature, q noisy views each."""
    rng = np.random.default_rng(seed)
    scales = np.asarray(scales, dtype=np.float64)
    means = rng.standard_normal((n, 1, scales.size)) * scales
    E = means + noise * rng.standard_normal((n, q, scales.size))
    if n_null:
        E = np.concatenate([E, noise * rng.standard_normal((n, q, n_null))], axis=-1)
    return E


def exact_spectrum_matrix(n, eigenvalues, seed=0, offset=3.0):
    """Z (n × d) whose sample covariance (1/(n−1)) has exactly ``eigenvalues``."""
    rng = np.random.default_rng(seed)
    d = len(eigenvalues)
    A = rng.standard_normal((n, d))
    Q = np.linalg.qr(A - A.mean(axis=0))[0]  # orthonormal columns, each with zero mean
    R = orthonormal(d, d, rng)
    Z = np.sqrt(n - 1) * (Q * np.sqrt(eigenvalues)) @ R.T
    return Z + offset * rng.standard_normal(d)  # a column mean the covariance must remove


# --------------------------------------------------------------------------------------------
# RankMe
# --------------------------------------------------------------------------------------------


@pytest.mark.parametrize("shape", [(200, 12), (30, 30), (12, 90)], ids=["tall", "square", "wide"])
def test_rankme_equals_entropy_of_known_singular_values(shape):
    rng = np.random.default_rng(1)
    n, d = shape
    k = min(n, d)
    s = np.sort(rng.uniform(0.1, 5.0, size=k))[::-1]
    s[-3:] = 0.0  # rank-deficient: zero singular values still add their eps terms
    Z = orthonormal(n, k, rng) @ np.diag(s) @ orthonormal(d, k, rng).T
    assert rankme(Z) == pytest.approx(smooth_rank(s, 1e-7), rel=1e-9)
    assert rankme(Z, eps=1e-3) == pytest.approx(smooth_rank(s, 1e-3), rel=1e-9)


def test_rankme_of_equal_singular_values_is_their_count():
    rng = np.random.default_rng(2)
    Z = 4.0 * orthonormal(50, 7, rng) @ orthonormal(7, 7, rng)
    assert rankme(Z, eps=0.0) == pytest.approx(7.0, rel=1e-10)


def test_rankme_uses_uncentred_z_and_center_only_removes_the_mean():
    rng = np.random.default_rng(3)
    Z = rng.standard_normal((80, 10)) + 5.0 * rng.standard_normal(10)
    centred = Z - Z.mean(axis=0)
    raw_sigma = np.linalg.svd(Z, compute_uv=False)
    assert rankme(Z) == pytest.approx(smooth_rank(raw_sigma, 1e-7), rel=1e-9)
    assert rankme(Z, center=True) == pytest.approx(rankme(centred), rel=1e-9)
    # the large common mean dominates the uncentred spectrum
    assert rankme(Z) < 0.8 * rankme(Z, center=True)


def test_rankme_of_zero_matrix_warns_and_returns_one():
    with pytest.warns(DegenerateInputWarning, match="collapsed"):
        assert rankme(np.zeros((20, 5))) == 1.0


def test_rankme_of_constant_rows_is_collapsed_only_when_centred():
    Z = np.tile(np.array([0.1, 0.7, -0.3, 2.2]), (33, 1))
    with pytest.warns(DegenerateInputWarning):
        assert rankme(Z, center=True) == 1.0
    with warnings.catch_warnings():
        warnings.simplefilter("error")
        value = rankme(Z)  # rank 1: one singular value plus three eps terms
    assert value == pytest.approx(smooth_rank([np.linalg.norm(Z), 0, 0, 0], 1e-7), rel=1e-9)


# --------------------------------------------------------------------------------------------
# LiDAR
# --------------------------------------------------------------------------------------------


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


# --------------------------------------------------------------------------------------------
# alpha-ReQ
# --------------------------------------------------------------------------------------------


@pytest.mark.parametrize("alpha", [0.7, 1.0, 1.8])
def test_alpha_req_recovers_exponent_of_exact_power_law_spectrum(alpha):
    k = np.arange(1, 121)
    Z = exact_spectrum_matrix(300, k**-alpha, seed=12)
    estimate, r2 = alpha_req(Z, return_r2=True)
    assert estimate == pytest.approx(alpha, rel=1e-8)
    assert r2 == pytest.approx(1.0, abs=1e-10)


def test_alpha_req_fit_range_is_one_based_start_inclusive_stop_exclusive():
    # power law only at ranks 3..7; the head and tail break it but keep the order
    lam = np.concatenate([[50.0, 20.0], np.arange(3, 8) ** -1.5, [0.02, 0.019, 0.018, 0.017]])
    Z = exact_spectrum_matrix(60, lam, seed=13)
    assert alpha_req(Z, fit_range=(3, 8)) == pytest.approx(1.5, rel=1e-8)
    assert alpha_req(Z, fit_range=(2, 8)) != pytest.approx(1.5, rel=1e-2)
    assert alpha_req(Z, fit_range=(3, 9)) != pytest.approx(1.5, rel=1e-2)


def test_alpha_req_matches_direct_fit_on_sample_covariance():
    rng = np.random.default_rng(14)
    Z = rng.standard_normal((400, 30)) * np.arange(1, 31) ** -0.6
    lam = np.sort(np.linalg.eigvalsh(np.cov(Z.T)))[::-1]
    x, y = np.log(np.arange(2, 21)), np.log(lam[1:20])
    slope, intercept = np.polyfit(x, y, 1)
    residual = y - (slope * x + intercept)
    r2 = 1 - residual @ residual / ((y - y.mean()) @ (y - y.mean()))
    estimate, estimate_r2 = alpha_req(Z, fit_range=(2, 21), return_r2=True)
    assert estimate == pytest.approx(-slope, rel=1e-9)
    assert estimate_r2 == pytest.approx(r2, rel=1e-9)


def test_alpha_req_clips_fit_range_to_available_eigenvalues_with_warning():
    k = np.arange(1, 41)
    Z = exact_spectrum_matrix(200, k**-1.2, seed=15)
    with pytest.warns(DegenerateInputWarning, match="clipped"):
        assert alpha_req(Z) == pytest.approx(1.2, rel=1e-8)  # ranks 10..40 instead of 10..99
    with pytest.raises(ValueError, match="at least 2 non-zero eigenvalues"):
        alpha_req(Z, fit_range=(45, 60))


def test_alpha_req_clips_to_sample_rank_when_samples_are_few():
    rng = np.random.default_rng(16)
    Z = rng.standard_normal((15, 50))  # centred rank 14
    with pytest.warns(DegenerateInputWarning, match=r"only 14 non-zero"):
        alpha_req(Z, fit_range=(2, 30))


def test_alpha_req_rejects_collapsed_input_and_bad_ranges():
    with pytest.raises(ValueError, match="collapsed"):
        alpha_req(np.tile(np.arange(5.0), (20, 1)))
    Z = np.random.default_rng(0).standard_normal((50, 10))
    for bad in [(0, 5), (5, 6), (7, 3)]:
        with pytest.raises(ValueError, match="fit_range"):
            alpha_req(Z, fit_range=bad)


# --------------------------------------------------------------------------------------------
# MCR² coding rate
# --------------------------------------------------------------------------------------------


def reference_rate(Z, eps2):
    """½ logdet(I_m + m/(N ε²) W Wᵀ), W = normalised rows as m × N columns (Yu et al.)."""
    W = (Z / np.linalg.norm(Z, axis=1, keepdims=True)).T
    m, N = W.shape
    return 0.5 * np.linalg.slogdet(np.eye(m) + m / (N * eps2) * W @ W.T)[1]


def reference_compressed_rate(Z, labels, eps2):
    W = (Z / np.linalg.norm(Z, axis=1, keepdims=True)).T
    m, N = W.shape
    total = 0.0
    for j in np.unique(labels):
        Pi = np.diag((labels == j).astype(np.float64))
        tr = np.trace(Pi)
        total += tr / (2 * N) * np.linalg.slogdet(np.eye(m) + m / (tr * eps2) * W @ Pi @ W.T)[1]
    return total


@pytest.mark.parametrize("shape", [(200, 8), (6, 40)], ids=["N>m", "N<m"])
@pytest.mark.parametrize("eps2", [0.5, 0.05])
def test_coding_rate_matches_direct_logdet_formula(shape, eps2):
    Z = np.random.default_rng(17).standard_normal(shape)
    assert coding_rate(Z, eps2=eps2) == pytest.approx(reference_rate(Z, eps2), rel=1e-10)


def test_coding_rate_equals_its_sample_gram_form():
    # Sylvester: logdet(I_m + c WWᵀ) = logdet(I_N + c WᵀW)
    Z = np.random.default_rng(18).standard_normal((30, 12))
    Zn = Z / np.linalg.norm(Z, axis=1, keepdims=True)
    gram_form = 0.5 * np.linalg.slogdet(np.eye(30) + 12 / (30 * 0.5) * Zn @ Zn.T)[1]
    assert coding_rate(Z) == pytest.approx(gram_form, rel=1e-10)


def test_coding_rate_ignores_row_scale():
    rng = np.random.default_rng(19)
    Z = rng.standard_normal((50, 6))
    scaled = Z * rng.uniform(0.01, 100, size=(50, 1))
    assert coding_rate(scaled) == pytest.approx(coding_rate(Z), rel=1e-10)


def test_coding_rate_reduction_is_nonnegative_and_matches_formula():
    rng = np.random.default_rng(20)
    Z = rng.standard_normal((90, 10))
    labels = rng.integers(0, 4, size=90)
    delta_r, r, r_c = coding_rate_reduction(Z, labels, return_parts=True)
    assert r == pytest.approx(reference_rate(Z, 0.5), rel=1e-10)
    assert r_c == pytest.approx(reference_compressed_rate(Z, labels, 0.5), rel=1e-10)
    assert delta_r == pytest.approx(r - r_c, abs=1e-12)
    assert delta_r > 0
    assert coding_rate_reduction(Z, labels) == delta_r


def test_coding_rate_reduction_with_one_label_is_zero():
    Z = np.random.default_rng(21).standard_normal((40, 7))
    assert coding_rate_reduction(Z, ["a"] * 40) == pytest.approx(0.0, abs=1e-10)


def test_coding_rate_reduction_is_larger_for_true_clusters_than_shuffled_labels():
    rng = np.random.default_rng(22)
    centres = 3 * rng.standard_normal((4, 12))
    labels = np.repeat(np.arange(4), 30)
    Z = centres[labels] + 0.5 * rng.standard_normal((120, 12))
    true_value = coding_rate_reduction(Z, labels)
    assert true_value > 2 * coding_rate_reduction(Z, rng.permutation(labels))


def test_coding_rate_rejects_bad_eps2_and_labels_and_warns_on_zero_rows():
    Z = np.random.default_rng(23).standard_normal((10, 3))
    with pytest.raises(ValueError, match="eps2"):
        coding_rate(Z, eps2=0.0)
    with pytest.raises(ValueError, match="labels"):
        coding_rate_reduction(Z, np.zeros(9))
    Z[2] = 0.0
    with pytest.warns(DegenerateInputWarning, match="1 rows"):
        assert np.isfinite(coding_rate(Z))


# --------------------------------------------------------------------------------------------
# shared behaviour: input types, validation, no mutation
# --------------------------------------------------------------------------------------------

_rng = np.random.default_rng(24)
_Z = _rng.standard_normal((64, 12)) * np.arange(1, 13) ** -0.5 + 0.3
_E = class_structured_views(16, 4, [2, 1, 0.5, 0.3, 0.1], noise=0.4, seed=24)
_LABELS = np.arange(64) % 3

CASES = {
    "rankme": (rankme, _Z, {}),
    "rankme-centred": (rankme, _Z, {"center": True}),
    "lidar": (lidar, _E, {}),
    "alpha_req": (alpha_req, _Z, {"fit_range": (2, 10)}),
    "coding_rate": (coding_rate, _Z, {}),
    "coding_rate_reduction": (lambda Z: coding_rate_reduction(Z, _LABELS), _Z, {}),
}


@pytest.mark.parametrize("name", list(CASES))
def test_torch_tensors_and_float32_give_the_numpy_float64_value(name):
    fn, X, kwargs = CASES[name]
    X32 = X.astype(np.float32)
    reference = fn(X32.astype(np.float64), **kwargs)  # float32 → float64 is exact
    assert isinstance(reference, float)
    assert fn(X32, **kwargs) == pytest.approx(reference, rel=1e-10)
    assert fn(torch.from_numpy(X32), **kwargs) == pytest.approx(reference, rel=1e-10)
    tensor = torch.from_numpy(X).requires_grad_(True)
    assert fn(tensor, **kwargs) == pytest.approx(fn(X, **kwargs), rel=1e-12)
    assert fn(X32, **kwargs) == pytest.approx(fn(X, **kwargs), rel=1e-4)


@pytest.mark.parametrize("name", list(CASES))
def test_half_precision_inputs_are_computed_in_float64(name):
    fn, X, kwargs = CASES[name]
    half = X.astype(np.float16)
    assert fn(half, **kwargs) == pytest.approx(fn(half.astype(np.float64), **kwargs), rel=1e-10)
    bf16 = torch.from_numpy(X).to(torch.bfloat16)
    exact = bf16.float().numpy().astype(np.float64)
    assert fn(bf16, **kwargs) == pytest.approx(fn(exact, **kwargs), rel=1e-10)


@pytest.mark.parametrize("name", list(CASES))
@pytest.mark.parametrize("bad", [np.nan, np.inf])
def test_nan_or_inf_input_raises_value_error(name, bad):
    fn, X, kwargs = CASES[name]
    X = X.copy()
    X.flat[5] = bad
    with pytest.raises(ValueError, match="NaN/Inf"):
        fn(X, **kwargs)


@pytest.mark.parametrize("name", list(CASES))
def test_inputs_are_not_mutated(name):
    fn, X, kwargs = CASES[name]
    for data in (np.ascontiguousarray(X), X.astype(np.float32), torch.from_numpy(X.copy())):
        before = np.array(data, copy=True)
        fn(data, **kwargs)
        np.testing.assert_array_equal(np.asarray(data), before)
