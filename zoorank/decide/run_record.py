"""The calibration record a run uses (:mod:`zoorank.evaluation.record`): its config's
``record:`` (written by ``zoorank calibrate``), else the one zoorank ships, else none; the metric
it orders an embedding board by, and the block a decision carries under ``record``."""

from __future__ import annotations

import functools
from collections.abc import Mapping, Sequence
from typing import Any

import pandas as pd

from zoorank.evaluation import load_record, record_block


@functools.lru_cache(maxsize=8)
def cached_record(path: str | None) -> dict[str, Any] | None:
    """:func:`zoorank.evaluation.load_record` of ``path``, read once per process."""
    return load_record(path)


def settings_record(settings: Mapping[str, Any]) -> dict[str, Any] | None:
    """The record a leaderboard's settings name (``record``, RANK's copy of the config's), else
    the shipped one; None when there is neither."""
    return cached_record(settings.get("record"))


def record_metric(config: Any, computed: Sequence[str]) -> str | None:
    """The metric the config's ``record:`` orders an embedding board by, when the run computes it
    (one of ``computed``); None without ``record:`` (the shipped record never changes the default
    order) or for a metric this run does not compute."""
    if getattr(config, "record", None) is None:
        return None
    block = record_block(cached_record(config.record), "encoders")
    metric = block.get("metric") if block else None
    return metric if metric in computed else None


def decision_record(board: pd.DataFrame, settings: Mapping[str, Any]) -> dict[str, Any] | None:
    """What ``decision.json`` carries under ``record``: the block of the run's record for the
    board's kind (a board ranked by classifier heads: ``heads``; else ``encoders``)."""
    heads = "signal" in board and board["signal"].astype(str).str.contains("head").any()
    return record_block(settings_record(settings), "heads" if heads else "encoders")
