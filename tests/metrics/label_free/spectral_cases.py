"""Cases the spectral metrics' tests share: the smooth effective rank, orthonormal bases and
views grouped by class (the tests of rankme, lidar and alpha_req import them)."""

from __future__ import annotations

import numpy as np


def smooth_rank(values, eps):
    """exp(−Σ p log p), p = v/‖v‖₁ + eps, written out by hand."""
    values = np.asarray(values, dtype=np.float64)
    p = values / values.sum() + eps
    return float(np.exp(-sum(pi * np.log(pi) for pi in p)))


def orthonormal(rows, cols, rng):
    q, _ = np.linalg.qr(rng.standard_normal((rows, cols)))
    return q


def class_structured_views(n, q, scales, noise, n_null=0, seed=0):
    """n classes with means spread by ``scales`` per feature, q noisy views each."""
    rng = np.random.default_rng(seed)
    scales = np.asarray(scales, dtype=np.float64)
    means = rng.standard_normal((n, 1, scales.size)) * scales
    E = means + noise * rng.standard_normal((n, q, scales.size))
    if n_null:
        E = np.concatenate([E, noise * rng.standard_normal((n, q, n_null))], axis=-1)
    return E
