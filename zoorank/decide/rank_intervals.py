"""Rank intervals of the leaderboard (issue 17): per resampled metric and for the leaderboard's own
order, from the fold bootstrap (:mod:`zoorank.stats.uncertainty`), with the models a blocking
health flag puts last taking no part (issue 30). Part of the decision (:mod:`.decision`).

Output: the long ``uncertainty`` table (:data:`UNCERTAINTY_COLUMNS`: model_id, dataset, metric,
rank, rank_low, rank_high, p_best, in_top_set) and the aggregate's
:class:`~zoorank.stats.uncertainty.RankUncertainty`.
"""

from __future__ import annotations

from collections.abc import Mapping, Sequence
from typing import Any

import numpy as np
import pandas as pd

from zoorank.config import RunConfig
from zoorank.metrics import registry
from zoorank.metrics.primary import COLLAPSE_DEGENERATE
from zoorank.stats.ranks import (
    AGGREGATION_DIRECTIONS,
    aggregate_ranks,
    flagged_last,
    merged_signal_ranks,
)
from zoorank.stats.uncertainty import (
    RankUncertainty,
    fold_bootstrap,
    fold_scale,
    rank_uncertainty,
    replicate_ranks,
)

UNCERTAINTY = "uncertainty"
UNCERTAINTY_COLUMNS = ["model_id", "dataset", "metric", "rank", "rank_low", "rank_high", "p_best",
                       "in_top_set"]


def ranked_metrics(board: pd.DataFrame, dataset: str) -> list[str]:
    """The primary-eligible label-free metrics and the classifier estimates with a column for
    ``dataset`` on the board."""
    out = []
    for col in board.columns:
        ds, _, metric = col.partition("/")
        if ds != dataset or "/" in metric or not registry.is_label_free(metric):
            continue
        entry = registry.info(metric)
        if (entry.primary or entry.inputs == "logits") and board[col].notna().sum() >= 1:
            out.append(metric)
    return out


def degenerate_on_collapse(metric: str) -> bool:
    """Whether ``metric`` (``<name>@<view>`` included) is at its best on a collapsed encoder
    (:data:`zoorank.metrics.primary.COLLAPSE_DEGENERATE`)."""
    return registry.split_view(metric)[0] in COLLAPSE_DEGENERATE


def _fold_matrix(folds: pd.DataFrame, dataset: str, metric: str, model_ids: Sequence[str],
                 n_folds: int) -> np.ndarray | None:
    sub = folds[(folds["dataset"] == dataset) & (folds["metric"] == metric)]
    if sub.empty:
        return None
    table = sub.pivot_table(index="model_id", columns="fold", values="value", aggfunc="last")
    table = table.reindex(index=list(model_ids), columns=range(n_folds))
    return table.to_numpy(dtype=np.float64)


def unflagged_uncertainty(point: np.ndarray, reps: np.ndarray, confidence: float,
                          blocked: np.ndarray | None) -> RankUncertainty:
    """:func:`~zoorank.stats.uncertainty.rank_uncertainty` over the unblocked models only (issue
    30: a flagged model is never ranked above an unflagged one, nor counted in p(best)): blocked
    models get p(best) 0 (NaN when they have no value) and no interval. Cost: that of
    ``rank_uncertainty``."""
    if blocked is None or not np.any(blocked):
        return rank_uncertainty(point, reps, confidence, blocked)
    blocked = np.asarray(blocked, dtype=bool)
    u = rank_uncertainty(np.where(blocked, np.nan, point),
                         np.where(blocked[None, :], np.nan, reps), confidence, blocked)
    p_best = np.where(blocked & np.isfinite(point), 0.0, u.p_best)
    return RankUncertainty(u.rank_low, u.rank_high, p_best, u.share_vs_best, u.in_top_set)


def metric_uncertainty(
    config: RunConfig, board: pd.DataFrame, folds: pd.DataFrame,
    blocked: Mapping[str, np.ndarray],
) -> tuple[pd.DataFrame, dict[tuple[str, str], tuple[np.ndarray, np.ndarray]]]:
    """Per (dataset, resampled metric): the uncertainty rows and (oriented point, replicates).

    Blocked models (``blocked``: per dataset) rank after the unblocked ones and take no part in
    the intervals, p(best) and top set (:func:`unflagged_uncertainty`); the replicates returned
    are the metric's own, blocked models included. Cost per metric: O(B · n log n) time (ranking
    each replicate) and O(B · n) memory for n models and B = ``rank.resamples``; no array has two
    model axes."""
    o, r = config.score, config.rank
    ids = list(board["model_id"])
    rows: list[dict[str, Any]] = []
    replicates: dict[tuple[str, str], tuple[np.ndarray, np.ndarray]] = {}
    if folds.empty or not o.resample_folds:
        return pd.DataFrame(columns=UNCERTAINTY_COLUMNS), replicates
    scale = fold_scale(o.resample_folds, o.resample_fraction)
    for ds in [d.name for d in config.datasets]:
        for metric in ranked_metrics(board, ds):
            matrix = _fold_matrix(folds, ds, metric, ids, o.resample_folds)
            if matrix is None:
                continue
            raw = board[f"{ds}/{metric}"].to_numpy(dtype=np.float64)
            entry = registry.info(metric)
            point = np.asarray(entry.oriented(raw), dtype=np.float64)
            reps = np.asarray(entry.oriented(
                fold_bootstrap(raw, matrix, r.resamples, config.seed, scale)), dtype=np.float64)
            block = blocked.get(ds)
            u = unflagged_uncertainty(point, reps, r.confidence, block)
            replicates[(ds, metric)] = (point, reps)
            rank = replicate_ranks(point[None, :])[0]
            low, high = u.rank_low, u.rank_high
            if block is not None and np.any(block):
                rank = flagged_last(rank, block, not degenerate_on_collapse(metric), "min")
                # a blocked model's interval is its own place behind the unblocked models
                low, high = np.where(block, rank, low), np.where(block, rank, high)
            for i, m in enumerate(ids):
                rows.append({"model_id": m, "dataset": ds, "metric": metric, "rank": rank[i],
                             "rank_low": low[i], "rank_high": high[i],
                             "p_best": u.p_best[i], "in_top_set": bool(u.in_top_set[i])})
    return pd.DataFrame(rows, columns=UNCERTAINTY_COLUMNS), replicates


def merged_replicates(
    replicates: Mapping[tuple[str, str], tuple[np.ndarray, np.ndarray]], primary: Mapping[str, str],
    settings: Mapping[str, Any], board: pd.DataFrame,
) -> dict[tuple[str, str], tuple[np.ndarray, np.ndarray]]:
    """``replicates`` where, on a dataset whose board mixes classifiers and encoders
    (``settings["mixed_signals"]``), the primary metric's entry is the merged board's: each
    replicate ranked within each signal (:func:`zoorank.stats.ranks.merged_signal_ranks`),
    oriented as −rank. A dataset without both signals' replicates keeps none (no interval)."""
    out = dict(replicates)
    for ds, signals in (settings.get("mixed_signals") or {}).items():
        head, emb = (ds, signals["head"]), (ds, signals["embedding"])
        out.pop((ds, primary.get(ds, "")), None)
        if head not in replicates or emb not in replicates:
            continue
        is_head = board["model_id"].isin(signals["head_models"]).to_numpy()
        point = np.where(is_head, replicates[head][0], replicates[emb][0])
        reps = np.where(is_head[None, :], replicates[head][1], replicates[emb][1])
        out[(ds, primary[ds])] = (-merged_signal_ranks(point, is_head)[0],
                                  -merged_signal_ranks(reps, is_head))
    return out


def aggregate_uncertainty(
    config: RunConfig, board: pd.DataFrame, primary: Mapping[str, str],
    replicates: Mapping[tuple[str, str], tuple[np.ndarray, np.ndarray]], blocked: np.ndarray,
) -> RankUncertainty | None:
    """Uncertainty of the leaderboard's own order: each replicate's primary-metric ranks per
    dataset aggregated as the leaderboard aggregates them; None without replicates. Blocked
    models take no part (:func:`unflagged_uncertainty`).

    Cost O(B · n log n · datasets) time, O(B · n · datasets) memory."""
    keys = [(ds, m) for ds, m in primary.items() if (ds, m) in replicates]
    if not keys or len(keys) < len(primary):
        return None
    if len(keys) == 1:
        point, reps = replicates[keys[0]]
        return unflagged_uncertainty(point, reps, config.rank.confidence, blocked)
    method = config.rank.aggregation
    sign = AGGREGATION_DIRECTIONS[method]
    weights = {k: v for k, v in config.rank.dataset_weights.items() if k in primary}
    point = sign * board["aggregate"].to_numpy(dtype=np.float64)
    n_rep = replicates[keys[0]][1].shape[0]
    out = np.full((n_rep, len(board)), np.nan)
    # every replicate of a dataset ranked at once (NaN: no value, no rank)
    ranks = {ds: replicate_ranks(np.where(blocked[None, :], np.nan, replicates[(ds, m)][1]))
             for ds, m in keys}
    for b in range(n_rep):
        frame = pd.DataFrame({ds: r[b] for ds, r in ranks.items()})
        has = frame.notna().any(axis=1).to_numpy()
        agg = np.full(len(board), np.nan)
        if has.any():
            agg[has] = aggregate_ranks(frame[has], method, weights).to_numpy()
        out[b] = sign * agg
    return unflagged_uncertainty(point, out, config.rank.confidence, blocked)
