"""The leaderboard frame: per-dataset ranks of every metric, the primary metric's aggregation over
datasets, family and joint ranks, and each model's missing values.

Conventions (ranks 1 = best, ties averaged, NaN last; directions) are those of
:mod:`zoorank.stats.agreement`.
"""

from __future__ import annotations

import json
from collections.abc import Sequence
from typing import Any

import numpy as np
import pandas as pd

from zoorank.config import RunConfig
from zoorank.decide.leaderboard import metrics_fingerprint, ranking_vector
from zoorank.decide.run_record import record_metric
from zoorank.errors import ConfigError
from zoorank.metrics import registry
from zoorank.metrics.primary import default_for_coverage, default_order
from zoorank.stats.ranks import (
    AGGREGATION_DIRECTIONS,
    aggregate_ranks,
    joint_rank,
    merged_signal_ranks,
    rank_within,
)
from zoorank.zoo.zoofile import search_objective

#: in-domain accuracies for CLID's joint rank, in order of preference.
IN_DOMAIN_ACCURACY = registry.oracles()


def wide_table(long: pd.DataFrame, model_ids: Sequence[str]) -> pd.DataFrame:
    """Long rows (model_id, dataset, metric, value) → models × ``<dataset>/<metric>`` columns."""
    if long.empty:
        return pd.DataFrame(index=pd.Index(list(model_ids), name="model_id"))
    cols = long["dataset"].astype(str) + "/" + long["metric"].astype(str)
    wide = (long.assign(column=cols)
            .pivot_table(index="model_id", columns="column", values="value", aggfunc="last",
                         dropna=False))
    wide = wide.reindex(index=list(model_ids))
    wide.columns.name = None
    wide.index.name = "model_id"
    return wide[sorted(wide.columns)]


def missing_reasons(metrics: pd.DataFrame, model_ids: Sequence[str]) -> list[str]:
    """Per model: ``"<dataset>/<metric>: <reason>"`` for each metric it has no value for (``; ``)."""
    out: dict[str, list[str]] = {m: [] for m in model_ids}
    if not metrics.empty:
        nan = metrics[metrics["value"].isna() & metrics["model_id"].isin(model_ids)]
        for r in nan.itertuples(index=False):
            try:
                reason = json.loads(r.params).get("error") or "not computed"
            except (TypeError, ValueError):
                reason = "not computed"
            out[r.model_id].append(f"{r.dataset}/{r.metric}: {str(reason)[:200]}")
    return ["; ".join(v) for v in out.values()]


def _ordered_by(configured: str | None, primary: dict[str, str], order: Sequence[str]) -> str | None:
    """The name the board says it is ordered by: the configured metric, else the default chosen
    (one name, or ``dataset: metric`` pairs when the datasets' defaults differ)."""
    if configured:
        return configured
    chosen = list(dict.fromkeys(primary.values()))
    if len(chosen) > 1:
        return ", ".join(f"{ds}: {m}" for ds, m in primary.items())
    return chosen[0] if chosen else next(iter(order), None)


def build_leaderboard(
    config: RunConfig,
    models: Sequence[Any],
    metrics: pd.DataFrame,
    oracle: pd.DataFrame,
) -> tuple[pd.DataFrame, dict[str, Any]]:
    """(leaderboard frame sorted by rank, settings) from the long metric and oracle tables.

    Cost O(rows + c · n log n) for n models and c ``<dataset>/<metric>`` columns (one sort per
    column); the frame is models × columns."""
    info = {m.model_id: m for m in models}
    scored = set(metrics["model_id"]) if not metrics.empty else set()
    model_ids = [m for m in info if m in scored]
    datasets = [d.name for d in config.datasets]
    unknown = sorted(set(config.rank.dataset_weights) - set(datasets))
    if unknown:
        raise ConfigError(f"rank.dataset_weights: unknown dataset(s) {unknown}; "
                          f"datasets: {datasets}")
    values = wide_table(pd.concat([metrics, oracle], ignore_index=True)
                        [["model_id", "dataset", "metric", "value"]], model_ids)
    board = pd.DataFrame({
        "model_id": model_ids,
        "family": [info[m].family or "" for m in model_ids],
        "group": [info[m].group or "" for m in model_ids],
    })
    ranks: dict[str, np.ndarray] = {}
    for column in values.columns:
        dataset, metric = column.split("/", 1)
        oriented = ranking_vector(metric, values[column].to_numpy())
        if oriented is not None:
            ranks[f"{column}/rank"] = rank_within(*oriented)
    # The primary metric orders every dataset; a model without a value on a dataset has no rank
    # there (missing is missing), and the aggregation renormalises over the datasets it has.
    # Unset, the default is chosen per dataset from the metrics that rank (nearly) every model
    # there (metrics.primary.default_for_coverage: NC only for a zoo of seed ensembles).
    order = default_order(config.metrics, augmented=bool(config.augmented_views))
    # a calibration record named by the config (zoorank calibrate) orders the board by its
    # metric unless rank.primary_metric names one; else zoos exported by a search, by its objective
    configured = (config.rank.primary_metric or record_metric(config, order)
                  or search_objective(config.models, order))
    primary: dict[str, str] = {}
    primary_rows: dict[str, dict[str, str]] = {}
    rank_table = {}
    head_metric = config.classifier_metric
    signal: dict[str, set[str]] = {m: set() for m in model_ids}
    mixed: dict[str, dict[str, str]] = {}
    for ds in datasets:
        name = configured or default_for_coverage(order, {
            m: int(values[f"{ds}/{m}"].notna().sum()) for m in order if f"{ds}/{m}" in values})
        column = f"{ds}/{name}"
        embedding = (values[column].notna().to_numpy() if name is not None and column in values
                     else np.zeros(len(model_ids), dtype=bool))
        head_column = f"{ds}/{head_metric}"
        # a model with a head is one SCORE estimated (a failed estimate is missing, not a
        # reason to rank the model by its embedding instead)
        estimated = set(metrics.loc[(metrics["dataset"] == ds) & (metrics["metric"] == head_metric),
                                    "model_id"]) if not metrics.empty else set()
        heads = np.array([m in estimated for m in model_ids], dtype=bool)
        if heads.any():
            # Contract 8: a model with a head is ranked by its estimated accuracy; on a board that
            # also holds encoders, each signal ranks its own models (metrics.ranks.merged_signal_ranks)
            for m in np.asarray(model_ids)[heads]:
                signal[m].add("head")
            if not (embedding & ~heads).any():
                name, column = head_metric, head_column
                rank_table[ds] = (np.where(heads & values[column].notna().to_numpy(),
                                           ranks[f"{column}/rank"], np.nan)
                                  if column in values else np.full(len(model_ids), np.nan))
            else:
                oriented = np.where(heads, values[head_column].to_numpy(dtype=np.float64)
                                    if head_column in values else np.nan,
                                    registry.info(name).oriented(
                                        values[column].to_numpy(dtype=np.float64)))
                rank_table[ds] = merged_signal_ranks(oriented, heads)[0]
                mixed[ds] = {"head": head_metric, "embedding": name,
                             "head_models": [m for m, h in zip(model_ids, heads) if h]}
                for m in np.asarray(model_ids)[embedding & ~heads]:
                    signal[m].add("embedding")
        elif name is None or column not in values or not values[column].notna().any():
            continue
        else:
            rank_table[ds] = np.where(values[column].notna(), ranks[f"{column}/rank"], np.nan)
            for m in np.asarray(model_ids)[embedding]:
                signal[m].add("embedding")
        primary[ds] = name
        rows = metrics[(metrics["dataset"] == ds) & (metrics["metric"] == name)]
        # the exact rows that ordered the board, so readers (the notebook) can select them
        primary_rows[ds] = dict(zip(rows["model_id"], rows["fingerprint"]))
    method = config.rank.aggregation
    settings: dict[str, Any] = {"aggregation": method, "primary_metric": primary,
                                "ordered_by": _ordered_by(
                                    configured if all(v == configured for v in primary.values())
                                    else None,
                                    {ds: (f"{head_metric} (heads) and {m} (embeddings)"
                                          if ds in mixed else m) for ds, m in primary.items()},
                                    order),
                                "primary_fingerprints": primary_rows,
                                "metrics_fingerprint": metrics_fingerprint(config, metrics),
                                "configured_primary_metric": config.rank.primary_metric,
                                "dataset_weights": dict(config.rank.dataset_weights),
                                "in_domain": None, "classifier_metric": head_metric,
                                "mixed_signals": mixed, "record": config.record}
    if rank_table and model_ids:
        table = pd.DataFrame(rank_table, index=model_ids)
        weights = {k: v for k, v in config.rank.dataset_weights.items() if k in table.columns}
        agg = aggregate_ranks(table, method, weights).to_numpy()
        # a model with no rank on any dataset stays unranked (NaN), it is not ranked last
        board["rank"] = np.where(np.isnan(agg), np.nan,
                                 rank_within(agg, AGGREGATION_DIRECTIONS[method]))
        board["aggregate"] = agg
    else:
        board["rank"] = np.nan
        board["aggregate"] = np.nan
    board["signal"] = [",".join(sorted(signal[m])) for m in model_ids]
    board["family_rank"] = np.nan
    for fam, idx in board.groupby("family").groups.items():
        if fam:
            r = board.loc[idx, "rank"].to_numpy()
            board.loc[idx, "family_rank"] = np.where(np.isnan(r), np.nan, rank_within(r, -1))
    for ds in datasets:
        for acc in IN_DOMAIN_ACCURACY:
            col = f"{ds}/{acc}"
            if settings["in_domain"] is None and col in values and values[col].notna().any():
                settings["in_domain"] = col
    board["missing"] = missing_reasons(metrics, model_ids)
    if settings["in_domain"] and board["rank"].notna().all() and len(board):
        acc_rank = rank_within(values[settings["in_domain"]].to_numpy(), +1)
        board["joint_rank"] = joint_rank(board["rank"].to_numpy(), acc_rank)
    for ds, r in rank_table.items():
        board[f"rank/{ds}"] = r
    for column in values.columns:
        board[column] = values[column].to_numpy()
        if f"{column}/rank" in ranks:
            board[f"{column}/rank"] = ranks[f"{column}/rank"]
    board = board.sort_values(["rank", "model_id"], kind="stable").reset_index(drop=True)
    return board, settings

