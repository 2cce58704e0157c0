"""NLEEP: a few-label transferability score.

* **NLEEP** (Li et al. 2021, "Ranking Neural Checkpoints"): PCA keeping 80% of the variance, a
  Gaussian mixture on it, then LEEP (Nguyen et al. 2020) with the mixture's posteriors as the
  source "labels".

All maths in float64; the input passes the few-label input check (``_checks.check_labelled``);
fewer than two classes, constant features and NaN/Inf raise ``ValueError``. Higher is better.
"""

from __future__ import annotations

from typing import Any, Literal

import numpy as np

from zoorank.metrics._checks import check_labelled as _check_inputs
from zoorank.metrics.registry import register

__all__ = ["nleep"]


def pca_projection(X: np.ndarray, n_components: int | float, seed: int) -> np.ndarray:
    from sklearn.decomposition import PCA

    return PCA(n_components=n_components, svd_solver="full", random_state=seed).fit_transform(X)


@register("nleep", +1, "labels", few_label=True)
def nleep(
    Z: Any,
    y: Any,
    variance: float = 0.8,
    components_per_class: int = 5,
    min_samples_per_component: int = 5,
    covariance_type: Literal["full", "diag"] = "full",
    seed: int = 0,
) -> float:
    """NLEEP: LEEP on the posteriors of a Gaussian mixture fitted to PCA features (Li et al. 2021).

    1. PCA keeping ``variance`` of the total variance (0.8 in the paper);
    2. a ``GaussianMixture`` with ``components_per_class × C`` components (5 × C in the paper),
       capped at ``n // min_samples_per_component`` (never below C) so few labels do not give one
       sample per component; fitted on the PCA features rescaled to unit mean variance per
       dimension (so scikit-learn's ``reg_covar`` does not depend on the feature scale), seeded;
    3. LEEP (Nguyen et al. 2020) with the mixture posteriors θ(x) as the source distribution:
       ``P(y, z) = (1/n) Σ_i 1[y_i = y] θ(x_i)_z``, ``P(y | z) = P(y, z)/P(z)`` and the score
       ``(1/n) Σ_i log Σ_z P(y_i | z) θ(x_i)_z``.

    Parameters
    ----------
    Z : array-like or torch.Tensor, shape (n_samples, dim)
    y : array-like, shape (n_samples,)
        At least 2 classes.
    variance : float in (0, 1], default 0.8
        Share of the variance the PCA keeps.
    components_per_class, min_samples_per_component : int, default 5 and 5
        Mixture size ``min(components_per_class·C, max(C, n // min_samples_per_component))``.
    covariance_type : {"full", "diag"}, default "full"
        The mixture's covariance (scikit-learn's default, as the reference implementation).
    seed : int, default 0
        ``random_state`` of the PCA and of the mixture's k-means initialisation.

    Returns
    -------
    float
        Mean log-likelihood of the labels, ≤ 0; 0 would be a perfect predictor. **Higher is
        better.**

    Notes
    -----
    Cost dominated by the EM of the mixture: O(iterations · n · K · p²) for p PCA dimensions.
    """
    from sklearn.mixture import GaussianMixture

    X, codes, n_classes = _check_inputs(Z, y)
    if not 0 < variance <= 1:
        raise ValueError(f"variance must be in (0, 1], got {variance}")
    n = X.shape[0]
    P = pca_projection(X, variance if variance < 1 else min(X.shape), seed)
    P = P / np.sqrt(np.mean(P.var(axis=0)))
    k = min(components_per_class * n_classes,
            max(n_classes, n // max(1, min_samples_per_component)), n)
    gmm = GaussianMixture(n_components=k, covariance_type=covariance_type, random_state=seed)
    theta = gmm.fit(P).predict_proba(P)  # (n, K) posteriors of the mixture components
    joint = np.zeros((n_classes, k))
    np.add.at(joint, codes, theta)
    joint /= n
    p_z = joint.sum(axis=0)
    cond = np.divide(joint, p_z, out=np.zeros_like(joint), where=p_z > 0)  # P(y | z)
    likelihood = np.einsum("iz,iz->i", theta, cond[codes])
    return float(np.mean(np.log(np.maximum(likelihood, np.finfo(np.float64).tiny))))


