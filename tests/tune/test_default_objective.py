"""The default Tune objective is the one the benchmark's protocol chooses on the committed
per-epoch tables (``benchmarks/results/tune_benchmark/``), and the protocol's pieces behave as
Ray's ASHA does on cases worked by hand."""

from __future__ import annotations

import sys
from pathlib import Path

import pandas as pd
import pytest

ROOT = Path(__file__).resolve().parents[2]
sys.path.insert(0, str(ROOT / "benchmarks" / "science"))

from tune_benchmark_report import choose_default, rungs, simulate_asha, space_figures  # noqa: E402

from zoorank.tune.config import ObjectiveSpec  # noqa: E402

CACHE = ROOT / "benchmarks" / "results" / "tune_benchmark"


def test_asha_replay_on_a_hand_worked_case():
    assert rungs(6, 1, 2.0) == [1, 2, 4]
    # trial 0 sets every rung; trial 1 is below it at rung 1 (stops after 1 report); trial 2 beats
    # the rung-1 median, then falls below the rung-2 median of {trial 0}
    reports = simulate_asha([[5, 5, 5, 5, 5, 5], [1, 9, 9, 9, 9, 9], [6, 4, 9, 9, 9, 9]], 6)
    assert reports == [6, 1, 2]


def test_the_default_objective_is_the_protocols_choice_on_the_committed_tables():
    tables = {p.stem: pd.read_parquet(p) for p in sorted(CACHE.glob("*.parquet"))}
    if len(tables) < 6:
        pytest.fail(f"{CACHE}: {len(tables)} search spaces, the benchmark measures 6")
    candidates = ("rankme", "lidar", "rankme_aug", "twonn_id", "train_loss")
    figures = {o: {s: space_figures(t, o, 6) for s, t in tables.items()} for o in candidates}
    assert choose_default(figures) == ObjectiveSpec().metric
