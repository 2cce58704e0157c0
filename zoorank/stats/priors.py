"""Priors and confounds: what a model's size, width or a published figure already says about its
rank. Pure functions on per-model vectors; no I/O, no Ray.

A **prior** is a number known about a model without looking at any target data: its parameter
count and embedding width (recorded by EMBED), or a value its zoo entry carries under ``prior:``
(e.g. ``imagenet_top1``, ``gflops``). Every prior is read with direction +1 (higher is better), the
static baseline of "How NOT to benchmark your SITE metric" (Singh, Hess & Vanschoren, 2025), where
ranking the 11 SFDA models by ImageNet top-1 alone beats LogME and NLEEP.

A metric is **confounded** by a prior on a dataset when ``|τ-b|`` between the metric's oriented
values and the prior, over the models that have both, is at least :data:`CONFOUND_TAU`, with at
least :data:`CONFOUND_MIN_MODELS` such models. The threshold is a convention: |τ| = 0.8 means at
least 90 % of the model pairs are ordered the same way (or the opposite way) by both, so the
metric's order is then largely the prior's. τ-b is ``scipy.stats.kendalltau`` (O(n log n) per
pair of vectors, no n × n array over models).
"""

from __future__ import annotations

from collections.abc import Mapping
from typing import Any

import numpy as np

from zoorank.stats.agreement import kendall_tau
from zoorank.stats.ranks import check_direction, model_vector

__all__ = [
    "CONFOUND_MIN_MODELS",
    "CONFOUND_TAU",
    "PARAMS",
    "PRIOR_PREFIX",
    "WIDTH",
    "confounds",
    "is_prior_column",
    "prior_tau",
]

#: |Kendall τ-b| at or above which a metric's order is said to be explained by a prior.
CONFOUND_TAU = 0.8
#: fewer models than this never raise a confound warning (with 4 models one swap moves τ by 1/3).
CONFOUND_MIN_MODELS = 5
#: leaderboard columns of the priors zoorank records itself.
PARAMS, WIDTH = "param_count", "width"
#: leaderboard columns of the zoo entries' ``prior:`` values are ``prior/<name>``.
PRIOR_PREFIX = "prior/"


def is_prior_column(column: str) -> bool:
    """Whether a leaderboard column holds a prior (``params``, ``width`` or ``prior/<name>``)."""
    return column in (PARAMS, WIDTH) or column.startswith(PRIOR_PREFIX)


def prior_tau(metric_values: Any, prior_values: Any, direction: int = 1) -> tuple[float, int]:
    """(Kendall τ-b, n) between ``direction * metric`` and a prior over the models where both are
    finite; τ is NaN when fewer than 2 such models or either side is constant. O(n log n)."""
    m, p = model_vector(metric_values, "metric_values"), model_vector(prior_values, "prior_values")
    if m.shape != p.shape:
        raise ValueError(f"metric_values and prior_values differ in length: {m.shape} vs {p.shape}")
    direction = check_direction(direction)
    keep = np.isfinite(m) & np.isfinite(p)
    return kendall_tau(direction * m[keep], p[keep]), int(keep.sum())


def confounds(
    metrics: Mapping[str, tuple[np.ndarray, int]],
    priors: Mapping[str, np.ndarray],
    threshold: float = CONFOUND_TAU,
    min_models: int = CONFOUND_MIN_MODELS,
) -> list[dict[str, Any]]:
    """Every (metric, prior) pair whose order agrees (or disagrees) with |τ-b| ≥ ``threshold``
    over at least ``min_models`` models.

    ``metrics``: name → (values, direction), aligned with every vector of ``priors`` (name →
    values). Returns ``{metric, prior, tau, n}`` dicts in the order given. Cost O(M · P · n log n)
    for M metrics and P priors.
    """
    if not 0 < threshold <= 1:
        raise ValueError(f"threshold must be in (0, 1], got {threshold}")
    out = []
    for metric, (values, direction) in metrics.items():
        for prior, pv in priors.items():
            tau, n = prior_tau(values, pv, direction)
            if n >= min_models and np.isfinite(tau) and abs(tau) >= threshold:
                out.append({"metric": metric, "prior": prior, "tau": tau, "n": n})
    return out
