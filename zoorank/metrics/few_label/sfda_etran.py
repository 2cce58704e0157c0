"""Transferability scores of the discriminant-analysis generation: SFDA and ETran (NCTI, of the same
generation, is :mod:`zoorank.metrics.few_label.ncti`).

* **ETran's energy** (Gholami et al., ICCV 2023, "ETran: Energy-Based Transferability Estimation"):
  per sample the free energy ``logsumexp_j z_j`` of its features, averaged over the 0.5% of
  samples with the lowest energy. **Label-free**: a per-model metric of SCORE and a Tune objective.
* **ETran** (same paper): the zoo-relative sum ``0.85·minmax(S_lda) + 0.15·minmax(S_energy)``, with
  ``S_lda`` the mean probability of the true class under a shrunk linear discriminant.
* **SFDA** (Shao et al., ECCV 2022, "Not All Models Are Equal: Predicting Model Transferability in
  a Self-challenging Fisher Space"): a regularised Fisher discriminant, its self-challenging
  ConfMix of hard samples towards the other classes, and the mean true-class probability of a
  second discriminant on the mixed features.
* **NCTI** (Wang et al., ICCV 2023, "How Far Pre-trained Models Are from Neural Collapse on the
  Target Dataset Informs their Transferability"): three neural-collapse terms, combined
  zoo-relatively as ``minmax(S_seli) + minmax(S_ncc) − minmax(S_vc)``.

ETran and NCTI normalise each term by its minimum and maximum **over the zoo**; a per-model task
cannot do that. Their functions here return the raw per-model terms (a NumPy array, in the order of
the registration's ``terms``), the budget cells store one row per term, and RANK combines them over
the models of a dataset with :func:`etran_combine` / :func:`ncti_combine`
(``zoorank.oracle.budget.zoo_relative_cells``). Higher is better for every score here.

All maths in float64; inputs pass the few-label input check ``_checks.check_labelled``.
"""

from __future__ import annotations

import math
import warnings
from typing import Any, NamedTuple

import numpy as np
from scipy.special import softmax

from zoorank.metrics._checks import (
    DegenerateInputWarning,
    check_array,
    check_labelled,
    warn_degenerate,
)
from zoorank.metrics.registry import register

__all__ = [
    "etran",
    "etran_combine",
    "etran_energy",
    "minmax_across_zoo",
    "sfda",
]

#: ETran's share of the energy term in the combined score (the LDA term has the rest).
ETRAN_ENERGY_WEIGHT = 0.15
#: SFDA's smallest shrinkage (``max(exp(−5·λ_max(S_w)), 1e-10)``); at this value a within-class
#: scatter without full rank is barely regularised, which is where SFDA saturates.
SFDA_MIN_SHRINKAGE = 1e-10
#: an SFDA value this close to 1 with a rank-deficient within-class scatter is flagged as saturated.
SFDA_SATURATION_GAP = 1e-3


# --------------------------------------------------------------------------------------------
# shared discriminant
# --------------------------------------------------------------------------------------------


class _Scatter(NamedTuple):
    """Class means and the within-class covariance S_w = RᵀR/n in the eigenbasis of its range."""

    means: np.ndarray  # (C, d)
    eigenvalues: np.ndarray  # (r,) the non-zero eigenvalues of S_w
    basis: np.ndarray  # (r, d) their orthonormal eigenvectors (rows)
    priors: np.ndarray  # (C,)


def _scatter(X: np.ndarray, codes: np.ndarray, n_classes: int) -> _Scatter:
    """S_w (1/n_c class covariances weighted by the priors) in the eigenbasis of its range.

    ``S_w = RᵀR/n`` with ``R = X − μ_{y}``. Its eigenpairs come from the smaller Gram matrix: the
    d × d ``RᵀR`` when n > d, else the n × n ``RRᵀ = U Λ Uᵀ`` with eigenvectors ``UᵀR/√λ``
    (a thin SVD of R costs several times more at n = 500, d = 2048). Eigenvalues below
    ``λ_max·max(n, d)·ε`` are zeros. Cost O(n·d·min(n, d)).
    """
    n, d = X.shape
    counts = np.bincount(codes, minlength=n_classes).astype(np.float64)
    means = np.zeros((n_classes, d))
    np.add.at(means, codes, X)
    means /= counts[:, None]
    R = X - means[codes]
    lam, vecs = np.linalg.eigh(R.T @ R if n > d else R @ R.T)
    keep = lam > float(lam.max(initial=0.0)) * max(n, d) * np.finfo(np.float64).eps
    lam = lam[keep]
    basis = vecs[:, keep].T if n > d else (vecs[:, keep].T @ R) / np.sqrt(lam)[:, None]
    return _Scatter(means, lam / n, basis, counts / n)


def _adaptive_shrinkage(scatter: _Scatter) -> float:
    """SFDA's ``max(exp(−5·λ_max(S_w)), 1e-10)`` with the exact largest eigenvalue.

    (The reference code estimates λ_max with three power iterations; the exact value differs from
    it only where those have not converged.)
    """
    lam = float(scatter.eigenvalues.max(initial=0.0))
    return max(math.exp(-5.0 * lam), SFDA_MIN_SHRINKAGE)


def _lda_proba(X: np.ndarray, codes: np.ndarray, n_classes: int, shrinkage: float,
               scatter: _Scatter | None = None) -> np.ndarray:
    """p(c | x_i) of the linear discriminant with the shrunk within-class covariance.

    ``Σ = (1 − s)·S_w + s·(tr S_w / d)·I``; logits ``xᵀΣ⁻¹μ_c − ½μ_cᵀΣ⁻¹μ_c + log π_c``. This is
    SFDA's classifier: its Fisher projection keeps all d generalised eigenvectors V of
    ``(S_b, Σ)``, normalised ``VᵀΣV = I``, so ``V Vᵀ = Σ⁻¹``. Σ⁻¹ is applied in S_w's eigenbasis
    B (``Σ⁻¹ = B diag(1/((1 − s)λ + a)) Bᵀ + (I − BBᵀ)/a``, ``a = s·tr S_w/d``): the part of a
    class mean outside S_w's range is divided by a, which is where SFDA saturates.
    Cost O(n·d·min(n, d)).
    """
    sc = _scatter(X, codes, n_classes) if scatter is None else scatter
    d = X.shape[1]
    a = shrinkage * float(sc.eigenvalues.sum()) / d
    if a <= 0:
        raise ValueError("every class is a single point (zero within-class scatter): the "
                         "discriminant is undefined")
    along = sc.means @ sc.basis.T  # (C, r) class means in S_w's eigenbasis
    outside = sc.means - along @ sc.basis  # (C, d) their part outside S_w's range
    inv_along = along / ((1.0 - shrinkage) * sc.eigenvalues + a)
    # logits = X Σ⁻¹ Mᵀ − ½ diag(M Σ⁻¹ Mᵀ) + log π, each product formed in the eigenbasis
    quad = np.einsum("cr,cr->c", along, inv_along) + np.einsum("cd,cd->c", outside, outside) / a
    logits = (X @ sc.basis.T) @ inv_along.T + (X @ outside.T) / a - 0.5 * quad
    return softmax(logits + np.log(sc.priors), axis=1)


def _rank_deficient(n: int, d: int, n_classes: int) -> bool:
    """Whether the within-class scatter cannot have full rank (its rank is at most n − C)."""
    return n - n_classes < d


# --------------------------------------------------------------------------------------------
# ETran's energy (label-free)
# --------------------------------------------------------------------------------------------


def etran_energy(Z: Any, fraction: float = 0.005) -> float:
    """ETran's energy score: mean ``logsumexp`` of the features over the lowest-energy samples.

    Each sample's energy is ``E(z) = log Σ_j exp(z_j)`` over the d features (the free energy of the
    features read as logits; Gholami et al. 2023, eq. 4, and their ``Energy_Score(X, 0.5, 'bot')``).
    The score is the mean over the ``max(1, ⌊fraction·n⌋)`` samples with the **lowest** energy
    (0.5% by default, the paper's). The paper reads these samples as the least in-distribution
    for the pretrained model: a model whose worst samples still have high energy transfers better.

    Parameters
    ----------
    Z : array-like or torch.Tensor, shape (n_samples, dim)
        Raw (not normalised) features, as the paper: the score depends on their scale.
    fraction : float in (0, 1], default 0.005
        Share of the samples averaged. The reference takes ``⌊0.005·n⌋`` (none below 200
        samples: NaN); zoorank takes at least one.

    Returns
    -------
    float
        **Higher is better.** Unbounded (``E(c·z)`` grows with c); a collapsed embedding (every
        row equal) returns its one energy with a :class:`DegenerateInputWarning` (SCORE and Tune
        treat it as collapsed through the registry's guard).

    Notes
    -----
    Cost O(n·d) plus O(n) for the selection.
    """
    X = check_array(Z, "Z", ndim=2)
    if not 0 < fraction <= 1:
        raise ValueError(f"fraction must be in (0, 1], got {fraction}")
    from scipy.special import logsumexp

    energy = logsumexp(X, axis=1)
    count = max(1, math.floor(fraction * X.shape[0]))
    lowest = np.partition(energy, count - 1)[:count]
    if X.shape[0] > 1 and not np.any(np.ptp(X, axis=0) > 0):
        warn_degenerate("etran_energy: every row of Z is equal (a collapsed embedding)")
    return float(np.mean(lowest))


@register(
    "etran_energy", +1, "clean", tune_floor=-math.inf,
    settings=lambda o, seed: {"fraction": 0.005},
    guard=lambda details: "collapsed embedding: every row is equal" if details["collapsed"] else None,
    description="ETran energy: mean logsumexp of the features over the lowest 0.5% of samples "
                "(Gholami 2023; label-free, raw features)", default_rank=14,
)
def _etran_energy_metric(Z: Any, fraction: float = 0.005) -> tuple[float, dict[str, Any]]:
    """:func:`etran_energy` with the collapse flag its guard reads."""
    X = np.asarray(Z)
    collapsed = X.shape[0] > 1 and not np.any(np.ptp(X, axis=0) > 0)
    with warnings.catch_warnings():
        warnings.simplefilter("ignore", DegenerateInputWarning)
        value = etran_energy(X, fraction=fraction)
    return value, {"collapsed": bool(collapsed),
                   "samples": max(1, math.floor(fraction * X.shape[0]))}


# --------------------------------------------------------------------------------------------
# SFDA
# --------------------------------------------------------------------------------------------


@register("sfda", +1, "labels", few_label=True)
def sfda(Z: Any, y: Any, shrinkage: float | None = None) -> float:
    """SFDA: mean true-class probability of a Fisher discriminant after self-challenging ConfMix.

    Convention (Shao et al. 2022, TencentARC/SFDA):

    1. a linear discriminant with the within-class covariance ``S_w`` (1/n_c class covariances
       weighted by the class priors) shrunk to ``(1 − s)·S_w + s·(tr S_w/d)·I``, with the
       adaptive ``s = max(exp(−5·λ_max(S_w)), 1e-10)``; its posteriors ``p(c | x_i)``;
    2. ConfMix: each sample moves towards the mean of the **other** classes' means,
       ``x_i ← q_i·x_i + (1 − q_i)·μ̄_{−y_i}``, with ``q_i`` the true-class entry of the
       softmax of the posteriors (the paper's "softened" probability);
    3. a second discriminant on the mixed features with the same ``s``; the score is
       ``(1/n) Σ_i p(y_i | x_i)`` (no log, as the paper).

    Parameters
    ----------
    Z : array-like or torch.Tensor, shape (n_samples, dim)
    y : array-like, shape (n_samples,)
        At least 2 classes.
    shrinkage : float in (0, 1], optional
        A fixed ``s`` instead of the adaptive one.

    Returns
    -------
    float
        In (0, 1]; **higher is better**.

    Notes
    -----
    **Saturation.** With fewer samples than features (``n − C < d``) ``S_w`` has no full rank,
    and when the features are large (λ_max(S_w) ≳ 4.6) the adaptive ``s`` is its floor 1e-10:
    the discriminant then separates the training samples perfectly whatever the labels, and
    every model scores ≈ 1.0. zoorank detects it (a value within 1e-3 of 1 with a rank-deficient
    ``S_w``) and warns with a :class:`DegenerateInputWarning` (the label-budget cell records it in
    ``params['warning']``); a fixed ``shrinkage=`` (or more labels than feature dimensions)
    avoids it. Cost O(n·d·min(n, d)) (two SVDs of the within-class residuals).
    """
    X, codes, n_classes = check_labelled(Z, y)
    n, d = X.shape
    scatter = _scatter(X, codes, n_classes)
    if shrinkage is None:
        s = _adaptive_shrinkage(scatter)
    else:
        if not 0 < shrinkage <= 1:
            raise ValueError(f"shrinkage must be in (0, 1], got {shrinkage}")
        s = float(shrinkage)
    soft = softmax(_lda_proba(X, codes, n_classes, s, scatter), axis=1)
    means = scatter.means
    outer = (means.sum(axis=0) - means) / (n_classes - 1)  # mean of the other classes' means
    q = soft[np.arange(n), codes][:, None]
    mixed = q * X + (1.0 - q) * outer[codes]
    proba = _lda_proba(mixed, codes, n_classes, s)
    value = float(np.mean(proba[np.arange(n), codes]))
    if value > 1.0 - SFDA_SATURATION_GAP and _rank_deficient(n, d, n_classes):
        warn_degenerate(f"sfda saturated ({value:.6f}): {n} samples, {n_classes} classes and "
                        f"{d} features leave the within-class scatter rank-deficient with "
                        f"shrinkage {s:.3g}; the value does not rank models")
    return value


# --------------------------------------------------------------------------------------------
# ETran (LDA + energy)
# --------------------------------------------------------------------------------------------


def minmax_across_zoo(values: Any) -> np.ndarray:
    """``(v − min)/(max − min)`` over the finite values of a zoo; NaN stays NaN.

    A term equal for every model (max = min) cannot order the zoo: it becomes 0 for every model
    (it adds nothing to the combined score). Cost O(m) for m models.
    """
    v = np.asarray(values, dtype=np.float64)
    finite = np.isfinite(v)
    out = np.full_like(v, np.nan)
    if not finite.any():
        return out
    low, high = float(v[finite].min()), float(v[finite].max())
    out[finite] = 0.0 if high == low else (v[finite] - low) / (high - low)
    return out


def etran_combine(lda: Any, energy: Any, energy_weight: float = ETRAN_ENERGY_WEIGHT) -> np.ndarray:
    """ETran over a zoo: ``(1 − w)·minmax(S_lda) + w·minmax(S_energy)``, w = 0.15 (the paper's).

    One value per model (NaN where a term is NaN); higher is better. O(m) for m models.
    """
    return ((1.0 - energy_weight) * minmax_across_zoo(lda)
            + energy_weight * minmax_across_zoo(energy))


@register("etran", +1, "labels", few_label=True, terms=("lda", "energy"),
         zoo_relative=etran_combine)
def etran(Z: Any, y: Any, fraction: float = 0.005) -> np.ndarray:
    """ETran's two raw terms ``[S_lda, S_energy]`` of one model (Gholami et al. 2023).

    * ``S_lda``: ``(1/n) Σ_i p(y_i | x_i)`` under the linear discriminant with SFDA's adaptively
      shrunk within-class covariance (the paper's LDA-projected classifier, i.e. the first stage
      of :func:`sfda` without ConfMix). The public code's ``eigh`` of the non-symmetric
      ``S_w⁻¹S_b`` turns Σ⁻¹ into the identity; zoorank follows the paper's projection.
    * ``S_energy``: :func:`etran_energy` with ``fraction``.

    The ETran score of a zoo is :func:`etran_combine` of these terms over its models (RANK does it:
    the normalisation is zoo-relative).

    Returns
    -------
    numpy.ndarray, shape (2,)
        ``[S_lda in (0, 1], S_energy]``; higher is better for both. Cost O(n·d·min(n, d)).
    """
    X, codes, n_classes = check_labelled(Z, y)
    scatter = _scatter(X, codes, n_classes)
    proba = _lda_proba(X, codes, n_classes, _adaptive_shrinkage(scatter), scatter)
    lda_term = float(np.mean(proba[np.arange(X.shape[0]), codes]))
    return np.array([lda_term, etran_energy(X, fraction=fraction)])


