"""The decision a leaderboard supports: rank intervals, the top set, health flags, the consensus of
the label-free metrics and the width confound (issue 17). Part of the RANK stage.

Orchestration over pure maths: the rank intervals, p_best and top set (:mod:`.intervals`, over
:mod:`zoorank.stats.uncertainty`), the health flags (here, :mod:`zoorank.stats.health`) and the
consensus of the metrics and width confound (:mod:`.concordance`). Inputs are the leaderboard frame of
:func:`zoorank.rank.board.build_leaderboard`, the fresh metric rows, the fresh fold rows and health rows
(:mod:`zoorank.oracle.resample`).

Outputs: leaderboard columns ``rank_low``, ``rank_high``, ``p_best``, ``in_top_set`` (of the
leaderboard's own order: the aggregate of the primary metric's ranks; the top set is a
rank-consistent Model Confidence Set, :func:`zoorank.stats.uncertainty.top_set`),
``flags``, ``disagreement``, ``tied_with`` (the other models with the same leaderboard value: a
seed ensemble scored by one ensemble-level value) and, when the oracle ran with folds,
``in_oracle_top_set`` (the label oracle's own top set from the same fold bootstrap over its test
images, :func:`zoorank.decide.oracle_top_sets.oracle_top_sets`); a long
table ``uncertainty`` (model_id, dataset, metric, rank, rank_low, rank_high, p_best, in_top_set)
for every resampled metric; and the ``decision`` settings (top set and its guarantee, the oracle's
top sets and their comparison with it, consensus sentence, Kendall's W per dataset, width warning,
and the confounds: metrics whose order a prior explains,
:func:`zoorank.decide.board_priors.confound_warnings`).
"""

from __future__ import annotations

import math
from collections.abc import Mapping, Sequence
from typing import Any

import numpy as np
import pandas as pd

from zoorank.config import RunConfig
from zoorank.decide.board_priors import confound_warnings
from zoorank.decide.concordance import consensus, width_warning
from zoorank.decide.oracle_top_sets import ORACLE_TOP_SET_METRICS, oracle_top_sets
from zoorank.decide.rank_intervals import (
    aggregate_uncertainty,
    degenerate_on_collapse,
    merged_replicates,
    metric_uncertainty,
)
from zoorank.metrics import registry
from zoorank.stats.health import BLOCKING, health_flags
from zoorank.stats.priors import CONFOUND_MIN_MODELS, CONFOUND_TAU
from zoorank.stats.ranks import flagged_last, rank_within
from zoorank.stats.uncertainty import TOP_SET_GUARANTEE

DECISION_COLUMNS = ["rank_low", "rank_high", "p_best", "in_top_set", "flags", "disagreement",
                    "tied_with", "in_oracle_top_set"]
#: at most this many model ids in a ``tied_with`` cell (then "+k more").
TIED_SHOWN = 5


def model_flags(
    board: pd.DataFrame, metrics: pd.DataFrame, health: pd.DataFrame, datasets: Sequence[str]
) -> dict[str, dict[str, list[str]]]:
    """model_id → dataset → health flags (:func:`zoorank.stats.health.health_flags`), with the
    label-free metrics that ran and have no value (a NaN row) as ``failed:<metric>``. A metric the
    config makes impossible (:func:`zoorank.catalog.applicability.inapplicable_metrics`) has no row, so
    no flag. O(rows + n · datasets)."""
    ids = list(board["model_id"])
    stats = {(r["model_id"], r["dataset"]): r for r in health.to_dict("records")} \
        if not health.empty else {}
    failed: dict[tuple[str, str], list[str]] = {}
    if not metrics.empty:
        nan = metrics[metrics["value"].isna() & metrics["model_id"].isin(ids)]
        for r in nan.itertuples(index=False):
            if registry.is_label_free(r.metric):
                failed.setdefault((r.model_id, r.dataset), []).append(r.metric)
    return {m: {ds: health_flags(stats.get((m, ds)), failed.get((m, ds), ())) for ds in datasets}
            for m in ids}


def _flags_text(flags: Mapping[str, list[str]]) -> str:
    if len(flags) == 1:
        return ",".join(next(iter(flags.values())))
    return ",".join(f"{ds}:{f}" for ds, fs in flags.items() for f in fs)


def tied_with(board: pd.DataFrame) -> list[str]:
    """Per model, the other models with the same leaderboard ``rank`` (ranks are tie-averaged, so
    equal values share one), comma-separated, at most :data:`TIED_SHOWN` then ``+k more``; ``""``
    for an untied or unranked model. A seed ensemble ranked by one ensemble-level value (NC) is
    one such tie. Cost O(n log n)."""
    if "rank" not in board or board.empty:
        return [""] * len(board)
    ids = board["model_id"].astype(str).to_numpy()
    rank = board["rank"].to_numpy(dtype=np.float64)
    out = [""] * len(ids)
    ranked = np.flatnonzero(np.isfinite(rank))
    for _, members in pd.Series(ranked).groupby(rank[ranked]):
        if len(members) < 2:
            continue
        idx = members.to_numpy()
        for i in idx:
            others = [ids[j] for j in idx if j != i]
            more = len(others) - TIED_SHOWN
            out[i] = ", ".join(others[:TIED_SHOWN]) + (f" (+{more} more)" if more > 0 else "")
    return out


def flagged_below(board: pd.DataFrame, flags: Mapping[str, Mapping[str, list[str]]],
                  primary: Mapping[str, str]) -> pd.DataFrame:
    """``board`` re-ranked and re-sorted so that every model with a blocking flag (on any dataset)
    comes after every unblocked one (issue 30); when a metric degenerate on collapse
    (:func:`degenerate_on_collapse`) orders a dataset, the blocked models share the last places
    instead of keeping its order (:func:`zoorank.stats.ranks.flagged_last`). Cost O(n log n)."""
    if board.empty or "rank" not in board:
        return board.copy()
    blocked = np.array([any(set(f) & BLOCKING for f in flags[m].values())
                        for m in board["model_id"]], dtype=bool)
    if not blocked.any():
        return board.copy()
    order_flagged = not any(degenerate_on_collapse(m) for m in primary.values())
    out = board.copy()
    out["rank"] = flagged_last(out["rank"].to_numpy(dtype=np.float64), blocked, order_flagged)
    if "family_rank" in out:  # the place within the family follows the new order
        for fam, idx in out.groupby("family").groups.items():
            if fam:
                r = out.loc[idx, "rank"].to_numpy(dtype=np.float64)
                out.loc[idx, "family_rank"] = np.where(np.isnan(r), np.nan, rank_within(r, -1))
    return out.sort_values(["rank", "model_id"], kind="stable").reset_index(drop=True)


def decide(
    config: RunConfig, board: pd.DataFrame, settings: dict[str, Any], metrics: pd.DataFrame,
    folds: pd.DataFrame, health: pd.DataFrame, oracle: pd.DataFrame | None = None,
) -> tuple[pd.DataFrame, pd.DataFrame]:
    """Add the decision columns to ``board`` and ``settings["decision"]``; returns (board, the
    per-metric uncertainty table). ``oracle``: the fresh oracle rows (for the oracle's top set).
    Cost O(B · n log n) per resampled metric (n models, B resamples) plus the top set; memory
    O(B · n) per metric: nothing here pairs models."""
    datasets = [d.name for d in config.datasets]
    primary = settings.get("primary_metric") or {}
    flags = model_flags(board, metrics, health, datasets)
    board = flagged_below(board, flags, primary)
    ids = list(board["model_id"])
    blocked_ds = {ds: np.array([bool(set(flags[m][ds]) & BLOCKING) for m in ids])
                  for ds in datasets}
    blocked = np.any(np.vstack([blocked_ds[ds] for ds in datasets]), axis=0) if ids else \
        np.zeros(0, dtype=bool)
    per_metric, replicates = metric_uncertainty(config, board, folds, blocked_ds)
    agg = aggregate_uncertainty(config, board, primary,
                                merged_replicates(replicates, primary, settings, board), blocked)
    if agg is not None:
        rank = board["rank"].to_numpy(dtype=np.float64)
        # a blocked model's interval is its own place behind the unblocked models
        board["rank_low"] = np.where(blocked, rank, agg.rank_low)
        board["rank_high"] = np.where(blocked, rank, agg.rank_high)
        board["p_best"], board["in_top_set"] = agg.p_best, agg.in_top_set
        top_rule = "mcs"
    else:
        # no resampled rows: the top set is the rank-1 model(s) without a blocking flag
        rank = board["rank"].to_numpy(dtype=np.float64)
        board["rank_low"] = board["rank_high"] = rank
        board["p_best"] = np.nan
        ok = np.isfinite(rank) & ~blocked
        best = np.min(rank[ok]) if ok.any() else math.nan
        board["in_top_set"] = ok & (rank == best)
        top_rule = "point (no resampled rows: run `zoorank score` with score.resample_folds >= 2)"
    board["flags"] = [_flags_text(flags[m]) for m in ids]
    board["tied_with"] = tied_with(board)
    top = [m for m, t in zip(ids, board["in_top_set"]) if t]
    oracle_sets = oracle_top_sets(config, board, oracle, top)
    reference = next((v for k in ORACLE_TOP_SET_METRICS for v in oracle_sets.values()
                      if v["metric"] == k), None)
    if reference is not None:  # no column without an oracle top set (no oracle, or no folds)
        # a model in the reference oracle's top set on any labelled dataset
        chosen = {m for v in oracle_sets.values() if v["metric"] == reference["metric"]
                  for m in v["top_set"]}
        board["in_oracle_top_set"] = np.array([m in chosen for m in ids], dtype=bool)
    agreements = {ds: consensus(board, ds, top, per_metric) for ds in datasets}
    dis = np.vstack([np.asarray(a["disagreement"], dtype=np.float64) for a in agreements.values()])
    counts = np.isfinite(dis).sum(axis=0)
    board["disagreement"] = np.where(counts > 0, np.nansum(dis, axis=0) / np.maximum(counts, 1),
                                     np.nan)
    computed = sorted({c.split("/", 1)[1] for c in board.columns if "/" in c
                       and registry.is_label_free(c.split("/", 1)[1])})
    warning = width_warning(metrics, ids, primary, computed)
    flagged = [m for m, f in zip(ids, board["flags"]) if f]
    settings["decision"] = {
        "confidence": config.rank.confidence,
        "resamples": config.rank.resamples,
        "folds": config.score.resample_folds,
        "fold_fraction": config.score.resample_fraction,
        "top_set_rule": top_rule,
        "top_set": top,
        "top_set_guarantee": TOP_SET_GUARANTEE.format(confidence=config.rank.confidence)
        if agg is not None else None,
        "oracle_top_sets": oracle_sets,
        "oracle_top_set_metric": reference["metric"] if reference else None,
        "oracle_comparison": " ".join(v["sentence"] for v in oracle_sets.values()
                                      if reference and v["metric"] == reference["metric"]),
        "flagged": flagged,
        "blocking_flags": sorted(BLOCKING),
        "consensus": {ds: {k: v for k, v in a.items() if k != "disagreement"}
                      for ds, a in agreements.items()},
        "consensus_sentence": " ".join(a["sentence"] for a in agreements.values()),
        "metrics_agree": all(a["agree"] for a in agreements.values()),
        "width_warning": warning,
        "confounds": confound_warnings(board, datasets),
        "confound_rule": {"tau": CONFOUND_TAU, "min_models": CONFOUND_MIN_MODELS},
    }
    order = list(board.columns)
    head = order[:order.index("rank") + 1] if "rank" in order else []
    rest = [c for c in order if c not in head and c not in DECISION_COLUMNS]
    decision = [c for c in DECISION_COLUMNS if c in board]
    return board[head + decision + rest], per_metric
