"""What the label-free metrics say of each other on a dataset (issue 17): their concordance
(Kendall's W), each one's best model against the top set, per-model disagreement and the plain
sentence (:func:`consensus`); and the width confound (:func:`width_warning`). Part of the decision
(:mod:`.decision`); the maths is :mod:`zoorank.stats.consensus`.
"""

from __future__ import annotations

import math
from collections.abc import Mapping, Sequence
from typing import Any

import numpy as np
import pandas as pd

from zoorank.decide.rank_intervals import ranked_metrics
from zoorank.metrics import registry
from zoorank.metrics.primary import WIDTH_SENSITIVE
from zoorank.stats.consensus import kendall_w, rank_disagreement
from zoorank.stats.uncertainty import replicate_ranks

#: a metric joins the consensus when it has a value for at least this share of the ranked models
#: (NC of a zoo with one small seed ensemble ranks only its members).
COVERAGE = 2 / 3
#: below this Kendall's W the label-free metrics are said to disagree even when their leaders agree.
WEAK_CONCORDANCE = 0.5


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
    candidates = ranked_metrics(board, dataset)
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
