"""Collapse diagnostics: numerical rank and the share of exactly repeated rows.

Not ranking metrics (``primary=False``): the config name ``collapse`` asks for both. Moved here from
``zoorank.metrics.suite`` so that their registrations sit beside them and the registry imports no
module that imports it back.
"""

from __future__ import annotations

from typing import Any

import numpy as np

from zoorank.metrics._checks import check_array
from zoorank.metrics.registry import fixed, register

__all__ = ["duplicate_fraction", "numerical_rank"]


def numerical_rank(Z: Any) -> int:
    """Number of singular values of Z above ``max(σ) · max(n, d) · eps(float32)``.

    NumPy's ``matrix_rank`` tolerance at float32 precision (embeddings are stored as float32).
    Singular values come from the eigenvalues of the smaller Gram matrix in float64, accurate far
    below that tolerance. 0 for an all-zero Z, 1 for constant non-zero rows; higher = less collapsed.
    Cost O(n · d · min(n, d)).
    """
    X = check_array(Z, "Z")
    n, d = X.shape
    G = X.T @ X if n >= d else X @ X.T
    sigma = np.sqrt(np.clip(np.linalg.eigvalsh(G), 0.0, None))
    top = float(sigma.max())
    if top == 0.0:
        return 0
    return int(np.count_nonzero(sigma > top * max(n, d) * np.finfo(np.float32).eps))


register(
    "numerical_rank", +1, "clean", config_name="collapse", primary=False, settings=fixed(),
    notes={"tol": "max(sigma)*max(n,d)*eps(float32)"},
    description="numerical rank (collapse diagnostic)",
)(numerical_rank)


def duplicate_fraction(Z: Any) -> float:
    """Share of rows that exactly repeat an earlier row: 1 − (distinct rows) / n.

    0 for distinct rows, (n − 1)/n for a constant embedding; lower is better. Exact equality of the
    float32 values (a collapsed model repeats rows bit for bit). Cost O(n · d + n log n).
    """
    X = np.ascontiguousarray(check_array(Z, "Z", dtype=np.float32))
    X = X + np.float32(0.0)  # -0.0 and 0.0 compare equal but differ in bytes
    rows = X.view(np.dtype((np.void, X.dtype.itemsize * X.shape[1]))).ravel()
    return float(1.0 - np.unique(rows).size / X.shape[0])


register(
    "duplicate_fraction", -1, "clean", config_name="collapse", primary=False, settings=fixed(),
    notes={"exact": True}, description="share of exactly repeated rows (collapse diagnostic)",
)(duplicate_fraction)
