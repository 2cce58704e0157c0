"""NCTI: the terms against an explicit PCA and shrunk LDA, and their zoo-relative combination."""

from __future__ import annotations

import math

import numpy as np
import scipy.linalg
from few_label_cases import softmax_rows

from zoorank.metrics import (
    ncti,
    ncti_combine,
)


def reference_ncti_terms(X, y, n_components=64, top=32):
    """NCTI's terms from explicit algebra: PCA by SVD of the centred X, scikit-learn's shrunk
    'eigen' LDA written out (per-class shrunk covariances weighted by priors; projection on the
    top C − 1 generalised eigenvectors of (S_t − S_w, S_w); posteriors from Σ⁻¹)."""
    n, d = X.shape
    p = min(n_components, n, d)
    Xc = X - X.mean(axis=0)
    U, S, _ = np.linalg.svd(Xc, full_matrices=False)
    P = U[:, :p] * S[:p]
    variances = S[:p] ** 2 / (n - 1)
    s = max(math.exp(-variances[:top].sum()), 1e-10)
    assert s > 1e-10, "the reference covers the shrunk ('eigen') branch"
    classes = list(np.unique(y))
    C = len(classes)

    def shrunk(A):
        cov = np.cov(A.T, bias=True)
        return (1 - s) * cov + s * np.trace(cov) / p * np.eye(p)

    priors = np.array([np.mean(y == c) for c in classes])
    means = np.stack([P[y == c].mean(axis=0) for c in classes])
    Sw = sum(pr * shrunk(P[y == c]) for pr, c in zip(priors, classes))
    St = shrunk(P)
    evals, V = scipy.linalg.eigh(St - Sw, Sw)
    V = V[:, np.argsort(evals)[::-1]]
    low = P @ V[:, : min(C - 1, p)]
    low = low - low.mean(axis=0)
    seli = np.linalg.svd(low, compute_uv=False).sum()
    coef = means @ np.linalg.inv(Sw)
    proba = softmax_rows(P @ coef.T - 0.5 * np.diag(means @ coef.T) + np.log(priors))
    codes = np.array([classes.index(v) for v in y])
    ncc = np.mean(proba[np.arange(n), codes])
    vc = math.log(sum(np.linalg.svd(proba[codes == c], compute_uv=False).sum()
                      for c in range(C)))
    return np.array([seli, ncc, vc])


def test_ncti_terms_match_the_explicit_pca_and_shrunk_lda(pixels600):
    X, y = pixels600
    Z = 0.2 * X  # top-32 PCA variance ≈ 0.1: the shrunk branch
    np.testing.assert_allclose(ncti(Z, y), reference_ncti_terms(Z, y), rtol=1e-6)
    Zs, ys = Z[:200, :40], y[:200]  # fewer dimensions than the PCA asks for
    np.testing.assert_allclose(ncti(Zs, ys), reference_ncti_terms(Zs, ys), rtol=1e-6)


def test_ncti_combine_is_min_max_seli_plus_ncc_minus_vc():
    # hand-computed: minmax(seli) = [0, 1, .5], minmax(ncc) = [1, 0, .5], minmax(vc) = [0, .5, 1]
    out = ncti_combine([1.0, 3.0, 2.0], [0.9, 0.5, 0.7], [2.0, 3.0, 4.0])
    np.testing.assert_allclose(out, [1.0, 0.5, 0.0], atol=1e-12)
