"""NLEEP: a mean log-likelihood, reproducible under its seed."""

from __future__ import annotations

import numpy as np

from zoorank.metrics import gbc, h_score, logme, nleep

SCORES = (logme, h_score, nleep, gbc)


def test_nleep_is_a_mean_log_likelihood_and_reproducible(pixels):
    X, y = pixels
    value = nleep(X, y, seed=1)
    assert -np.log(10) < value <= 0  # better than a uniform guess over 10 classes
    assert nleep(X, y, seed=1) == value
