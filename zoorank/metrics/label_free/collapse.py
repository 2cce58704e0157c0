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

__all__ = ["collapse_flags", "duplicate_fraction", "numerical_rank"]

#: ``collapsed`` when at least this share of the clean rows repeats an earlier row exactly ...
COLLAPSED_DUPLICATE_SHARE = 0.5
#: ... or the numerical rank is at most this (constant rows: 1, all zero: 0).
COLLAPSED_MAX_RANK = 1
#: ``low_rank`` when RankMe is below max(2, this share of min(n, d)) (the leaderboard's
#: ``dim_collapsed`` uses the same share: :class:`zoorank.stats.health.HealthThresholds`).
LOW_RANK_FRACTION = 0.01


@register(
    "numerical_rank", +1, "clean", config_name="collapse", primary=False, settings=fixed(),
    notes={"tol": "max(sigma)*max(n,d)*eps(float32)"},
    description="numerical rank (collapse diagnostic)", width_sensitive=True,
)
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


@register(
    "duplicate_fraction", -1, "clean", config_name="collapse", primary=False, settings=fixed(),
    notes={"exact": True}, description="share of exactly repeated rows (collapse diagnostic)",
)
def duplicate_fraction(Z: Any) -> float:
    """Share of rows that exactly repeat an earlier row: 1 − (distinct rows) / n.

    0 for distinct rows, (n − 1)/n for a constant embedding; lower is better. Exact equality of the
    float32 values (a collapsed model repeats rows bit for bit). Cost O(n · d + n log n).
    """
    X = np.ascontiguousarray(check_array(Z, "Z", dtype=np.float32))
    X = X + np.float32(0.0)  # -0.0 and 0.0 compare equal but differ in bytes
    rows = X.view(np.dtype((np.void, X.dtype.itemsize * X.shape[1]))).ravel()
    return float(1.0 - np.unique(rows).size / X.shape[0])


def collapse_flags(numerical_rank: float, duplicate_fraction: float, rankme: float, n: int,
                   dim: int) -> dict[str, bool]:
    """``collapsed`` and ``low_rank`` of one model from its collapse diagnostics and RankMe.

    ``collapsed``: ``duplicate_fraction ≥`` :data:`COLLAPSED_DUPLICATE_SHARE` or
    ``numerical_rank ≤`` :data:`COLLAPSED_MAX_RANK`; ``low_rank``: a finite ``rankme`` below
    ``max(2, LOW_RANK_FRACTION · min(n, dim))``. A NaN diagnostic flags nothing. Cost O(1).
    """
    collapsed = bool(duplicate_fraction >= COLLAPSED_DUPLICATE_SHARE
                     or numerical_rank <= COLLAPSED_MAX_RANK)
    low_rank = bool(np.isfinite(rankme)
                    and rankme < max(2.0, LOW_RANK_FRACTION * min(n, dim)))
    return {"collapsed": collapsed, "low_rank": low_rank}
