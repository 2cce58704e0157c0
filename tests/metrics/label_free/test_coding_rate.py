"""The MCR² coding rate and rate reduction against their logdet formulas."""

from __future__ import annotations

import numpy as np
import pytest

from zoorank.metrics import coding_rate, coding_rate_reduction
from zoorank.metrics._checks import DegenerateInputWarning

# --------------------------------------------------------------------------------------------
# independent references
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
