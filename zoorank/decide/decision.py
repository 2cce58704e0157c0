"""The decision a leaderboard supports: rank intervals, the top set, health flags, the consensus of
the label-free metrics and the width confound (issue 17). Part of the RANK stage.

Orchestration over pure maths: :mod:`zoorank.metrics.uncertainty` (fold bootstrap → intervals,
p_best, top set), :mod:`zoorank.metrics.health` (flags), :func:`zoorank.metrics.consensus.kendall_w`
and :func:`~zoorank.metrics.consensus.rank_disagreement`. Inputs are the leaderboard frame of
:func:`zoorank.rank.board.build_leaderboard`, the fresh metric rows, the fresh fold rows and health rows
(:mod:`zoorank.oracle.resample`).

Outputs: leaderboard columns ``rank_low``, ``rank_high``, ``p_best``, ``in_top_set`` (of the
leaderboard's own order: the aggregate of the primary metric's ranks; the top set is a
rank-consistent Model Confidence Set, :func:`zoorank.metrics.uncertainty.top_set`),
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
from zoorank.decide.oracle_top_sets import ORACLE_TOP_SET_METRICS, oracle_top_sets
from zoorank.metrics import registry
from zoorank.metrics.consensus import kendall_w, rank_disagreement
from zoorank.metrics.health import BLOCKING, health_flags
from zoorank.metrics.primary import COLLAPSE_DEGENERATE, WIDTH_SENSITIVE
from zoorank.metrics.priors import CONFOUND_MIN_MODELS, CONFOUND_TAU
from zoorank.metrics.ranks import (
    AGGREGATION_DIRECTIONS,
    aggregate_ranks,
    flagged_last,
    merged_signal_ranks,
    rank_within,
)
from zoorank.metrics.uncertainty import (
    TOP_SET_GUARANTEE,
    RankUncertainty,
    fold_bootstrap,
    fold_scale,
    rank_uncertainty,
    replicate_ranks,
)

UNCERTAINTY = "uncertainty"
UNCERTAINTY_COLUMNS = ["model_id", "dataset", "metric", "rank", "rank_low", "rank_high", "p_best",
                       "in_top_set"]
DECISION_COLUMNS = ["rank_low", "rank_high", "p_best", "in_top_set", "flags", "disagreement",
                    "tied_with", "in_oracle_top_set"]
#: at most this many model ids in a ``tied_with`` cell (then "+k more").
TIED_SHOWN = 5
#: a metric joins the consensus when it has a value for at least this share of the ranked models
#: (NC of a zoo with one small seed ensemble ranks only its members).
COVERAGE = 2 / 3
#: below this Kendall's W the label-free metrics are said to disagree even when their leaders agree.
WEAK_CONCORDANCE = 0.5


def _ranked_metrics(board: pd.DataFrame, dataset: str) -> list[str]:
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


def _fold_matrix(folds: pd.DataFrame, dataset: str, metric: str, model_ids: Sequence[str],
                 n_folds: int) -> np.ndarray | None:
    sub = folds[(folds["dataset"] == dataset) & (folds["metric"] == metric)]
    if sub.empty:
        return None
    table = sub.pivot_table(index="model_id", columns="fold", values="value", aggfunc="last")
    table = table.reindex(index=list(model_ids), columns=range(n_folds))
    return table.to_numpy(dtype=np.float64)


def model_flags(
    board: pd.DataFrame, metrics: pd.DataFrame, health: pd.DataFrame, datasets: Sequence[str]
) -> dict[str, dict[str, list[str]]]:
    """model_id → dataset → health flags (:func:`zoorank.metrics.health.health_flags`), with the
    configured label-free metrics that have no value as ``failed:<metric>``. O(rows + n · datasets)."""
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


def degenerate_on_collapse(metric: str) -> bool:
    """Whether ``metric`` (``<name>@<view>`` included) is at its best on a collapsed encoder
    (:data:`zoorank.metrics.primary.COLLAPSE_DEGENERATE`)."""
    return registry.split_view(metric)[0] in COLLAPSE_DEGENERATE


def unflagged_uncertainty(point: np.ndarray, reps: np.ndarray, confidence: float,
                          blocked: np.ndarray | None) -> RankUncertainty:
    """:func:`~zoorank.metrics.uncertainty.rank_uncertainty` over the unblocked models only (issue
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
        for metric in _ranked_metrics(board, ds):
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
    replicate ranked within each signal (:func:`zoorank.metrics.ranks.merged_signal_ranks`),
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


def consensus(
    board: pd.DataFrame, dataset: str, top_set: Sequence[str],
    per_metric: pd.DataFrame,
) -> dict[str, Any]:
    """Kendall's W of the dataset's ranked label-free metrics, each metric's best model and
    whether it lies in the leaderboard's top set, per-model disagreement, and a plain sentence.

    Metrics that rank fewer than :data:`COVERAGE` of the ranked models are left out (``partial``);
    W uses the models every included metric ranks (:func:`kendall_w`). Cost O(k · n log n) for k
    metrics and n models: (k, n) rank matrices, never a model pair."""
    ranked = board["rank"].notna().to_numpy() if "rank" in board else np.ones(len(board), bool)
    need = max(2, math.ceil(COVERAGE * int(ranked.sum())))
    candidates = _ranked_metrics(board, dataset)
    metrics = [m for m in candidates if board[f"{dataset}/{m}"].notna().sum() >= need]
    ids = list(board["model_id"])
    out: dict[str, Any] = {"metrics": metrics, "kendall_w": math.nan, "best": {},
                           "partial": [m for m in candidates if m not in metrics],
                           "disagreement": [math.nan] * len(ids), "agree": True}
    if len(metrics) < 2:
        out["sentence"] = (f"Only {len(metrics)} ranked label-free metric on {dataset}: "
                           "no consensus to measure.")
        return out
    ranks = []
    for m in metrics:
        oriented = np.asarray(registry.info(m).oriented(board[f"{dataset}/{m}"].to_numpy(float)))
        r = replicate_ranks(oriented[None, :])[0]
        ranks.append(r)
        finite = np.isfinite(oriented)
        out["best"][m] = ids[int(np.nanargmax(np.where(finite, oriented, -np.inf)))]
    ranks = np.vstack(ranks)
    w = kendall_w(ranks)
    out["kendall_w"] = w
    out["disagreement"] = rank_disagreement(ranks).tolist()
    top = set(top_set)
    outside = {m: b for m, b in out["best"].items() if b not in top}
    out["agree"] = not outside and (math.isnan(w) or w >= WEAK_CONCORDANCE)
    w_text = f"Kendall's W = {w:.2f} over {len(metrics)} metrics"
    if not outside and out["agree"]:
        out["sentence"] = (f"The label-free metrics agree on {dataset}: each one's best model is "
                           f"in the top set ({w_text}).")
    elif not outside:
        out["sentence"] = (f"The label-free metrics agree on {dataset} only about the leaders: "
                           f"each one's best model is in the top set, but they order the rest "
                           f"differently ({w_text}).")
    else:
        picks = "; ".join(f"{m} → {b}" for m, b in list(outside.items())[:4])
        more = f" (+{len(outside) - 4} more)" if len(outside) > 4 else ""
        out["sentence"] = (f"The label-free metrics disagree about the top set on {dataset} "
                           f"({w_text}): best outside it: {picks}{more}. Do not trust a single "
                           "metric here; check the models they pick.")
    return out


def width_warning(metrics: pd.DataFrame, model_ids: Sequence[str], primary: Mapping[str, str],
                  computed: Sequence[str]) -> str | None:
    """A warning when ranked models have different embedding widths and a width-sensitive metric
    (:data:`zoorank.metrics.primary.WIDTH_SENSITIVE`) orders the board or is computed."""
    if metrics.empty:
        return None
    sub = metrics[metrics["model_id"].isin(model_ids) & (metrics["dim"] > 0)]
    widths = sorted({int(d) for d in sub.groupby("model_id")["dim"].max()})
    if len(widths) < 2:
        return None
    sensitive = sorted({registry.split_view(m)[0] for m in computed}
                       & WIDTH_SENSITIVE)
    ordering = sorted({m for m in primary.values()
                       if registry.split_view(m)[0] in WIDTH_SENSITIVE})
    if not sensitive:
        return None
    shown = ", ".join(str(w) for w in widths[:6]) + (" ..." if len(widths) > 6 else "")
    lead = (f"the leaderboard is ordered by {', '.join(ordering)}, which grows with the width, "
            "so its order may reflect width rather than quality" if ordering else
            f"{', '.join(sensitive)} grow with the width: compare them only within one width")
    return (f"Width confound: the zoo mixes embedding widths ({shown}); {lead}. Width-normalised "
            "variants: rankme_norm (RankMe / width), rankme_proj (RankMe after one fixed random orthonormal "
            "projection to 64 dimensions).")


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
    instead of keeping its order (:func:`zoorank.metrics.ranks.flagged_last`). Cost O(n log n)."""
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
