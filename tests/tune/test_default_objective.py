"""The Ray Tune benchmark's protocol on its committed per-epoch tables
(``benchmarks/results/tune_benchmark_ray/``): the shipped default objective beats the former one
(LiDAR) there, and the ASHA replay behaves as Ray's ASHA does on a case worked by hand."""

from __future__ import annotations

import sys
from pathlib import Path

import numpy as np
import pandas as pd
import pytest

ROOT = Path(__file__).resolve().parents[2]
sys.path.insert(0, str(ROOT / "benchmarks" / "science"))

from tune_benchmark_ray_report import rungs, simulate_asha, space_figures  # noqa: E402

from zoorank.tune.config import ObjectiveSpec  # noqa: E402

CACHE = ROOT / "benchmarks" / "results" / "tune_benchmark_ray"


def test_asha_replay_on_a_hand_worked_case():
    assert rungs(6, 1, 2.0) == [1, 2, 4]
    # trial 0 sets every rung; trial 1 is below it at rung 1 (stops after 1 report); trial 2 beats
    # the rung-1 median, then falls below the rung-2 median of {trial 0}
    reports = simulate_asha([[5, 5, 5, 5, 5, 5], [1, 9, 9, 9, 9, 9], [6, 4, 9, 9, 9, 9]], 6)
    assert reports == [6, 1, 2]


def test_the_default_objective_beats_lidar_on_asha_zoos_of_the_committed_tables():
    tables = {p.stem: pd.read_parquet(p) for p in sorted(CACHE.glob("*.parquet"))}
    if len(tables) < 6:
        pytest.fail(f"{CACHE}: {len(tables)} search spaces, the benchmark measures 6")
    def median_regret(objective: str) -> float:
        return float(np.median([space_figures(t, objective, 6)["zoo_pick_regret"]
                                for t in tables.values()]))

    assert median_regret(ObjectiveSpec().metric) < median_regret("lidar")
