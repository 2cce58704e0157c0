"""Few-label transferability scores: LogME, H-score, NLEEP and GBC.

Each function scores how well frozen features ``Z`` (n × d) fit a handful of labels ``y`` without
training a probe; **higher is better for all four**. They need labels, so they are not label-free
metrics: the label-budget curve (:mod:`zoorank.oracle.budget`) measures how many labels per class each
needs before it ranks a zoo better than the best label-free metric.

* **LogME** (You et al. 2021, "LogME: Practical Assessment of Pre-trained Models for Transfer
  Learning"): per class c, the log evidence of a Bayesian linear regression of the one-hot column
  ``1[y = c]`` on the raw (uncentred) features, with the prior precision α and noise precision β
  maximised by MacKay's fixed point; the score is the mean over classes of evidence / n.
* **H-score** (Bao et al. 2019, "An Information-Theoretic Approach to Transferability in Task
  Transfer Learning"): ``tr(cov(f)⁻¹ cov(E[f|y]))``; by default with the Ledoit–Wolf shrunk
  covariance of Ibrahim et al. 2022 ("Newer is not always better: Rethinking transferability
  metrics, their peculiarities, stability and performance").
* **NLEEP** (Li et al. 2021, "Ranking Neural Checkpoints"): PCA keeping 80% of the variance, a
  Gaussian mixture on it, then LEEP (Nguyen et al. 2020) with the mixture's posteriors as the
  source "labels".
* **GBC** (Pándy et al. 2022, "Transferability Estimation using Bhattacharyya Class
  Separability"): PCA to 64 dimensions, one diagonal Gaussian per class, minus the sum of the
  Bhattacharyya coefficients over ordered pairs of distinct classes.

All maths in float64. Every function starts with the shared input check; fewer than two classes,
constant features and NaN/Inf raise ``ValueError``.
"""

from __future__ import annotations

from typing import Any, Literal

import numpy as np

from zoorank.metrics._checks import check_labelled as _check_inputs
from zoorank.metrics.registry import register

__all__ = ["gbc", "h_score", "logme", "nleep"]

_EPS64 = np.finfo(np.float64).eps


def _rank_cutoff(values: np.ndarray, shape: tuple[int, int]) -> float:
    """Singular values below this are numerical zeros (numpy's ``matrix_rank`` tolerance)."""
    return float(values.max(initial=0.0)) * max(shape) * _EPS64


# --------------------------------------------------------------------------------------------
# LogME
# --------------------------------------------------------------------------------------------


def logme(Z: Any, y: Any, max_iter: int = 1000, tol: float = 1e-8) -> float:
    """LogME: mean over classes of the maximised log evidence per sample (You et al. 2021).

    For each class c the target is ``t = 1[y = c]`` (a one-hot column) and the model
    ``t = Z w + noise`` with ``w ~ N(0, α⁻¹ I_d)`` and noise ``N(0, β⁻¹)``, on the raw features
    (no centring, no intercept, as in thuml/LogME). The log evidence is ::

        L(α, β) = d/2 log α + n/2 log β − n/2 log 2π − β/2 ‖Z m − t‖² − α/2 ‖m‖² − ½ log|A|

    with ``A = α I + β ZᵀZ`` and ``m = β A⁻¹ Zᵀ t``. α and β are maximised by MacKay's fixed point
    ``γ = Σ βσ²/(α + βσ²)``, ``α = γ/‖m‖²``, ``β = (n − γ)/‖Zm − t‖²`` (started at α = β = 1, as
    the paper), on the thin SVD ``Z = U diag(σ) Vᵀ`` shared by all classes. The score is
    ``mean_c L_c / n``.

    Parameters
    ----------
    Z : array-like or torch.Tensor, shape (n_samples, dim)
        Features (float, any device); n < d is allowed.
    y : array-like, shape (n_samples,)
        Class labels (any hashable values; at least 2 classes).
    max_iter : int, default 1000
        Fixed-point iterations per class at most.
    tol : float, default 1e-8
        Stop when α and β change by less than this fraction in an iteration. (thuml/LogME stops at
        1% on α/β; the tighter default makes the value reproducible to ~1e-8.)

    Returns
    -------
    float
        Mean log evidence per sample; **higher means the features explain the labels better**.
        Only differences between models on the same labels are meaningful.

    Notes
    -----
    Feature directions with a zero singular value contribute ``½ log α − ½ log α = 0``, so the
    evidence is that of the rank-r column space (the limit α → ∞ along the null space). Cost
    O(n·d·min(n, d)) for the SVD plus O(C·r) per iteration.
    """
    X, codes, n_classes = _check_inputs(Z, y)
    n = X.shape[0]
    U, sigma, _ = np.linalg.svd(X, full_matrices=False)
    keep = sigma > _rank_cutoff(sigma, X.shape)
    U, s2 = U[:, keep], sigma[keep] ** 2
    T = np.zeros((n, n_classes))
    T[np.arange(n), codes] = 1.0
    proj = U.T @ T  # (r, C): coordinates of each target in the column space of Z
    outside = np.maximum((T * T).sum(axis=0) - (proj * proj).sum(axis=0), 0.0)
    evidence = np.empty(n_classes)
    for c in range(n_classes):
        evidence[c] = _logme_one(proj[:, c] ** 2, outside[c], s2, n, max_iter, tol)
    return float(np.mean(evidence) / n)


register("logme", +1, "labels", few_label=True)(logme)


def _logme_one(z2: np.ndarray, outside: float, s2: np.ndarray, n: int, max_iter: int,
               tol: float) -> float:
    """Maximised log evidence of one target from its squared SVD coordinates ``z2``.

    Iterates on the prior and noise variances ``1/α`` and ``1/β`` (through ``λ = α/β``), so a
    maximum on the boundary (β → ∞ when Z interpolates the target, α → ∞ when Z says nothing
    about it) converges to the finite limit of the evidence instead of overflowing.
    """
    r = len(s2)
    lam = 1.0  # α/β at α = β = 1, thuml/LogME's start
    var_w = var_n = 1.0
    for _ in range(max_iter):
        shrink = s2 / (lam + s2)
        gamma = float(np.sum(shrink))
        m2 = float(np.sum(shrink**2 * z2 / s2))  # ‖m‖²
        resid = float(np.sum((1 - shrink) ** 2 * z2)) + outside  # ‖Zm − t‖²
        new_w = m2 / gamma if gamma > 0 else 0.0  # 1/α
        new_n = resid / (n - gamma) if n - gamma > 0 else 0.0  # 1/β
        if new_w <= 0 or new_n <= 0:  # a boundary: no signal, or an exact fit
            var_w, var_n = new_w, new_n
            break
        new_lam = new_n / new_w
        done = abs(new_lam - lam) <= tol * lam and abs(new_n - var_n) <= tol * var_n
        var_w, var_n, lam = new_w, new_n, new_lam
        if done:
            break
    # The evidence written in data space: t ~ N(0, (1/β) I + (1/α) Z Zᵀ), whose covariance has
    # eigenvalues 1/β + σ²/α along U and 1/β on the n − r directions orthogonal to Z's columns
    # (equal to the weight-space form of the docstring by the matrix determinant lemma).
    v = var_n + var_w * s2
    if np.any(v <= 0) or (var_n <= 0 and (n > r or outside > 0)):
        raise ValueError("logme: the evidence is unbounded (the features fit a target exactly "
                         "with no prior); the input is degenerate")
    out_terms = 0.0 if n == r else (n - r) * np.log(var_n) + outside / var_n
    return float(-n / 2 * np.log(2 * np.pi) - 0.5 * np.sum(np.log(v)) - 0.5 * np.sum(z2 / v)
                 - 0.5 * out_terms)


# --------------------------------------------------------------------------------------------
# H-score
# --------------------------------------------------------------------------------------------


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


register("h_score", +1, "labels", few_label=True)(h_score)


# --------------------------------------------------------------------------------------------
# PCA shared by NLEEP and GBC
# --------------------------------------------------------------------------------------------


def _pca(X: np.ndarray, n_components: int | float, seed: int) -> np.ndarray:
    from sklearn.decomposition import PCA

    return PCA(n_components=n_components, svd_solver="full", random_state=seed).fit_transform(X)


# --------------------------------------------------------------------------------------------
# NLEEP
# --------------------------------------------------------------------------------------------


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
    P = _pca(X, variance if variance < 1 else min(X.shape), seed)
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


register("nleep", +1, "labels", few_label=True)(nleep)


# --------------------------------------------------------------------------------------------
# GBC
# --------------------------------------------------------------------------------------------


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
    P = _pca(X, max(1, min(n_components, n - 1, d)), seed)
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


register("gbc", +1, "labels", few_label=True)(gbc)
