"""Few-label transferability scores: LogME, H-score, NLEEP and GBC.

Each function scores how well frozen features ``Z`` (n × d) fit a handful of labels ``y`` without
training a probe; **higher is better for all four**. They need labels, so they are not label-free
metrics: the label-budget curve (:mod:`zoorank.oracle.budget`) measures how many labels per class each
needs before it ranks a zoo better than the best label-free metric.

* **LogME** (You et al. 2021, "LogME: Practical Assessment of Pre-trained Models for Transfer
  Learning"): per class c, the log evidence of a Bayesian linear regression of the one-hot column
  ``1[y = c]`` on the raw (uncentred) features, with the prior precision α and noise precision β
  maximised by MacKay's fixed point; the score is the mean over classes of evidence / n.

H-score, NLEEP and GBC live beside this module (``h_score.py``, ``nleep.py``, ``gbc.py``).

All maths in float64. Every function starts with the shared input check; fewer than two classes,
constant features and NaN/Inf raise ``ValueError``.
"""

from __future__ import annotations

from typing import Any

import numpy as np

from zoorank.metrics._checks import check_labelled as _check_inputs
from zoorank.metrics.registry import register

__all__ = ["logme"]

_EPS64 = np.finfo(np.float64).eps


def _rank_cutoff(values: np.ndarray, shape: tuple[int, int]) -> float:
    """Singular values below this are numerical zeros (numpy's ``matrix_rank`` tolerance)."""
    return float(values.max(initial=0.0)) * max(shape) * _EPS64


# --------------------------------------------------------------------------------------------
# LogME
# --------------------------------------------------------------------------------------------


@register("logme", +1, "labels", few_label=True)
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
