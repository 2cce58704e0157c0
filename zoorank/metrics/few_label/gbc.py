"""GBC: a few-label transferability score.

* **GBC** (Pándy et al. 2022, "Transferability Estimation using Bhattacharyya Class
  Separability"): PCA to 64 dimensions, one diagonal Gaussian per class, minus the sum of the
  Bhattacharyya coefficients over ordered pairs of distinct classes.

All maths in float64; the input passes the few-label input check (``_checks.check_labelled``);
fewer than two classes, constant features and NaN/Inf raise ``ValueError``. Higher is better.
"""

from __future__ import annotations

from typing import Any

import numpy as np

from zoorank.metrics._checks import check_labelled as _check_inputs
from zoorank.metrics.few_label.nleep import pca_projection
from zoorank.metrics.registry import register

__all__ = ["gbc"]


@register("gbc", +1, "labels", few_label=True)
def gbc(Z: Any, y: Any, n_components: int = 64, variance_floor: float = 1e-4,
        seed: int = 0) -> float:
    """GBC: minus the summed Bhattacharyya coefficients between class Gaussians (Pándy et al. 2022).

    The features are projected by PCA on ``min(n_components, n − 1, d)`` dimensions (64 in the
    paper); each class c gets a diagonal Gaussian N(μ_c, diag(v_c)) (the paper's "diagonal"
    variant). For each pair the Bhattacharyya distance with ``v = (v_i + v_j)/2`` is ::

        D_B = 1/8 Σ (μ_i − μ_j)² / v  +  1/2 Σ log(v / sqrt(v_i v_j))

    and ``GBC = −Σ_{i ≠ j} exp(−D_B(i, j))`` over ordered pairs of distinct classes.

    Parameters
    ----------
    Z : array-like or torch.Tensor, shape (n_samples, dim)
    y : array-like, shape (n_samples,)
        At least 2 classes, each with at least 2 samples (a variance needs two).
    n_components : int, default 64
        PCA dimensions (capped by n − 1 and d).
    variance_floor : float, default 1e-4
        Added to every per-class variance, times the mean PCA variance per dimension (so it does
        not depend on the feature scale); keeps a class that is constant along a direction finite.
    seed : int, default 0
        ``random_state`` of the PCA.

    Returns
    -------
    float
        In ``[−C(C−1), 0]``; 0 means perfectly separated classes. **Higher is better.**
    """
    X, codes, n_classes = _check_inputs(Z, y, min_per_class=2)
    n, d = X.shape
    P = pca_projection(X, max(1, min(n_components, n - 1, d)), seed)
    floor = variance_floor * float(np.mean(P.var(axis=0)))
    mu = np.stack([P[codes == c].mean(axis=0) for c in range(n_classes)])
    var = np.stack([P[codes == c].var(axis=0) for c in range(n_classes)]) + floor
    avg = (var[:, None, :] + var[None, :, :]) / 2
    mahal = np.sum((mu[:, None, :] - mu[None, :, :]) ** 2 / avg, axis=2) / 8
    log_var = np.log(var)
    logdet = np.sum(np.log(avg), axis=2) - 0.5 * (log_var.sum(axis=1)[:, None]
                                                  + log_var.sum(axis=1)[None, :])
    coeff = np.exp(-(mahal + 0.5 * logdet))
    np.fill_diagonal(coeff, 0.0)
    return float(-coeff.sum())


