"""The shift benchmark's pure helpers (benchmarks/science/shift_benchmark.py) on tiny prediction matrices
with hand-computed answers."""

from __future__ import annotations

import sys
from pathlib import Path

import numpy as np
import pytest

sys.path.insert(0, str(Path(__file__).resolve().parents[2] / "benchmarks" / "science"))

import shift_benchmark as B  # noqa: E402


def _probs(preds: list[list[int]], k: int = 3) -> np.ndarray:
    """(M, N, K) probabilities whose top-1 classes are ``preds`` (0.6 on the top class)."""
    p = np.full((len(preds), len(preds[0]), k), 0.4 / (k - 1))
    for m, row in enumerate(preds):
        p[m, np.arange(len(row)), row] = 0.6
    return p


def test_top1_counts_the_top_class():
    labels = np.array([0, 1, 2, 2])
    p = _probs([[0, 1, 2, 2], [0, 0, 0, 2], [1, 0, 0, 0]])
    assert B.top1(p, labels).tolist() == [1.0, 0.5, 0.0]


def test_kendall_hand_computed_and_degenerate():
    # pairs of (score, truth): 5 concordant, 1 discordant (3 vs 4) → τ = (5 − 1) / 6
    assert B.kendall([1, 2, 3, 4], [0.1, 0.2, 0.4, 0.3]) == pytest.approx(4 / 6)
    assert B.kendall([-1, -2, -3], [0.1, 0.2, 0.3]) == pytest.approx(-1.0)
    assert np.isnan(B.kendall([1, 1, 1], [0.1, 0.2, 0.3]))
    assert np.isnan(B.kendall([1, np.nan, 2], [0.1, 0.2, 0.3]))


def test_regret_and_mae():
    truth = np.array([0.5, 0.8, 0.7])
    assert B.regret([3, 1, 2], truth) == pytest.approx(30.0)
    assert B.regret([1, 3, 2], truth) == pytest.approx(0.0)
    assert B.regret([np.nan, 1, np.nan], truth) == pytest.approx(0.0)
    assert B.mae([0.6, 0.8, 0.5], truth) == pytest.approx(100 * (0.1 + 0 + 0.2) / 3)


def test_labels_to_within_is_the_count_after_which_every_pick_stays_near_best():
    truth = np.array([0.5, 0.8, 0.797])
    trace = [(1, 0), (2, 1), (3, 0), (4, 2), (5, 1)]
    assert B.labels_to_within(trace, truth, 0.5) == 4  # model 2 is 0.3 pp below the best
    assert B.labels_to_within(trace, truth, 0.1) == 5
    assert B.labels_to_within([*trace, (6, 0)], truth, 0.5) == np.inf


def test_paired_differences_cap_censored_runs():
    mean, se, share = B.paired([10, 20, np.inf], [30, 20, 35], cap=40)
    d = np.array([20.0, 0.0, -5.0])  # the censored run counts as 40
    assert mean == pytest.approx(d.mean())
    assert se == pytest.approx(d.std(ddof=1) / np.sqrt(3))
    assert share == pytest.approx(1 / 3)


def test_label_grid():
    assert B.label_grid(30) == [*range(1, 21), 25, 30]
    assert B.label_grid(5) == [1, 2, 3, 4, 5]


def test_simulated_pick_finds_the_only_accurate_model_after_one_label():
    # model 0 is right on every image, models 1 and 2 on none: one label singles model 0 out
    labels = np.arange(40) % 3
    P = _probs([labels.tolist(), ((labels + 1) % 3).tolist(), ((labels + 2) % 3).tolist()])
    truth = B.top1(P, labels)
    assert truth.tolist() == [1.0, 0.0, 0.0]
    grid = B.label_grid(10)
    for method in ("random", "uncertainty", "ModelPicker"):
        for seed in range(3):
            trace = B.simulate(method, P, labels, [], seed, grid)
            assert [n for n, _ in trace] == grid
            assert B.labels_to_within(trace, truth, 0.5) == 1


def _domain(name: str, truth: list[float], est: dict[str, list[float]]) -> dict:
    """One domain's result as ``evaluate_domain`` returns it, for the keys the report reads."""
    rows = {k: {"mae": B.mae(v, truth)} for k, v in est.items()}
    return {"name": name, "truth": truth, "estimates": est, "rows": rows}


def test_published_table_sits_beside_our_mae_with_its_source():
    ids = ["uva-resnet", "cnn-w8-e1", "uva-densenet"]
    est = {"average_confidence": [0.9, 0.9, 0.9], "doc_accuracy": [0.7, 0.5, 0.2],
           "atc_accuracy": [0.6, 0.3, 0.5]}
    results = [_domain("clean", [0.0, 0.0, 0.0], est),  # left out: not a corrupted domain
               _domain("fog-s1", [0.8, 0.4, 0.4], est),
               _domain("snow-s1", [0.6, 0.3, 0.2], est)]
    text = "\n".join(B.published_lines(results, ids))
    lines = text.splitlines()
    rows = {line.split(" | ")[0].lstrip("| "): line.rstrip(" |").split(" | ")
            for line in lines if line.startswith("| ") and "`" in line}
    # DoC, all nets: fog |.1|+|.1|+|.2| = .4, snow |.1|+|.2|+|0| = .3 → (40/3 + 30/3) / 2 pp;
    # the UvA nets (0 and 2): fog (.1 + .2) / 2, snow (.1 + 0) / 2 → (15 + 5) / 2 pp
    doc = rows["DOC (`doc_accuracy`)"]
    assert doc[1:3] == [f"{(40 / 3 + 30 / 3) / 2:.1f}", "10.0"]
    assert doc[3:] == [f"{v:.2f}" for v in B.ATC_PAPER_CIFAR10_C[1][2:]]
    assert doc[3:] == ["13.87", "11.08", "13.93", "11.20"]  # as printed in the paper
    # ATC: fog |.2|+|.1|+|.1| = .4, snow 0+0+.3 = .3; UvA: fog .15, snow .15 → 15.0
    assert rows["ATC-NE (`atc_accuracy`)"][1:] == [f"{70 / 6:.1f}", "15.0", "4.21", "3.87", "4.87", "3.63"]
    assert any(line.startswith("| ATC-MC (not run here) | — | — | 4.65 | 4.25 | 5.66 | 5.03")
               for line in lines)
    assert "arXiv 2201.04234" in text and B.ATC_PAPER_SOURCE in text and B.ATC_PAPER_SETTING in text
    assert "79ae40794038486c87fb46869b3210da60ea007b" in B.ATC_PAPER_SOURCE


def test_coda_exploration_methods_parse_and_run():
    assert B.coda_explore("CODA ε=0.25") == 0.25 and B.coda_explore("CODA") is None
    with pytest.raises(ValueError, match="ε"):
        B.coda_explore("CODA ε=1.5")
    # ε = 1 asks uniformly and picks by CODA's P(best): on a zoo where model 0 is always right and
    # the others never, every pick after the first labels is model 0, as for plain CODA
    labels = np.arange(40) % 3
    P = _probs([labels.tolist(), ((labels + 1) % 3).tolist(), ((labels + 2) % 3).tolist()])
    grid = B.label_grid(8)
    for method in ("CODA ε=1", "CODA ε=0.5"):
        trace = B.simulate(method, P, labels, [], 0, grid, coda={"grid": 64})
        assert [n for n, _ in trace] == grid
        assert trace[-1][1] == 0
