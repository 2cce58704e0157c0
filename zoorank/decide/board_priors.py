"""The priors on a leaderboard (columns ``param_count``, ``width``, ``prior/<name>``): which columns
carry values, the confound warnings of the ``decision`` settings and what the report shows of the
priors. Orchestration over :mod:`zoorank.stats.priors`, whose conventions hold (every prior is
higher-is-better; the confound rule); the columns are joined by :mod:`zoorank.rank.prior_columns`.
"""

from __future__ import annotations

from collections.abc import Mapping, Sequence
from typing import Any

import numpy as np
import pandas as pd

from zoorank.decide.leaderboard import ranking_vector
from zoorank.metrics import registry
from zoorank.stats.priors import CONFOUND_TAU, PARAMS, WIDTH, confounds, is_prior_column


def prior_columns(board: pd.DataFrame) -> list[str]:
    """The board's prior columns (``param_count``, ``width``, ``prior/<name>``) with at least one value."""
    return [c for c in board.columns if is_prior_column(c) and board[c].notna().any()]


def _prior_words(prior: str) -> str:
    return {PARAMS: "the parameter count", WIDTH: "the embedding width"}.get(
        prior, f"the prior {prior.split('/', 1)[-1]}")


def confound_warnings(board: pd.DataFrame, datasets: Sequence[str]) -> list[dict[str, Any]]:
    """Every (label-free metric or the leaderboard's rank, prior) whose order a prior explains.

    Per dataset, each label-free metric column on the board and the leaderboard rank
    (``leaderboard_rank``) against each prior column (:func:`prior_columns`), by the rule of
    :func:`zoorank.stats.priors.confounds` (|τ-b| ≥ :data:`~zoorank.stats.priors.CONFOUND_TAU`
    over ≥ :data:`~zoorank.stats.priors.CONFOUND_MIN_MODELS` models). Returns
    ``{dataset, metric, prior, tau, n, sentence}`` dicts. Cost O(D · M · P · n log n).
    """
    priors = {c: board[c].to_numpy(dtype=np.float64) for c in prior_columns(board)}
    if not priors or board.empty:
        return []
    per_dataset: dict[str, dict[str, tuple[np.ndarray, int]]] = {}
    if "rank" in board and board["rank"].notna().any():
        # the leaderboard's order is one over all datasets (dataset "all")
        per_dataset["all"] = {"leaderboard_rank": (board["rank"].to_numpy(dtype=np.float64), -1)}
    for ds in datasets:
        per_dataset[ds] = {}
        for col in board.columns:
            d, _, metric = col.partition("/")
            if d != ds or "/" in metric or not registry.is_label_free(metric):
                continue
            oriented = ranking_vector(metric, board[col].to_numpy())
            if oriented is not None:
                per_dataset[ds][metric] = oriented
    out = []
    for ds, candidates in per_dataset.items():
        for hit in confounds(candidates, priors):
            what = ("the leaderboard's order" if hit["metric"] == "leaderboard_rank"
                    else f"{hit['metric']} on {ds}")
            way = "follows" if hit["tau"] > 0 else "runs against"
            hit["sentence"] = (
                f"Confound: {what} {way} {_prior_words(hit['prior'])} (Kendall τ {hit['tau']:+.2f} "
                f"over {hit['n']} models, |τ| ≥ {CONFOUND_TAU}): its order may reflect "
                f"{_prior_words(hit['prior'])} rather than transfer to this data; compare models "
                "of similar size, or check against labels.")
            out.append({"dataset": ds, **hit})
    return out


def prior_summary(board: pd.DataFrame, settings: Mapping[str, Any], agree: pd.DataFrame
                  ) -> dict[str, Any]:
    """What a report shows of the priors, as plain data: ``title``, ``sentences`` (one
    prior-agreement line per dataset and oracle metric, then the confound warnings) and ``rows``
    (per model: model_id, params, width, prior/<name>, in board order). Cost O(rows of ``agree``)."""
    cols = prior_columns(board) if not board.empty else []
    rows = board[["model_id", *cols]].to_dict("records") if cols else []
    sentences = []
    if not agree.empty and "kind" in agree:
        a = agree[(agree["family"] == "all")]
        if "labels_per_class" in a:
            a = a[a["labels_per_class"].isna()]
        for (ds, oracle), part in a.groupby(["dataset", "oracle_metric"], sort=True):
            priors = part[part["kind"] == "prior"]
            metrics = part[(part["kind"] == "metric") & (part["metric"] != "leaderboard_rank")]
            if priors.empty:
                continue
            shown = ", ".join(f"{r.metric} τ {r.kendall_tau:+.2f}" if np.isfinite(r.kendall_tau)
                              else f"{r.metric} τ n/a" for r in priors.itertuples())
            best = metrics[np.isfinite(metrics["kendall_tau"].to_numpy(np.float64))]
            tail = ""
            if not best.empty:
                top = best.loc[best["kendall_tau"].idxmax()]
                beat = priors["kendall_tau"].to_numpy(np.float64)
                beat = beat[np.isfinite(beat)]
                verdict = ("above every prior" if not len(beat) or top["kendall_tau"] > beat.max()
                           else "not above every prior")
                tail = (f"; the best label-free metric, {top['metric']}, τ "
                        f"{top['kendall_tau']:+.2f} ({verdict})")
            sentences.append(f"Priors against {oracle} on {ds}: {shown}{tail}.")
    decision = settings.get("decision") or {}
    sentences += [c["sentence"] for c in decision.get("confounds") or []]
    return {"title": "Priors and confounds", "sentences": sentences, "rows": rows}
