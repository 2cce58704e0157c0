"""The spectral metrics' shared numerics: blocked Gram matrices and norms equal to the direct float64
products, the smooth effective rank's closed forms and log det(I + cG) in either Gram form."""

from __future__ import annotations

import numpy as np
import pytest

from zoorank.metrics.label_free import _spectrum
from zoorank.metrics.label_free._spectrum import (
    check_eps,
    check_float,
    effective_rank,
    gram,
    logdet_identity_plus,
    sq_norm,
)


@pytest.fixture
def small_blocks(monkeypatch):
    monkeypatch.setattr(_spectrum, "_BLOCK_BYTES", 8 * 6 * 5)  # 5 rows of width 6 per block


def test_gram_in_blocks_equals_the_float64_product_with_mean_and_normalisation(small_blocks):
    X = np.random.default_rng(0).standard_normal((43, 6)).astype(np.float32)
    mean = X.astype(np.float64).mean(axis=0)
    B = X.astype(np.float64) - mean
    np.testing.assert_allclose(gram(X, mean=mean), B.T @ B, rtol=1e-12, atol=1e-12)
    U = X.astype(np.float64) / np.linalg.norm(X.astype(np.float64), axis=1, keepdims=True)
    np.testing.assert_allclose(gram(X, normalize=True), U.T @ U, rtol=1e-12, atol=1e-12)


def test_gram_takes_the_smaller_form_and_both_share_their_eigenvalues():
    X = np.random.default_rng(1).standard_normal((4, 9))
    G = gram(X)
    assert G.shape == (4, 4)
    np.testing.assert_allclose(np.linalg.eigvalsh(G)[::-1],
                               np.linalg.eigvalsh(X.T @ X)[::-1][:4], rtol=1e-10)


def test_sq_norm_is_the_float64_frobenius_norm_squared(small_blocks):
    X = np.random.default_rng(2).standard_normal((31, 6)).astype(np.float32)
    assert sq_norm(X) == pytest.approx(float(np.sum(X.astype(np.float64) ** 2)), rel=1e-13)


def test_effective_rank_of_k_equal_values_is_k_and_implicit_zeros_count_as_zeros():
    assert effective_rank(np.ones(7), eps=0.0) == pytest.approx(7.0, rel=1e-12)
    values = np.array([3.0, 1.0, 0.5])
    eps = 1e-3
    explicit = effective_rank(np.concatenate([values, np.zeros(4)]), eps)
    assert effective_rank(values, eps, n_zeros=4) == pytest.approx(explicit, rel=1e-12)


def test_logdet_identity_plus_is_the_same_in_either_gram_form():
    X = np.random.default_rng(3).standard_normal((5, 12))
    c = 0.7
    small = logdet_identity_plus(X @ X.T, c)
    large = logdet_identity_plus(X.T @ X, c)
    assert small == pytest.approx(large, rel=1e-10)
    assert small == pytest.approx(float(np.log(np.linalg.det(np.eye(5) + c * X @ X.T))), rel=1e-10)


def test_check_float_keeps_float32_and_check_eps_names_the_bound():
    assert check_float(np.ones((2, 2), np.float32), "Z", ndim=2).dtype == np.float32
    assert check_float(np.ones((2, 2), np.int64), "Z", ndim=2).dtype == np.float64
    assert check_eps(0.0, "eps") == 0.0
    with pytest.raises(ValueError, match="eps2 must be a finite number > 0"):
        check_eps(0.0, "eps2", positive=True)
    with pytest.raises(ValueError, match=">= 0"):
        check_eps(-1.0, "eps")
