"""Which metric orders the leaderboard: the metrics ``rank.primary_metric`` may name for a config, the
default when it names none, and the metrics that grow with the embedding width (a caveat when one
of them orders a zoo of mixed widths).
"""

from __future__ import annotations

import math
from collections.abc import Iterable, Mapping, Sequence
from typing import Any

import numpy as np
import pandas as pd

from zoorank.metrics.registry import (
    REGISTRY,
    VIEW_SEPARATOR,
    collapse_degenerate,
    default_preference,
    expand,
    width_sensitive,
)

#: PRIMARY_PREFERENCE (the registrations' ``default_rank``, :func:`registry.default_preference`): the
#: default primary metric when ``rank.primary_metric`` is not set: on each dataset, the first of
#: these that the config computes and that ranks (nearly) the whole zoo (:func:`default_for_coverage`);
#: metrics registered without a ``default_rank`` follow in registration order (candidates of
#: ``benchmarks/science/default_lozo.py`` at once; they get a rank when its rule places them).
#: Chosen OUT OF SAMPLE (issue 30): :func:`leave_one_zoo_out` over five validation zoos (the demo,
#: digits, the CIFAR-10 SSL zoo, the UvA classifiers, the UvA autoencoders;
#: ``benchmarks/results/default_lozo.md``, 2026-11-27): RankMe had no failure (its leader within
#: REGRET_TOLERANCE of the labels' best kNN accuracy on every zoo, worst 1.4 pp) and was the
#: held-out pick on four of the five zoos, each within tolerance; MLE's ID, the pick when digits
#: was held out, missed there by 6.9 pp and goes last (a metric that fails out of sample is never
#: the default). This order equals ``zoorank/report/metric_record.json``'s ``default_order``.
#:
#: WIDTH_SENSITIVE (``width_sensitive=True``): metrics that grow with the embedding width (rank-
#: and dimension-based): ranking models of different widths by one of them orders partly by width
#: (issue 17); RANK warns when a zoo mixes widths and one of these orders it. Width-normalised
#: variants: ``rankme_norm``, ``rankme_proj``.
#:
#: COLLAPSE_DEGENERATE (``collapse_degenerate=True``): metrics at their best on a collapsed encoder
#: (a constant map has alignment 0, the ideal, and uniformity ranks it by the constant's spread,
#: none): they never order a model flagged ``collapsed`` (issue 30;
#: :func:`zoorank.stats.ranks.flagged_last` with ``order_flagged=False``).
#:
#: The three are read from the registry when asked for (a metric registered later is included).
_FROM_REGISTRY = {
    "PRIMARY_PREFERENCE": default_preference,
    "WIDTH_SENSITIVE": width_sensitive,
    "COLLAPSE_DEGENERATE": collapse_degenerate,
}


def __getattr__(name: str) -> Any:
    if name in _FROM_REGISTRY:
        return _FROM_REGISTRY[name]()
    raise AttributeError(f"module {__name__!r} has no attribute {name!r}")


#: share of the best-covered metric's models that the default primary metric must rank.
DEFAULT_COVERAGE = 0.9

def primary_candidates(config_names_: Iterable[str], augmented_views: Iterable[str] = ()) -> list[str]:
    """Names ``rank.primary_metric`` may take for a config: its primary-eligible metrics, with
    ``<name>@<view>`` for augmented metrics of every augmented view after the first."""
    extra_views = list(augmented_views)[1:]
    out = []
    for name in expand(config_names_):
        m = REGISTRY[name]
        if not m.primary:
            continue
        out.append(name)
        if m.inputs == "augmented":
            out += [f"{name}{VIEW_SEPARATOR}{v}" for v in extra_views]
    return out


def default_order(config_names_: Iterable[str], augmented: bool = True) -> list[str]:
    """The primary-eligible metrics a config computes, in the order of :data:`PRIMARY_PREFERENCE`
    (then registration order); without an augmented view (``augmented=False``) the metrics that
    need one (LiDAR, RankMe(aug), alignment) are left out: they would have no value."""
    computed = expand(config_names_)
    preference = default_preference()
    order = [*preference, *(n for n in computed if n not in preference)]
    return [m for m in order if m in computed and REGISTRY[m].primary
            and (augmented or REGISTRY[m].inputs != "augmented")]


def default_primary(config_names_: Iterable[str], augmented: bool = True) -> str | None:
    """The first of :func:`default_order` (None when the config computes no ranking metric)."""
    return next(iter(default_order(config_names_, augmented)), None)


def default_for_coverage(order: Sequence[str], ranked: Mapping[str, int]) -> str | None:
    """The default primary metric on one dataset, from how many models each metric ranks there.

    The first metric of ``order`` (:func:`default_order`) that ranks at least
    :data:`DEFAULT_COVERAGE` of the models that the best-covered metric of ``order`` ranks, so a
    metric that only some models can have (NC: members of seed ensembles) orders the board only
    when (nearly) the whole zoo has it, and one model a metric failed on does not change the
    order. None when no metric of ``order`` ranks any model.
    """
    most = max((ranked.get(m, 0) for m in order), default=0)
    if most == 0:
        return None
    return next(m for m in order if ranked.get(m, 0) >= DEFAULT_COVERAGE * most)


#: how far (percentage points of the oracle's accuracy) a metric's leader may fall below the
#: labels' best model on a zoo before the metric counts as *failing* there (issue 30): about twice
#: the kNN oracle's noise on the validation zoos' 1,000–2,000 test images.
REGRET_TOLERANCE = 2.0

#: a candidate is ordered by the choosing rule only when it ranked at least this many of the
#: zoos it is chosen on (NC ranks only zoos of seed ensembles).
MIN_ZOOS = 2


def order_by_record(table: pd.DataFrame, zoos: Iterable[str] | None = None) -> list[str]:
    """Candidates best first by their record on ``zoos`` (all of ``table``'s when None).

    ``table`` has one row per (zoo, candidate) with ``regret`` (the labels' best accuracy minus
    that of the candidate's leader, pp; NaN: the candidate did not run on the zoo) and ``tau``
    (Kendall τ against the labels). The rule (chosen before any held-out figure was
    seen): fewest *failures* (regret above :data:`REGRET_TOLERANCE`) — then lowest worst regret,
    then lowest mean regret, then highest mean τ — over the zoos where the candidate ran;
    candidates that ran on fewer than :data:`MIN_ZOOS` of them follow the others (same keys),
    then those that ran on none, in name order.
    Cost O(rows log rows)."""
    sub = table if zoos is None else table[table["zoo"].isin(list(zoos))]
    ran = sub[np.isfinite(sub["regret"].to_numpy(dtype=np.float64))]
    g = ran.groupby("candidate")
    stats_ = pd.DataFrame({"n": g.size(), "fails": g["regret"].apply(
        lambda r: int((r > REGRET_TOLERANCE).sum())), "worst": g["regret"].max(),
        "mean": g["regret"].mean(), "tau": g["tau"].mean()})
    stats_["tau"] = stats_["tau"].fillna(-np.inf)
    stats_["few"] = stats_["n"] < MIN_ZOOS
    ranked = stats_.sort_values(["few", "fails", "worst", "mean", "tau"],
                                ascending=[True, True, True, True, False], kind="stable")
    return [*ranked.index, *sorted(set(table["candidate"]) - set(ranked.index))]


def leave_one_zoo_out(table: pd.DataFrame) -> dict[str, Any]:
    """The default chosen out of sample: for each zoo, :func:`order_by_record` on the
    other zoos and its *pick* there — the first candidate of that order that ran on the held-out
    zoo — with the pick's held-out regret and τ.

    Returns ``{"held_out": DataFrame(zoo, pick, regret, tau, failed, order), "failed": sorted
    candidates that failed (regret above :data:`REGRET_TOLERANCE`) on a zoo they were picked for
    from the others, "order": :func:`order_by_record` on every zoo with the failed candidates
    moved last (a metric that fails out of sample is never the default)}``.
    Cost O(zoos · rows log rows)."""
    zoos = list(dict.fromkeys(table["zoo"]))
    rows = []
    for held in zoos:
        order = order_by_record(table, [z for z in zoos if z != held])
        here = table[(table["zoo"] == held) & np.isfinite(table["regret"].to_numpy(np.float64))]
        ran = set(here["candidate"])
        pick = next((c for c in order if c in ran), None)
        got = here[here["candidate"] == pick].iloc[0] if pick is not None else None
        regret = float(got["regret"]) if got is not None else math.nan
        rows.append({"zoo": held, "pick": pick, "regret": regret,
                     "tau": float(got["tau"]) if got is not None else math.nan,
                     "failed": bool(regret > REGRET_TOLERANCE), "order": order})
    held_out = pd.DataFrame(rows, columns=["zoo", "pick", "regret", "tau", "failed", "order"])
    failed = sorted(set(held_out.loc[held_out["failed"], "pick"]))
    full = order_by_record(table)
    return {"held_out": held_out, "failed": failed,
            "order": [c for c in full if c not in failed] + [c for c in full if c in failed]}
