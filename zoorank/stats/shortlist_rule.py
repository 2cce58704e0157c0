"""The shortlist rule: which models of a board the user reads first. Pure functions.

A rule is a mapping (JSON-ready, as the calibration record stores it) of one of three kinds:

* ``{"kind": "rank_count", "k": K}`` — the first K models;
* ``{"kind": "rank_fraction", "fraction": F}`` — the first ⌈F · n⌉ of the n ranked models;
* ``{"kind": "band", "width": W, "units": U}`` — every model whose value is within W of the
  leader's, in units ``"pp"`` (percentage points of a value in [0, 1]: an accuracy estimate),
  ``"sd"`` (standard deviations of the ranked models' values, ``ddof=0``) or ``"relative"``
  (a share of the leader's absolute value);

each with an optional ``"max_fraction"`` (default :data:`MAX_FRACTION`): the shortlist never holds
more than ``max(1, ⌊max_fraction · n⌋)`` models.

Conventions: ``scores`` are oriented, higher = better (a rank r enters as −r); NaN marks a model
that is not ranked (unranked, or kept out by a health flag) and is never shortlisted; ``n`` counts
the finite scores. Ties: the rank rules keep every model tied with the last one they reach, and the
band keeps every model at least as good as the leader minus the width; when that exceeds the cap,
models are kept in the input's order (the board's order) up to it. The leader (a finite maximum) is
always kept. Cost O(n log n).
"""

from __future__ import annotations

import math
from collections.abc import Mapping
from typing import Any

import numpy as np

__all__ = ["BAND_UNITS", "MAX_FRACTION", "RULE_KINDS", "check_rule", "holds_near_best",
           "near_best", "shortlist_mask"]

#: the shortlist never holds more than this share of the ranked models (at least one model).
MAX_FRACTION = 0.5
RULE_KINDS = ("rank_count", "rank_fraction", "band")
BAND_UNITS = ("pp", "sd", "relative")


def _vector(x: Any, name: str) -> np.ndarray:
    arr = np.asarray(x, dtype=np.float64)
    if arr.ndim != 1:
        raise ValueError(f"{name} must be 1-D (one value per model), got shape {arr.shape}")
    if np.isinf(arr).any():
        raise ValueError(f"{name} contains Inf (NaN marks a model that is not ranked)")
    return arr


def check_rule(rule: Mapping[str, Any]) -> dict[str, Any]:
    """``rule`` validated, with ``max_fraction`` filled in; ``ValueError`` naming the problem."""
    kind = rule.get("kind")
    out: dict[str, Any] = {"kind": kind}
    if kind == "rank_count":
        k = rule.get("k")
        if not isinstance(k, (int, np.integer)) or isinstance(k, bool) or k < 1:
            raise ValueError(f"rule rank_count: k must be an integer >= 1, got {k!r}")
        out["k"] = int(k)
    elif kind == "rank_fraction":
        f = rule.get("fraction")
        if not isinstance(f, (int, float)) or isinstance(f, bool) or not 0 < f <= 1:
            raise ValueError(f"rule rank_fraction: fraction must be in (0, 1], got {f!r}")
        out["fraction"] = float(f)
    elif kind == "band":
        w, units = rule.get("width"), rule.get("units")
        if not isinstance(w, (int, float)) or isinstance(w, bool) or not w >= 0 or math.isinf(w):
            raise ValueError(f"rule band: width must be a finite number >= 0, got {w!r}")
        if units not in BAND_UNITS:
            raise ValueError(f"rule band: units must be one of {BAND_UNITS}, got {units!r}")
        out["width"], out["units"] = float(w), units
    else:
        raise ValueError(f"rule: unknown kind {kind!r}; kinds: {RULE_KINDS}")
    cap = rule.get("max_fraction", MAX_FRACTION)
    if not isinstance(cap, (int, float)) or isinstance(cap, bool) or not 0 < cap <= 1:
        raise ValueError(f"rule: max_fraction must be in (0, 1], got {cap!r}")
    out["max_fraction"] = float(cap)
    return out


def shortlist_mask(scores: Any, rule: Mapping[str, Any]) -> np.ndarray:
    """Boolean mask of the models the rule shortlists.

    Parameters
    ----------
    scores : array-like of shape (n_models,)
        Oriented scores, higher = better (pass ``-rank`` for a board's ranks); NaN = not ranked.
    rule : mapping
        A rule of the module docstring (``rank_count``, ``rank_fraction`` or ``band``).

    Returns
    -------
    numpy.ndarray of bool, shape (n_models,)
        True for a shortlisted model: at least one when any score is finite, at most
        ``max(1, ⌊max_fraction · n⌋)`` for n finite scores; all False when none is.

    Notes
    -----
    Ties at the cut-off are all kept, up to the cap; beyond it, earlier models in the input's order
    are kept. A band in ``"pp"`` reads the scores as accuracies in [0, 1] (width 2.0 keeps models
    within 0.02 of the leader); ``"sd"`` scales the width by the standard deviation (``ddof=0``) of
    the finite scores, so it is invariant to adding a constant to, or scaling, every score;
    ``"relative"`` by the leader's absolute value. Cost O(n log n).
    """
    s = _vector(scores, "scores")
    r = check_rule(rule)
    ok = np.isfinite(s)
    n = int(ok.sum())
    mask = np.zeros(s.shape, dtype=bool)
    if n == 0:
        return mask
    leader = float(s[ok].max())
    if r["kind"] == "band":
        scale = {"pp": 0.01, "sd": float(np.std(s[ok])), "relative": abs(leader)}[r["units"]]
        # a value exactly on the band's edge is inside it (1e-9 absorbs the rounding of
        # leader − value, e.g. 0.85 − 0.83 > 0.02 in binary floating point)
        slack = 1e-9 * max(1.0, abs(leader))
        mask = ok & (leader - np.where(ok, s, leader) <= r["width"] * scale + slack)
    else:
        size = r["k"] if r["kind"] == "rank_count" else math.ceil(r["fraction"] * n - 1e-9)
        size = min(max(size, 1), n)
        # the size-th best value; every model at least as good (its ties) is kept
        cut = np.sort(s[ok])[::-1][size - 1]
        mask = ok & (np.where(ok, s, -np.inf) >= cut)
    cap = max(1, math.floor(r["max_fraction"] * n + 1e-9))
    if mask.sum() > cap:
        # keep the best first; equal scores in the input's order (stable)
        order = np.argsort(-np.where(mask, s, -np.inf), kind="stable")
        keep = np.zeros_like(mask)
        keep[order[:cap]] = True
        mask = keep
    return mask


def near_best(truth: Any, tolerance_pp: float = 0.5) -> np.ndarray:
    """Mask of the models whose accuracy (``truth``, in [0, 1]; NaN = unknown) is within
    ``tolerance_pp`` percentage points of the best known accuracy."""
    t = _vector(truth, "truth")
    ok = np.isfinite(t)
    if not ok.any():
        return np.zeros(t.shape, dtype=bool)
    best = float(t[ok].max())
    return ok & (100.0 * (best - np.where(ok, t, -np.inf)) <= tolerance_pp + 1e-9)


def holds_near_best(mask: Any, truth: Any, tolerance_pp: float = 0.5) -> bool:
    """Whether the shortlist ``mask`` holds a model within ``tolerance_pp`` pp of the best
    accuracy of the whole zoo (``truth`` over every model, shortlisted or not)."""
    m = np.asarray(mask, dtype=bool)
    nb = near_best(truth, tolerance_pp)
    if m.shape != nb.shape:
        raise ValueError(f"mask and truth differ in shape: {m.shape} vs {nb.shape}")
    return bool((m & nb).any())
