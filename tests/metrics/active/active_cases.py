"""A zoo of classifiers' predictions that the active-selection tests share."""

from __future__ import annotations

import numpy as np


def prediction_zoo(accuracies, n: int = 400, k: int = 5, seed: int = 0):
    """Predictions (M, n, k) of models right with the given probabilities (wrong: a uniform
    other class), their top-1 carrying 0.8 of the mass; and the true labels."""
    rng = np.random.default_rng(seed)
    y = rng.integers(0, k, n)
    P = np.full((len(accuracies), n, k), 0.2 / (k - 1))
    for m, a in enumerate(accuracies):
        wrong = (y + rng.integers(1, k, n)) % k
        pred = np.where(rng.random(n) < a, y, wrong)
        P[m, np.arange(n), pred] = 0.8
    return P, y
