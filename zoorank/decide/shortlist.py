"""The shortlist: the models the user reads first, chosen by a rule whose hit rate (how often it
holds a model within 0.5 pp of the labels' best) was measured on held-out validation zoos.

PROVISIONAL (to be replaced by the calibrated rule and its record): the first quarter of the
board by rank, with no measured record. The signature of :func:`shortlist_for` is the contract
the decision, the report, the console and the Python API code against.
"""

from __future__ import annotations

import math
from collections.abc import Mapping
from typing import Any

import pandas as pd


def shortlist_for(board: pd.DataFrame, settings: Mapping[str, Any]) -> dict[str, Any]:
    """The shortlist of a leaderboard (sorted by ``rank``, 1 = best) and its measured record.

    Returns ``{models, metric, rule, text, hits, zoos, hit_rate, mean_size, mean_size_fraction,
    held_out_zoos, pick_regret_pp: {median, p90, zoos}, kind, kind_covered, coverage_note}``;
    the record's numbers are None where nothing was measured. Cost O(n log n)."""
    ranked = board[board["rank"].notna()] if "rank" in board else board.iloc[:0]
    ranked = ranked.sort_values("rank", kind="stable")
    n = len(ranked)
    size = max(1, math.ceil(n / 4)) if n else 0
    models = [str(m) for m in ranked["model_id"].head(size)]
    ordered_by = settings.get("ordered_by")
    return {
        "models": models,
        "metric": ordered_by,
        "rule": {"kind": "rank_fraction", "fraction": 0.25},
        "text": "the first quarter of the board (provisional: no measured record)",
        "hits": None,
        "zoos": None,
        "hit_rate": None,
        "mean_size": None,
        "mean_size_fraction": None,
        "held_out_zoos": None,
        "pick_regret_pp": {"median": None, "p90": None, "zoos": None},
        "kind": None,
        "kind_covered": None,
        "coverage_note": None,
    }

