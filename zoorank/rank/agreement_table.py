"""The agreement table: every label-free metric (and the leaderboard rank) against every oracle
metric, per dataset and per family ('all' or a family with >= 3 models). The priors (``param_count``,
``width``, ``prior/<name>``: :mod:`zoorank.stats.priors`, higher is better) get the same rows,
marked ``kind = "prior"`` (``"metric"`` for the others): the static baseline beside every metric.

τ-b signs and the bootstrap are those of :mod:`zoorank.stats.agreement`.
"""

from __future__ import annotations

import numpy as np
import pandas as pd

from zoorank.config import RunConfig
from zoorank.decide.board_priors import prior_columns
from zoorank.decide.leaderboard import ranking_vector
from zoorank.oracle.measures import oracle_direction
from zoorank.stats.agreement import agreement

MIN_MODELS_FOR_AGREEMENT = 3



def build_agreement(
    config: RunConfig,
    board: pd.DataFrame,
    metrics: pd.DataFrame,
    oracle: pd.DataFrame,
) -> pd.DataFrame:
    """Every label-free metric (and the leaderboard rank) vs every oracle metric, per family.

    Models whose metric value is missing (NaN) are excluded from that metric's row;
    ``n_metric_nan`` counts them and ``n_models`` counts the models used.

    Cost per row (dataset × oracle metric × family × metric): O(B · n log n) time for n models
    and B = ``rank.bootstrap`` (:func:`~zoorank.stats.agreement.agreement`), memory bounded by
    :data:`~zoorank.stats.agreement.BOOTSTRAP_MEMORY`.
    """
    columns = ["metric", "kind", "oracle_metric", "dataset", "family", "n_models", "kendall_tau",
               "kendall_ci_low", "kendall_ci_high", "spearman", "spearman_ci_low",
               "spearman_ci_high", "pearson", "pearson_ci_low", "pearson_ci_high", "top1_regret",
               "top1_oracle", "oracle_best", "top1_model", "topk_recall", "top_k", "n_metric_nan"]
    if oracle.empty or board.empty:
        return pd.DataFrame(columns=columns)
    board = board.set_index("model_id")
    families: dict[str, list[str]] = {"all": list(board.index)}
    for fam, ids in board.groupby("family").groups.items():
        if fam and len(ids) >= MIN_MODELS_FOR_AGREEMENT and fam != "all":
            families[str(fam)] = list(ids)
    rows = []
    for ds in [d.name for d in config.datasets]:
        o_names = sorted(oracle.loc[oracle["dataset"] == ds, "metric"].unique())
        m_names = sorted(metrics.loc[metrics["dataset"] == ds, "metric"].unique())
        candidates: list[tuple[str, str, np.ndarray, int]] = []
        for metric in m_names:
            col = f"{ds}/{metric}"
            oriented = ranking_vector(metric, board[col].to_numpy()) if col in board else None
            if oriented is not None:
                candidates.append((metric, "metric", *oriented))
        if board["rank"].notna().any():
            candidates.append(("leaderboard_rank", "metric", board["rank"].to_numpy(), -1))
        candidates += [(p, "prior", board[p].to_numpy(dtype=np.float64), 1)
                       for p in prior_columns(board)]
        for o_name in o_names:
            o_dir = oracle_direction(o_name)
            o_all = board[f"{ds}/{o_name}"].to_numpy(dtype=np.float64)
            for fam, ids in families.items():
                sel = board.index.get_indexer(ids)
                keep = sel[~np.isnan(o_all[sel])]
                if len(keep) < MIN_MODELS_FOR_AGREEMENT:
                    continue
                for metric, kind, mv, m_dir in candidates:
                    # a model the metric could not score is excluded from its τ (not ranked
                    # last: that would reward a metric for failing exactly on bad models)
                    used = keep[np.isfinite(mv[keep])]
                    if len(used) < MIN_MODELS_FOR_AGREEMENT:
                        continue
                    res = agreement(mv[used], o_all[used], m_dir, o_dir,
                                    bootstrap=config.rank.bootstrap, seed=config.seed,
                                    top_k=config.rank.top_k)
                    res["n_metric_nan"] = int(len(keep) - len(used))
                    pick = board.index[used][np.argmax(m_dir * mv[used])]
                    rows.append({"metric": metric, "kind": kind, "oracle_metric": o_name,
                                 "dataset": ds,
                                 "family": fam, **res, "top1_model": pick})
    return pd.DataFrame(rows, columns=columns)

