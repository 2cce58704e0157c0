"""Tests for zoorank.metrics.few_label.logme: LogME, H-score, NLEEP, GBC.

Independent references: scikit-learn's ``BayesianRidge`` evidence for LogME (and a brute-force
maximisation of the dense closed-form evidence with scipy), hand-computed and closed-form H-scores,
``sklearn.covariance.LedoitWolf`` for the shrunk H-score, a direct loop for GBC's Bhattacharyya
coefficients; label-aligned vs permuted-label real features (scikit-learn digits pixels); and the
invariances the definitions imply.
"""

from __future__ import annotations

import numpy as np
import pytest
import scipy.optimize
import torch
from sklearn.covariance import LedoitWolf
from sklearn.linear_model import BayesianRidge

from zoorank.metrics import gbc, h_score, logme, nleep

SCORES = (logme, h_score, nleep, gbc)


@pytest.fixture(scope="module")
def pixels(digits):
    """400 digits images as 64 pixel features in [0, 1], with their labels."""
    images, labels = digits
    return images.reshape(len(images), -1)[:400] / 16.0, labels[:400]


# --------------------------------------------------------------------------------------------
# LogME
# --------------------------------------------------------------------------------------------


def bayesian_ridge_logme(X, y):
    """Mean over classes of BayesianRidge's final log marginal likelihood / n.

    Correspondence: sklearn's ``alpha_`` is the noise precision (LogME's β) and ``lambda_`` the
    weight precision (LogME's α). ``scores_`` adds the Gamma hyperprior terms
    ``λ₁ log λ − λ₂ λ + α₁ log α − α₂ α`` to the log evidence; with
    ``alpha_1 = alpha_2 = lambda_1 = lambda_2 = 0`` they vanish and its updates are MacKay's fixed
    point, so the last entry of ``scores_`` (computed after the loop at the final α, λ) is LogME's
    evidence of that class. No intercept: LogME regresses on the raw features.
    """
    values = []
    for c in np.unique(y):
        t = (y == c).astype(np.float64)
        fit = BayesianRidge(fit_intercept=False, compute_score=True, tol=1e-10, max_iter=20000,
                            alpha_1=0.0, alpha_2=0.0, lambda_1=0.0, lambda_2=0.0).fit(X, t)
        values.append(fit.scores_[-1] / len(y))
    return float(np.mean(values))


def dense_log_evidence(X, t, alpha, beta):
    """The Bayesian linear regression log evidence written densely (Bishop 3.86)."""
    n, d = X.shape
    A = alpha * np.eye(d) + beta * X.T @ X
    m = beta * np.linalg.solve(A, X.T @ t)
    _, logdet = np.linalg.slogdet(A)
    return (d / 2 * np.log(alpha) + n / 2 * np.log(beta) - n / 2 * np.log(2 * np.pi)
            - beta / 2 * np.sum((X @ m - t) ** 2) - alpha / 2 * m @ m - logdet / 2)


def test_logme_equals_bayesian_ridge_evidence(pixels):
    X, y = pixels
    assert logme(X, y) == pytest.approx(bayesian_ridge_logme(X, y), rel=1e-7)


def test_logme_equals_bayesian_ridge_when_n_is_below_d(pixels):
    X, y = pixels
    X, y = X[:40], y[:40]  # 40 samples, 64 features (several constant)
    assert logme(X, y) == pytest.approx(bayesian_ridge_logme(X, y), rel=1e-8)


def test_logme_equals_brute_force_evidence_maximisation():
    rng = np.random.default_rng(3)
    X = rng.standard_normal((60, 5)) + 0.5
    y = rng.integers(0, 3, 60)
    best = []
    for c in range(3):
        t = (y == c).astype(np.float64)
        res = scipy.optimize.minimize(lambda p, t=t: -dense_log_evidence(X, t, *np.exp(p)),
                                      x0=np.zeros(2), method="Nelder-Mead",
                                      options={"xatol": 1e-10, "fatol": 1e-12, "maxiter": 5000})
        best.append(-res.fun / len(y))
    assert logme(X, y) == pytest.approx(np.mean(best), rel=1e-7)


def test_logme_is_invariant_to_rotations_of_the_features(pixels):
    X, y = pixels
    q, _ = np.linalg.qr(np.random.default_rng(0).standard_normal((64, 64)))
    assert logme(X @ q, y) == pytest.approx(logme(X, y), rel=1e-8)


# --------------------------------------------------------------------------------------------
# H-score
# --------------------------------------------------------------------------------------------


def test_h_score_plain_on_a_hand_case():
    # f = 0, 2, 4, 6 with classes {0, 2} and {4, 6}: var(f) = 5, class means 1 and 5 → var 4.
    f = np.array([[0.0], [2.0], [4.0], [6.0]])
    assert h_score(f, [0, 0, 1, 1], shrinkage=False) == pytest.approx(4 / 5, rel=1e-12)


@pytest.mark.parametrize("a,s", [(1.0, 1.0), (2.0, 0.5), (0.3, 3.0)])
def test_h_score_plain_closed_form(a, s):
    # Class means (±a, 0); within each class the deviations (±s, 0), (0, ±s): between-class
    # covariance diag(a², 0), within-class s²/2·I, so H = a² / (a² + s²/2).
    dev = np.array([[s, 0], [-s, 0], [0, s], [0, -s]])
    X = np.concatenate([dev + [a, 0], dev - [a, 0]])
    y = np.repeat([0, 1], 4)
    assert h_score(X, y, shrinkage=False) == pytest.approx(a**2 / (a**2 + s**2 / 2), rel=1e-12)


def between_class_covariance(X, y):
    mu = X.mean(axis=0)
    g = np.stack([X[y == y_i].mean(axis=0) for y_i in y])  # E[f | y] row by row
    return (g - mu).T @ (g - mu) / len(X)


def test_h_score_plain_equals_direct_numpy(pixels):
    X, y = pixels
    cov = np.cov(X, rowvar=False, bias=True)
    expected = np.trace(np.linalg.pinv(cov, rcond=1e-10) @ between_class_covariance(X, y))
    assert h_score(X, y, shrinkage=False) == pytest.approx(expected, rel=1e-6)


def test_h_score_shrinkage_equals_sklearn_ledoit_wolf(pixels):
    X, y = pixels
    lw = LedoitWolf().fit(X)
    expected = np.trace(np.linalg.inv(lw.covariance_)
                        @ ((1 - lw.shrinkage_) * between_class_covariance(X, y)))
    assert 0 < lw.shrinkage_ < 1
    assert h_score(X, y) == pytest.approx(expected, rel=1e-9)


def test_plain_h_score_is_invariant_to_invertible_linear_maps():
    rng = np.random.default_rng(1)
    y = rng.integers(0, 4, 300)
    X = rng.standard_normal((300, 8)) + np.eye(4, 8)[y] * 2
    A = rng.standard_normal((8, 8)) + 3 * np.eye(8)
    assert abs(np.linalg.det(A)) > 1
    assert h_score(X @ A, y, shrinkage=False) == pytest.approx(h_score(X, y, shrinkage=False),
                                                              rel=1e-9)


# --------------------------------------------------------------------------------------------
# NLEEP and GBC
# --------------------------------------------------------------------------------------------


def test_nleep_is_a_mean_log_likelihood_and_reproducible(pixels):
    X, y = pixels
    value = nleep(X, y, seed=1)
    assert -np.log(10) < value <= 0  # better than a uniform guess over 10 classes
    assert nleep(X, y, seed=1) == value


def test_gbc_equals_a_loop_over_class_pairs():
    rng = np.random.default_rng(2)
    y = np.repeat([0, 1, 2], 20)
    X = rng.standard_normal((60, 3)) * [1.0, 2.0, 0.5] + np.eye(3)[y] * 1.5
    # d = 3 < 64: the PCA is a rotation of the centred data, kept whole
    from sklearn.decomposition import PCA

    P = PCA(n_components=3, svd_solver="full").fit_transform(X)
    floor = 1e-4 * P.var(axis=0).mean()
    total = 0.0
    for i in range(3):
        for j in range(3):
            if i == j:
                continue
            mi, mj = P[y == i].mean(0), P[y == j].mean(0)
            vi, vj = P[y == i].var(0) + floor, P[y == j].var(0) + floor
            v = (vi + vj) / 2
            db = np.sum((mi - mj) ** 2 / v) / 8 + 0.5 * np.log(np.prod(v) / np.sqrt(np.prod(vi)
                                                                                    * np.prod(vj)))
            total += np.exp(-db)
    assert gbc(X, y) == pytest.approx(-total, rel=1e-9)


def test_gbc_of_identical_classes_is_minus_the_number_of_ordered_pairs():
    rng = np.random.default_rng(4)
    block = rng.standard_normal((30, 5))
    X = np.concatenate([block, block, block])  # three classes with the same Gaussian
    assert gbc(X, np.repeat([0, 1, 2], 30)) == pytest.approx(-6.0, rel=1e-12)


# --------------------------------------------------------------------------------------------
# all four
# --------------------------------------------------------------------------------------------


@pytest.mark.parametrize("score", SCORES, ids=lambda f: f.__name__)
def test_label_aligned_features_score_above_permuted_labels(score, pixels):
    X, y = pixels
    rng = np.random.default_rng(0)
    permuted = [score(X, rng.permutation(y)) for _ in range(3)]
    assert score(X, y) > max(permuted)


@pytest.mark.parametrize("score", [logme, h_score, gbc], ids=lambda f: f.__name__)
def test_scores_are_unchanged_when_samples_are_permuted(score, pixels):
    X, y = pixels
    order = np.random.default_rng(5).permutation(len(y))
    assert score(X[order], y[order]) == pytest.approx(score(X, y), rel=1e-9)


@pytest.mark.parametrize("score", SCORES, ids=lambda f: f.__name__)
def test_scores_accept_torch_float32_and_any_label_values(score, pixels):
    X, y = pixels
    names = np.array(["zero", "one", "two", "three", "four", "five", "six", "seven", "eight",
                      "nine"])[y]
    value = score(torch.from_numpy(X.astype(np.float32)), names)
    assert np.isfinite(value)
    assert value == pytest.approx(score(X.astype(np.float32).astype(np.float64), y), rel=1e-9)


@pytest.mark.parametrize("score", SCORES, ids=lambda f: f.__name__)
def test_degenerate_inputs_raise_a_clear_value_error(score, pixels):
    X, y = pixels
    with pytest.raises(ValueError, match="single class"):
        score(X, np.zeros(len(y)))
    with pytest.raises(ValueError, match="constant"):
        score(np.ones_like(X), y)
    bad = X.copy()
    bad[3, 4] = np.nan
    with pytest.raises(ValueError, match="NaN"):
        score(bad, y)
    with pytest.raises(ValueError, match="entries"):
        score(X, y[:-1])


@pytest.mark.parametrize("score", SCORES, ids=lambda f: f.__name__)
def test_fewer_samples_than_features_gives_a_finite_score(score, pixels):
    X, y = pixels
    idx = np.concatenate([np.flatnonzero(y == c)[:3] for c in range(10)])  # 30 samples, d = 64
    assert np.isfinite(score(X[idx], y[idx]))


def test_gbc_needs_two_samples_per_class(pixels):
    X, y = pixels
    idx = np.concatenate([np.flatnonzero(y == c)[:1] for c in range(10)])
    with pytest.raises(ValueError, match="at least 2 samples"):
        gbc(X[idx], y[idx])
