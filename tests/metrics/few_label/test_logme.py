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
from sklearn.linear_model import BayesianRidge

from zoorank.metrics import gbc, h_score, logme, nleep

SCORES = (logme, h_score, nleep, gbc)


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
