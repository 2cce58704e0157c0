"""H-score: a few-label transferability score.

* **H-score** (Bao et al. 2019, "An Information-Theoretic Approach to Transferability in Task
  Transfer Learning"): ``tr(cov(f)⁻¹ cov(E[f|y]))``; by default with the Ledoit–Wolf shrunk
  covariance of Ibrahim et al. 2022 ("Newer is not always better: Rethinking transferability
  metrics, their peculiarities, stability and performance").

All maths in float64; the input passes the few-label input check (``_checks.check_labelled``);
fewer than two classes, constant features and NaN/Inf raise ``ValueError``. Higher is better.
"""

from __future__ import annotations

from typing import Any

import numpy as np

from zoorank.metrics._checks import check_labelled as _check_inputs
from zoorank.metrics.registry import register

__all__ = ["h_score"]

_EPS64 = np.finfo(np.float64).eps


def _ledoit_wolf(Xc: np.ndarray) -> tuple[np.ndarray, float]:
    """(shrunk covariance, shrinkage) of centred rows, Ledoit & Wolf (2004)'s closed form.

    ``Σ = (1 − s)·S + s·μ·I`` with ``S = XᵀX/n`` and ``μ = tr(S)/d``, ``s = min(b², δ²)/δ²`` where
    ``δ² = ‖S − μI‖²_F/d`` and ``b² = (Σ_i ‖x_i x_iᵀ − S‖²_F)/(n² d)`` (the estimator
    ``sklearn.covariance.LedoitWolf`` implements).
    """
    n, d = Xc.shape
    S = Xc.T @ Xc / n
    mu = float(np.trace(S)) / d
    delta2 = (float(np.sum(S * S)) - 2 * mu * float(np.trace(S)) + d * mu * mu) / d
    sq = np.einsum("ij,ij->i", Xc, Xc)
    b2 = (float(np.sum(sq * sq)) / n - float(np.sum(S * S))) / (n * d)
    b2 = min(b2, delta2)
    s = 0.0 if delta2 <= 0 else b2 / delta2
    shrunk = (1 - s) * S
    shrunk.flat[:: d + 1] += s * mu
    return shrunk, s


@register("h_score", +1, "labels", few_label=True)
def h_score(Z: Any, y: Any, shrinkage: bool = True) -> float:
    """H-score: tr(cov(f)⁻¹ · cov(E[f | y])) (Bao et al. 2019), shrunk by default (Ibrahim et al. 2022).

    Both covariances use the 1/n normalisation over the n samples; ``E[f | y]`` replaces each
    sample by its class mean, so ``cov(E[f|y]) = Σ_c (n_c/n)(μ_c − μ)(μ_c − μ)ᵀ``.

    Parameters
    ----------
    Z : array-like or torch.Tensor, shape (n_samples, dim)
        Features; n < d is allowed.
    y : array-like, shape (n_samples,)
        Class labels (at least 2 classes).
    shrinkage : bool, default True
        ``True``: Ibrahim et al.'s regularised H-score ``tr(Σ_LW⁻¹ · (1 − s)·cov(E[f|y]))`` with the
        Ledoit–Wolf covariance ``Σ_LW = (1 − s)·cov(f) + s·(tr cov(f)/d)·I`` and its shrinkage
        ``s`` (as ``sklearn.covariance.LedoitWolf``). ``False``: Bao et al.'s plain form with the
        Moore–Penrose pseudo-inverse (singular values below ``max(n, d)·ε·σ_max`` dropped), which
        is unstable when n is not much larger than d.

    Returns
    -------
    float
        ≥ 0; at most C − 1 for the plain form (the between-class share of the whitened variance
        summed over directions). **Higher means more separable classes.**

    Notes
    -----
    The plain form is invariant to invertible linear maps of the features when cov(f) has full
    rank. Cost O(n·d² + d³).
    """
    X, codes, n_classes = _check_inputs(Z, y)
    n, d = X.shape
    Xc = X - X.mean(axis=0)
    counts = np.bincount(codes, minlength=n_classes).astype(np.float64)
    means = np.zeros((n_classes, d))
    np.add.at(means, codes, Xc)
    means /= counts[:, None]
    weighted = means * np.sqrt(counts / n)[:, None]  # cov(E[f|y]) = weightedᵀ weighted
    if shrinkage:
        cov, s = _ledoit_wolf(Xc)
        scale = 1 - s
    else:
        cov, scale = Xc.T @ Xc / n, 1.0
    # cov is positive definite whenever s > 0; the pseudo-inverse also covers s = 0 with n ≤ d.
    inv = np.linalg.pinv(cov, rcond=max(n, d) * _EPS64, hermitian=True)
    return float(scale * np.sum(weighted.T * (inv @ weighted.T)))


