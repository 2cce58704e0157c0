"""H-score: hand cases, the closed form, sklearn Ledoit–Wolf and invariance to linear maps."""

from __future__ import annotations

import numpy as np
import pytest
from sklearn.covariance import LedoitWolf

from zoorank.metrics import gbc, h_score, logme, nleep

SCORES = (logme, h_score, nleep, gbc)


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
