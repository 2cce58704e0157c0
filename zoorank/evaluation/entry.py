"""One record entry per board kind (and per zoo kind on a board of several): the metric and the
shortlist fraction chosen by the protocol, their held-out figures, the baselines beside them and
the paired differences. Pure functions over a per-model table (:mod:`.units`).

Held out means: the units whose ``role`` is ``held_out`` when the table has any (the metric and
the fraction chosen on the calibration units, then one look at them); otherwise each calibration
unit in turn, left out (LOUO: the figures are those of the choosing procedure out of sample).
"""

from __future__ import annotations

from collections.abc import Sequence
from typing import Any

import numpy as np
import pandas as pd

from zoorank.evaluation import intervals, protocol
from zoorank.evaluation.units import (
    BASELINES,
    NEAR_BEST_PP,
    board_candidates,
    metric_columns,
    unit_table,
    zoo_table,
)
from zoorank.stats.shortlist_rule import MAX_FRACTION

SCHEMA_VERSION = 1
#: a zoo kind gets its own entry on a board of several kinds when it has this many units.
MIN_KIND_UNITS = 3
BASELINE_WORDS = {"random": "a random pick", "name_heuristic": "the longest-trained",
                  "final_loss": "the lowest final training loss",
                  "loo_best_metric": "the best single metric"}


def _pp(x: float | None) -> str:
    return "n/a" if x is None else f"{x:.1f} pp"


def statement(entry: dict[str, Any]) -> str:
    """One plain sentence for the card: the pick's held-out regret, the baselines, the
    shortlist's hits, and whether a guarantee holds."""
    held = entry["held_out_units"]
    if entry["metric"] is None or not held["n"]:
        return "No label-free metric could be measured on these units: the record holds no pick."
    r = entry["regret_pp"]["held_out"]
    base = "; ".join(f"{BASELINE_WORDS[k]}: {_pp(v['median'])}"
                     for k, v in entry["baselines"].items() if v["n"])
    rand = entry["paired"].get("random", {})
    beats = (rand.get("interval_90") is not None and rand["interval_90"][1] < 0)
    verdict = "" if beats else " It does not beat a random pick with a 90% interval that excludes 0."
    lower = held["cp_lower_90"]
    c = entry["conformal"]
    why = (f"{c['n']} calibration units are too few at α = {c['alpha']:g}"
           if c["order_statistic"] > c["n"] else
           f"the fraction is capped at {100 * c['max_fraction']:.0f}% of the board")
    guarantee = "" if entry["guaranteed"] else f" No guarantee: {why}."
    units = "unit" if held["n"] == 1 else "units"
    return (f"On {held['n']} held-out {units}, {entry['metric']}'s pick was {_pp(r['median'])} "
            f"from the best (median; p90 {_pp(r['p90'])}); {base}.{verdict} Its shortlist "
            f"(the first {100 * entry['shortlist_fraction']:.0f}% of the board) held a model within "
            f"{NEAR_BEST_PP:g} pp of the best on {held['hits']}/{held['n']} {units} (90% lower bound "
            f"{100 * (lower or 0):.0f}%).{guarantee}")


def evaluate(zoos: pd.DataFrame, metrics: Sequence[str], board_kind: str,
             alpha: float = protocol.ALPHA, cap: float = MAX_FRACTION,
             seed: int = 0) -> dict[str, Any]:
    """The record entry of the zoos of :func:`zoo_table` (one board kind) over ``metrics``."""
    units = unit_table(zoos)
    calib, held = units[units["role"] == "calibration"], units[units["role"] == "held_out"]
    cands = board_candidates(metrics, board_kind)
    metric = protocol.choose_metric(calib, cands)
    everything = [m for m in metrics if m in units]
    if len(held):
        how, held_index = "held-out units", held.index
        pick = held[metric] if metric else pd.Series(np.nan, index=held_index)
        best = protocol.choose_metric(calib, everything)
        loo_best = held[best] if best else pd.Series(np.nan, index=held_index)
    else:
        how, held_index = "leave-one-unit-out", calib.index
        pick = protocol.louo_picks(calib, cands)["regret"]
        loo_best = protocol.louo_picks(calib, everything)["regret"]
    cal_zoos = zoos[zoos["unit"].isin(calib.index)]
    if metric:
        scores = protocol.shortlist_scores(cal_zoos, metric)
        conformal = protocol.conformal_fraction(scores, alpha, cap)
        fractions = (pd.Series(conformal["fraction"], index=held_index) if len(held)
                     else protocol.louo_fractions(scores, alpha, cap))
        hits = protocol.unit_hits(zoos, metric, fractions, cap)
    else:
        conformal = protocol.conformal_fraction([], alpha, cap)
        hits = pd.Series(dtype=bool)
    n_hits, n_held = int(hits.sum()), int(len(hits))
    held_units = units.loc[held_index]
    baseline_values = {b: held_units[b].to_numpy(np.float64) for b in BASELINES}
    baseline_values["loo_best_metric"] = loo_best.reindex(held_index).to_numpy(np.float64)
    pick_values = pick.reindex(held_index).to_numpy(np.float64)
    entry: dict[str, Any] = {
        "metric": metric,
        "candidates": protocol.candidate_order(calib, cands),
        "shortlist_fraction": conformal["fraction"],
        "conformal": {"alpha": alpha, "max_fraction": cap, **conformal},
        "units": {"n": int(len(calib)), "names": [str(u) for u in calib.index]},
        "held_out_units": {
            "n": n_held, "hits": n_hits, "names": [str(u) for u in held_index],
            "hit_rate": n_hits / n_held if n_held else None,
            "cp_lower_90": intervals.clopper_pearson_lower(n_hits, n_held),
            "wilson_90": intervals.wilson(n_hits, n_held), "protocol": how},
        "regret_pp": {"held_out": intervals.summary(pick_values),
                      "all_units": intervals.summary(units[metric] if metric else [])},
        "baselines": {b: intervals.summary(v) for b, v in baseline_values.items()},
        "paired": {b: intervals.paired_difference(pick_values, v, seed=seed)
                   for b, v in baseline_values.items()},
        "guaranteed": bool(conformal["guaranteed"]),
    }
    entry["statement"] = statement(entry)
    return entry


def build_record(models: pd.DataFrame, alpha: float = protocol.ALPHA, cap: float = MAX_FRACTION,
                 seed: int = 0, generated_by: str = "zoorank calibrate") -> dict[str, Any]:
    """The record of a per-model table: an entry per board kind present (key ``encoders`` or
    ``heads``) and, on a board of several zoo kinds, per kind with at least
    :data:`MIN_KIND_UNITS` calibration units (key ``<board>/<kind>``)."""
    zoos = zoo_table(models)
    if zoos.empty:
        raise ValueError("units table: no zoo has two models with a finite truth")
    metrics = metric_columns(models)
    boards: dict[str, Any] = {}
    for board_kind, z in zoos.groupby("board_kind", sort=True):
        boards[board_kind] = evaluate(z, metrics, board_kind, alpha, cap, seed)
        kinds = z.drop_duplicates("unit")
        if kinds["kind"].nunique() < 2:
            continue
        for kind, zk in z.groupby("kind", sort=True):
            cal_units = zk.loc[zk["role"] == "calibration", "unit"].nunique()
            if cal_units >= MIN_KIND_UNITS:
                boards[f"{board_kind}/{kind}"] = evaluate(zk, metrics, board_kind, alpha, cap,
                                                          seed)
    return {"schema_version": SCHEMA_VERSION, "generated_by": generated_by, "alpha": alpha,
            "max_fraction": cap, "near_best_pp": NEAR_BEST_PP, "seed": seed,
            "n_models": int(len(models)), "boards": boards}
