"""GBC: a loop over class pairs and the identical-classes closed form."""

from __future__ import annotations

import numpy as np
import pytest

from zoorank.metrics import gbc, h_score, logme, nleep

SCORES = (logme, h_score, nleep, gbc)


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


def test_gbc_needs_two_samples_per_class(pixels):
    X, y = pixels
    idx = np.concatenate([np.flatnonzero(y == c)[:1] for c in range(10)])
    with pytest.raises(ValueError, match="at least 2 samples"):
        gbc(X[idx], y[idx])
