"""Health of one model's embeddings on one dataset: statistics and the flags shown beside its rank.

Pure functions (no I/O, no Ray). SCORE computes :func:`embedding_health` on each model's clean
embeddings; RANK turns the statistics and the model's failed metrics into flags with
:func:`health_flags`. Flags (a model may carry several; the leaderboard joins them with ``,``):

* ``non_finite`` — some rows hold NaN or ±Inf (share in ``non_finite_fraction``);
* ``collapsed`` — the embeddings are nearly constant: the RMS distance to the mean is below
  ``spread_tol`` times the RMS norm (``relative_spread``);
* ``dim_collapsed`` — not collapsed, but the effective rank of the *centred* embeddings (RankMe's
  exp-entropy of the singular values) is below 1.5 or below ``rank_fraction`` of min(n, width);
* ``duplicates`` — more than ``duplicate_tol`` of the rows repeat an earlier row exactly;
* ``failed:<metric>`` — a metric of the model has no value (its row's error says why).

:data:`BLOCKING` flags keep a model out of the top set (:mod:`zoorank.stats.uncertainty`); the
others are shown as badges but do not exclude it. A failed *primary* metric gives no rank at all.
"""

from __future__ import annotations

from collections.abc import Iterable, Mapping
from dataclasses import dataclass
from typing import Any

import numpy as np

__all__ = ["BLOCKING", "HealthThresholds", "embedding_health", "health_flags"]

#: flags that keep a model out of the top set.
BLOCKING: frozenset[str] = frozenset({"non_finite", "collapsed", "dim_collapsed"})


@dataclass(frozen=True)
class HealthThresholds:
    """spread_tol: relative spread below which a model is ``collapsed``; rank_fraction: effective
    rank / min(n, width) below which it is ``dim_collapsed``; duplicate_tol: share of repeated rows
    above which it is flagged ``duplicates``."""

    spread_tol: float = 1e-3
    rank_fraction: float = 0.01
    duplicate_tol: float = 0.1


def _effective_rank(X: np.ndarray) -> float:
    """exp(entropy) of the normalised singular values of X (RankMe, Garrido et al. 2023, eps 1e-7)."""
    n, d = X.shape
    G = X.T @ X if n >= d else X @ X.T
    sigma = np.sqrt(np.clip(np.linalg.eigvalsh(G), 0.0, None))
    total = sigma.sum()
    if total <= 0:
        return 0.0
    p = sigma / total + 1e-7
    return float(np.exp(-np.sum(p * np.log(p))))


def embedding_health(Z: Any) -> dict[str, float]:
    """Health statistics of an (n, d) embedding matrix.

    Returns
    -------
    dict with ``n``, ``dim``, ``non_finite_fraction`` (rows with a NaN/Inf), and over the finite
    rows ``relative_spread`` = sqrt(mean ‖z − z̄‖²) / sqrt(mean ‖z‖²) (0 for constant rows, NaN
    when every row is zero or none is finite), ``effective_rank`` of the centred rows, and
    ``duplicate_fraction`` = 1 − distinct rows / n. Cost O(n · d · min(n, d)).
    """
    X = np.asarray(Z, dtype=np.float64)
    if X.ndim != 2:
        raise ValueError(f"Z must be (n, d), got shape {X.shape}")
    n, d = X.shape
    finite_rows = np.isfinite(X).all(axis=1)
    out: dict[str, float] = {"n": float(n), "dim": float(d),
                             "non_finite_fraction": float(1.0 - finite_rows.mean()) if n else 0.0,
                             "relative_spread": float("nan"), "effective_rank": float("nan"),
                             "duplicate_fraction": float("nan")}
    X = X[finite_rows]
    if X.shape[0] == 0:
        return out
    centred = X - X.mean(axis=0)
    norm = np.sqrt(np.mean(np.sum(X * X, axis=1)))
    spread = np.sqrt(np.mean(np.sum(centred * centred, axis=1)))
    out["relative_spread"] = float(spread / norm) if norm > 0 else float("nan")
    out["effective_rank"] = _effective_rank(centred)
    rows = np.ascontiguousarray(X.astype(np.float32) + np.float32(0.0))
    keys = rows.view(np.dtype((np.void, rows.dtype.itemsize * d))).ravel()
    out["duplicate_fraction"] = float(1.0 - np.unique(keys).size / X.shape[0])
    return out


def health_flags(
    stats: Mapping[str, float] | None,
    failed_metrics: Iterable[str] = (),
    thresholds: HealthThresholds = HealthThresholds(),
) -> list[str]:
    """The flags of one (model, dataset) from :func:`embedding_health` and its failed metrics."""
    flags: list[str] = []
    if stats:
        nf = stats.get("non_finite_fraction", 0.0)
        spread = stats.get("relative_spread", float("nan"))
        rank = stats.get("effective_rank", float("nan"))
        dup = stats.get("duplicate_fraction", float("nan"))
        width = min(stats.get("n", 0.0), stats.get("dim", 0.0))
        if nf and nf > 0:
            flags.append("non_finite")
        collapsed = (np.isfinite(spread) and spread < thresholds.spread_tol) or (
            not np.isfinite(spread) and nf < 1 and stats.get("n", 0) > 0)
        if collapsed:
            flags.append("collapsed")
        elif np.isfinite(rank) and width >= 2 and rank < max(1.5, thresholds.rank_fraction * width):
            flags.append("dim_collapsed")
        if np.isfinite(dup) and dup > thresholds.duplicate_tol and "collapsed" not in flags:
            flags.append("duplicates")
    flags += [f"failed:{m}" for m in sorted(set(failed_metrics))]
    return flags
