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
import torch
from spectral_cases import class_structured_views, orthonormal, smooth_rank

from zoorank.metrics import alpha_req, coding_rate, coding_rate_reduction
from zoorank.metrics._checks import DegenerateInputWarning
from zoorank.metrics.label_free.lidar import lidar
from zoorank.metrics.label_free.rankme import rankme

# --------------------------------------------------------------------------------------------
# independent references
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
