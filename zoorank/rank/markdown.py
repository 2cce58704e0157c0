"""``leaderboard.md``: the leaderboard's settings, the verdict and its caveats, the headline table
and the failed models."""

from __future__ import annotations

import math
from collections.abc import Mapping
from typing import Any

import pandas as pd

from zoorank.decide.leaderboard import decision_lines, leaderboard_headline


def markdown_table(frame: pd.DataFrame) -> str:
    def cell(v: Any) -> str:
        if isinstance(v, float):
            if math.isnan(v):
                return "—"
            return f"{v:.4g}"
        return str(v).replace("|", "\\|").replace("\n", " ")

    header = "| " + " | ".join(str(c) for c in frame.columns) + " |"
    sep = "|" + "|".join("---" for _ in frame.columns) + "|"
    body = ["| " + " | ".join(cell(v) for v in row) + " |"
            for row in frame.itertuples(index=False)]
    return "\n".join([header, sep, *body])


# -- the stage -------------------------------------------------------------------------------------


def leaderboard_markdown(board: pd.DataFrame, failed: pd.DataFrame, settings: Mapping[str, Any],
                         decision: Mapping[str, Any] | None = None) -> str:
    """The page: how the board is ordered, the verdict of ``decision`` (decision.json) and its
    caveats, the headline table, the failed models."""
    lines = ["# zoorank leaderboard", ""]
    primary = settings.get("primary_metric") or {}
    lines.append(f"Ordered by `{settings.get('ordered_by')}`: aggregation "
                 f"`{settings.get('aggregation')}` of its ranks over the datasets ("
                 + ", ".join(f"{d}: `{m}`" for d, m in primary.items())
                 + "). Rank 1 = best; ties averaged. A model with no value on a dataset has no "
                 "rank there and is aggregated over the datasets it has; one with no value "
                 "anywhere is unranked (listed last, its reasons in `missing`).")
    if settings.get("in_domain"):
        lines.append(f"Joint rank: sqrt(rank · rank of `{settings['in_domain']}`) (CLID §3.5).")
    lines.append("")
    verdict: list[str] = []
    for line in decision_lines(decision, report="report/index.html"):
        if line.startswith("  ") and verdict:  # a wrapped line continues its item: no width here
            verdict[-1] += " " + line.strip()
        else:
            verdict.append(line)
    if verdict:
        lines += ["## Decision", ""] + [f"* {line}" for line in verdict] + [""]
    caveats = (decision or {}).get("caveats") or []
    if caveats:
        lines += ["## Caveats", ""] + [f"* {c}" for c in caveats] + [
            "", "`rank_low`–`rank_high`: the rank interval over resamples of the evaluation "
            "images; `p_best`: share of resamples in which the model ranks 1 (a tie for first "
            "splits it); `in_top_set`: in the Model Confidence Set, closed upward in this order (a "
            "model with a blocking health flag never is); `tied_with`: the models with the same "
            "value; `in_oracle_top_set`: in the label oracle's own top set.", ""]
    compact = leaderboard_headline(board, settings)
    lines += [markdown_table(compact), ""]
    lines += ["## Failed models", ""]
    if failed.empty:
        lines.append("None.")
    else:
        lines.append(markdown_table(failed))
    lines.append("")
    return "\n".join(lines)

