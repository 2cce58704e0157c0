"""NCTI (Wang et al., ICCV 2023, "How Far Pre-trained Models Are from Neural Collapse on the Target
Dataset Informs their Transferability"): three neural-collapse terms of one model, combined over
the zoo as ``minmax(S_seli) + minmax(S_ncc) − minmax(S_vc)`` by RANK (:func:`ncti_combine`).

All maths in float64; the input passes the few-label input check ``_checks.check_labelled``.
"""

from __future__ import annotations

import math
from typing import Any

import numpy as np

from zoorank.metrics._checks import check_labelled
from zoorank.metrics.few_label.sfda_etran import minmax_across_zoo
from zoorank.metrics.registry import register

__all__ = ["ncti", "ncti_combine"]


def ncti_combine(seli: Any, ncc: Any, vc: Any) -> np.ndarray:
    """NCTI over a zoo: ``minmax(S_seli) + minmax(S_ncc) − minmax(S_vc)`` (Wang et al. 2023).

    One value per model in [−1, 2] (NaN where a term is NaN); higher is better. O(m) for m models.
    """
    return minmax_across_zoo(seli) + minmax_across_zoo(ncc) - minmax_across_zoo(vc)


@register("ncti", +1, "labels", few_label=True, terms=("seli", "ncc", "vc"),
         zoo_relative=ncti_combine)
def ncti(Z: Any, y: Any, n_components: int = 64, top_components: int = 32,
         seed: int = 0) -> np.ndarray:
    """NCTI's three raw neural-collapse terms ``[S_seli, S_ncc, S_vc]`` of one model.

    Convention (Wang et al. 2023, BUserName/NCTI):

    1. PCA to ``min(n_components, n, d)`` dimensions (64 in the paper);
    2. a linear discriminant (``sklearn`` ``LinearDiscriminantAnalysis``) with shrinkage
       ``s = exp(−Σ`` of the ``top_components`` (32) largest PCA variances``)``; when s reaches
       1e-10 the unshrunk ``svd`` solver, else the ``eigen`` solver with shrinkage s;
    3. ``S_seli``: nuclear norm of the centred LDA projection (n × min(C − 1, p)), large when the
       class means span a simplex (the SELI geometry);
    4. ``S_ncc``: mean true-class posterior ``(1/n) Σ_i p(y_i | x_i)`` of that discriminant;
    5. ``S_vc``: ``log Σ_c ‖P_c‖_*``, the nuclear norms of each class's posterior block (n_c × C):
       small when a class's predictions are one direction (within-class variability collapse).

    Over a zoo, :func:`ncti_combine` gives ``minmax(S_seli) + minmax(S_ncc) − minmax(S_vc)``
    (RANK does it: the normalisation is zoo-relative).

    Returns
    -------
    numpy.ndarray, shape (3,)
        ``[S_seli ≥ 0, S_ncc in (0, 1], S_vc]``: higher is better for the first two, **lower** for
        ``S_vc``. Cost O(n·d·p) for the PCA plus O(n·p²) for the discriminant.
    """
    from sklearn.decomposition import PCA
    from sklearn.discriminant_analysis import LinearDiscriminantAnalysis

    X, codes, n_classes = check_labelled(Z, y)
    n, d = X.shape
    p = max(1, min(n_components, n, d))
    pca = PCA(n_components=p, svd_solver="full", random_state=seed)
    P = pca.fit_transform(X)
    s = max(math.exp(-float(np.sum(pca.explained_variance_[:top_components]))), 1e-10)
    lda = (LinearDiscriminantAnalysis(solver="svd") if s == 1e-10
           else LinearDiscriminantAnalysis(solver="eigen", shrinkage=s))
    low = lda.fit_transform(P, codes)
    low = low - low.mean(axis=0, keepdims=True)
    seli = float(np.linalg.norm(low, ord="nuc"))
    proba = lda.predict_proba(P)
    ncc = float(np.mean(proba[np.arange(n), codes]))
    vc = math.log(sum(float(np.linalg.norm(proba[codes == c], ord="nuc"))
                      for c in range(n_classes)))
    return np.array([seli, ncc, vc])


