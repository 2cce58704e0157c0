"""alpha-ReQ: exact power-law spectra, the fit range convention and degenerate input."""

from __future__ import annotations

import numpy as np
import pytest
from spectral_cases import orthonormal

from zoorank.metrics import alpha_req
from zoorank.metrics._checks import DegenerateInputWarning

# --------------------------------------------------------------------------------------------
# independent references
# --------------------------------------------------------------------------------------------


def exact_spectrum_matrix(n, eigenvalues, seed=0, offset=3.0):
    """Z (n × d) whose sample covariance (1/(n−1)) has exactly ``eigenvalues``."""
    rng = np.random.default_rng(seed)
    d = len(eigenvalues)
    A = rng.standard_normal((n, d))
    Q = np.linalg.qr(A - A.mean(axis=0))[0]  # orthonormal columns, each with zero mean
    R = orthonormal(d, d, rng)
    Z = np.sqrt(n - 1) * (Q * np.sqrt(eigenvalues)) @ R.T
    return Z + offset * rng.standard_normal(d)  # a column mean the covariance must remove


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
