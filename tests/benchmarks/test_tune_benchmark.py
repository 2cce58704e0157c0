"""The Tune benchmark's pure parts (benchmarks/science/tune_benchmark.py): the simulated ASHA and
the figures of one objective, on hand-built per-epoch reports with closed-form answers."""

from __future__ import annotations

import math
import sys
from pathlib import Path

import pandas as pd
import pytest

sys.path.insert(0, str(Path(__file__).resolve().parents[2] / "benchmarks" / "science"))

import tune_benchmark as B  # noqa: E402


def _frame(objective, truth) -> pd.DataFrame:
    """8 configurations × 6 epochs; ``objective(c, e)``, ``truth(c, e)`` per report."""
    rows = [{"config": c, "epoch": e, "obj": objective(c, e), "truth": truth(c, e)}
            for c in range(8) for e in range(1, B.EPOCHS + 1)]
    return pd.DataFrame(rows)


def test_asha_halves_at_rungs_1_2_4():
    # the objective is the configuration number: the top half by it goes on at every rung
    stops = B.asha(_frame(lambda c, e: c, lambda c, e: 0.5), "obj")
    assert stops == {0: 1, 1: 1, 2: 1, 3: 1, 4: 2, 5: 2, 6: 4, 7: 6}
    assert sum(stops.values()) == 18  # of the grid's 48


def test_asha_follows_the_rung_values_not_the_final_ones():
    # configuration 0 leads at epoch 1 only: it survives rung 1, not rung 2
    frame = _frame(lambda c, e: 100 if (c == 0 and e == 1) else c, lambda c, e: 0.5)
    stops = B.asha(frame, "obj")
    assert stops[0] == 2 and stops[7] == 6


def test_measure_objective_equal_to_truth_has_no_regret():
    r = B.measure(_frame(lambda c, e: c, lambda c, e: c / 10), "obj")
    assert r["tau"] == pytest.approx(1.0)
    assert r["grid_regret"] == pytest.approx(0.0) and r["zoo_regret"] == pytest.approx(0.0)
    # random search: 3 full trials (18 // 6), the best of them; E[max of 3 of 0..7] by counting
    k, n = 3, 8
    e_max = sum(m * math.comb(m, k - 1) for m in range(n)) / math.comb(n, k)
    assert r["random_search_trials"] == 3
    assert r["random_search_regret"] == pytest.approx(100 * (0.7 - e_max / 10))


def test_measure_reversed_objective():
    r = B.measure(_frame(lambda c, e: -c, lambda c, e: c / 10), "obj")
    assert r["tau"] == pytest.approx(-1.0)
    assert r["grid_regret"] == pytest.approx(70.0)
    # ASHA keeps configuration 0 to the end (truth 0.0): 70 pp
    assert r["zoo_regret"] == pytest.approx(70.0)


def test_undefined_values_rank_last():
    r = B.measure(_frame(lambda c, e: float("nan") if c == 7 else c, lambda c, e: c / 10), "obj")
    assert r["grid_regret"] == pytest.approx(10.0)  # picks configuration 6
