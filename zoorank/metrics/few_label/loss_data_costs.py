"""The loss-data reducers (``specs/url_sdl_nc.md`` PART B; Whitney et al. 2020): surplus description
length (SDL), ε sample complexity (εSC) and the online code length (MDL), from a loss-data curve
(:mod:`zoorank.metrics.few_label.loss_data`). They are costs: **lower = better representation**.
"""

from __future__ import annotations

import math
from typing import Any, Literal

import numpy as np

from zoorank.metrics._checks import check_array, warn_degenerate
from zoorank.metrics.registry import register

__all__ = ["sdl", "esc", "mdl"]

def _check_curve(ns: Any, losses: Any) -> tuple[np.ndarray, np.ndarray]:
    n = check_array(ns, "ns", ndim=1)
    L = check_array(losses, "losses", ndim=1)
    if n.shape != L.shape:
        raise ValueError(f"ns has {n.size} entries but losses has {L.size}")
    if n[0] <= 0 or np.any(np.diff(n) <= 0):
        raise ValueError(f"ns must be positive and strictly increasing, got {n.tolist()}")
    return n, L


def _check_eps(eps: float) -> float:
    eps = float(eps)
    if not (math.isfinite(eps) and eps >= 0):
        raise ValueError(f"eps must be a finite value >= 0, got {eps}")
    return eps


def _riemann(
    n: np.ndarray, L: np.ndarray, eps: float, edge: str, first_chunk_loss: float | None
) -> float:
    widths = np.diff(np.concatenate([[0.0], n]))  # n_0 = 0
    if edge == "right":
        heights = L
    elif edge == "left":
        if first_chunk_loss is None or not math.isfinite(first_chunk_loss):
            raise ValueError(
                "edge='left' codes the first chunk (0, n_1] without a model: pass "
                "first_chunk_loss, e.g. log(n_classes) for a uniform code"
            )
        heights = np.concatenate([[float(first_chunk_loss)], L[:-1]])
    else:
        raise ValueError(f"edge must be 'right' (reprieve) or 'left' (Voita & Titov), got {edge!r}")
    return float(np.sum(widths * np.maximum(heights - eps, 0.0)))


@register("mdl", -1, "labels")
def mdl(
    ns: Any,
    losses: Any,
    *,
    edge: Literal["right", "left"] = "right",
    first_chunk_loss: float | None = None,
) -> float:
    """Online (prequential) codelength MDL from a loss-data curve, in nats (lower = better).

    ``MDL(n_T) = Σ_t (n_t − n_{t−1}) · L̄(n_t)`` with ``n_0 = 0``: the chunked Riemann sum of the
    curve (Whitney et al. 2020, Eq. 7), i.e. ``sdl(ns, losses, eps=0)``. ``edge="right"``
    (default) takes each chunk's loss at its larger end, exactly as reprieve's ``auc_segment``;
    ``edge="left"`` codes chunk (n_{t−1}, n_t] with the model trained on n_{t−1} points (Voita &
    Titov chunking, as App. C of the paper describes) and needs ``first_chunk_loss`` for (0, n_1]
    (e.g. ``log(n_classes)``). Example: ns = [10, 20, 40], losses = [2, 1, 0.05] → 31.0.
    Cost O(T).
    """
    n, L = _check_curve(ns, losses)
    return _riemann(n, L, 0.0, edge, first_chunk_loss)


@register("sdl_eps", -1, "labels", prefix=True,
         description="surplus description length at ε (sdl_eps<ε>)")
def sdl(
    ns: Any,
    losses: Any,
    eps: float,
    *,
    edge: Literal["right", "left"] = "right",
    first_chunk_loss: float | None = None,
    return_bound: bool = False,
) -> float | tuple[float, bool]:
    """Surplus description length SDL_ε of a loss-data curve, in nats (lower = better).

    ``SDL_ε(n_T) = Σ_t (n_t − n_{t−1}) · [L̄(n_t) − ε]_+`` with ``n_0 = 0`` (Whitney et al. 2020,
    Eq. 11, estimated as in reprieve; ``edge`` as in ``mdl``): the area between the curve and the
    line y = ε. ε should be at least the achievable loss (the paper: 0.1 nats, or the loss of a
    large probe on raw data).

    Bound rule (reprieve's "> value"): when ``L̄(n_T) > ε`` the curve has not reached ε by the
    largest measured n, the sum is truncated there and is only a **lower bound** of SDL_ε. Then
    ``SDL = MDL − n_T·ε`` whenever the loss exceeds ε at every point.

    Returns
    -------
    float, or with ``return_bound=True`` ``(value, is_lower_bound)``. Without ``return_bound`` a
    lower bound comes with a ``DegenerateInputWarning``. Example: ns = [10, 20, 40], losses =
    [2, 1, 0.05]: ε = 0.1 → 28.0 (exact); ε = 0.01 → 30.6, a lower bound ("> 30.6"). Cost O(T).
    """
    n, L = _check_curve(ns, losses)
    eps = _check_eps(eps)
    value = _riemann(n, L, eps, edge, first_chunk_loss)
    bounded = bool(L[-1] > eps)
    if return_bound:
        return value, bounded
    if bounded:
        warn_degenerate(
            f"the loss {L[-1]:.4g} at n={n[-1]:g} is above eps={eps:g}: SDL {value:.6g} is a lower "
            "bound (pass return_bound=True to get the flag)"
        )
    return value


@register("esc_eps", -1, "labels", prefix=True, description="ε sample complexity (esc_eps<ε>)")
def esc(
    ns: Any,
    losses: Any,
    eps: float,
    *,
    return_bound: bool = False,
) -> float | tuple[float, bool]:
    """ε sample complexity εSC: the smallest measured n with ``L̄(n) <= ε`` (lower = better).

    Whitney et al. 2020, Eq. 12, on the measured grid with reprieve's ``<=`` rule (first crossing;
    a non-monotone curve is not smoothed). The result is an upper bound at the grid's precision:
    the true εSC lies in (previous n, returned n]. Refine by measuring a finer grid there.

    When the curve never reaches ε the value is only known to exceed ``max(ns)`` ("> n_max"):
    ``return_bound=False`` returns ``math.inf`` with a ``DegenerateInputWarning`` (it sorts after
    every finite value in rankings); ``return_bound=True`` returns ``(max(ns), True)``, read as
    "> max(ns)", and ``(n, False)`` otherwise. Example: ns = [10, 20, 40], losses = [2, 1, 0.05]:
    ε = 0.1 → 40; ε = 0.01 → "> 40". Cost O(T).
    """
    n, L = _check_curve(ns, losses)
    eps = _check_eps(eps)
    below = np.flatnonzero(L <= eps)
    if below.size:
        value = float(n[below[0]])
        return (value, False) if return_bound else value
    if return_bound:
        return float(n[-1]), True
    warn_degenerate(
        f"the loss never reaches eps={eps:g} up to n={n[-1]:g}: eSC > {n[-1]:g}, returning inf "
        "(pass return_bound=True to get (max n, True) instead)"
    )
    return math.inf


