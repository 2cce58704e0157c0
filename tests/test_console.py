"""User-facing output off a terminal: plain text within 100 columns, each verdict once, and a tie is
never called an overtake."""

from __future__ import annotations

import os
import subprocess
import sys
from pathlib import Path

import numpy as np
import pandas as pd
import pytest
import yaml

from zoorank import budget
from zoorank.console import PLAIN_WIDTH

BOX = set("─│┌┐└┘├┤┬┴┼━┃┏┓┗┛╭╮╰╯═║╔╗╚╝")


def _tie_frame(tau_free: float, tau_budget: float) -> pd.DataFrame:
    rows = [{"metric": "coding_rate", "oracle_metric": "knn_accuracy", "dataset": "d",
             "family": "all", "kendall_tau": tau_free, "labels_per_class": np.nan,
             "budget_seed": None}]
    rows += [{"metric": "logme", "oracle_metric": "knn_accuracy", "dataset": "d", "family": "all",
              "kendall_tau": t, "labels_per_class": float(k), "budget_seed": "mean"}
             for k, t in ((5, tau_budget), (10, tau_budget - 0.2))]
    return pd.DataFrame(rows)


def test_a_tie_at_the_printed_precision_is_not_an_overtake():
    lines = budget.crossover_lines(budget.crossovers(_tie_frame(0.3810, 0.3812)))
    assert len(lines) == 1 and "does not overtake" in lines[0]
    lines = budget.crossover_lines(budget.crossovers(_tie_frame(0.3810, 0.3912)))
    assert "overtakes coding_rate (τ=+0.38) at 5 labels/class (τ=+0.39)" in lines[0]


LONG = "sweep-resnet18-simclr-lr0.0030-wd0.0500-temperature0.20-batch512-epoch0100-seed"


@pytest.mark.timeout(600)
def test_piped_zoorank_run_has_no_line_over_100_columns_and_no_cut_border(tmp_path, e2e_zoo):
    import e2e_models as zoo

    files = e2e_zoo

    def model(key: str, model_id: str, **extra) -> dict:
        return {"id": model_id, "source": "torchscript", "name": files[key], "trust_checkpoint": True,
                "input_size": zoo.INPUT_SIZE, "interpolation": "bilinear", "crop_pct": 1.0,
                **extra}

    config = {
        "store": str(tmp_path / "store"), "seed": 0,
        "datasets": [{"name": "digits", "source": "sklearn_digits", "limit": 200}],
        "models": [model("trained", f"{LONG}1", family="cnn"),
                   model("random", f"{LONG}2", family="cnn"),
                   model("collapsed", "collapsed", family="cnn"),
                   model("pixels", "pixels"),
                   model("rot-0", "rot-0", group="rotated"),
                   model("rot-1", "rot-1", group="rotated")],
        "metrics": ["rankme", "uniformity", "twonn_id", "nc"],
        "score": {"nc_k": 10, "nc_reference_size": 60},
        "oracle": {"knn": True, "transferability": ["logme"], "labels_per_class": [2, 5],
                   "label_budget_seeds": 1},
        "rank": {"primary_metric": "rankme", "bootstrap": 50},
    }
    path = tmp_path / "run.yaml"
    path.write_text(yaml.safe_dump(config))
    env = {**os.environ, "RAY_TMPDIR": os.environ.get("RAY_TMPDIR", "/tmp/ray-zoorank-tests"),
           "COLUMNS": "250"}  # a wide COLUMNS must not widen piped output
    out = subprocess.run(f"{sys.executable} -m zoorank run {path} | cat", shell=True, env=env,
                         capture_output=True, text=True, timeout=540,
                         cwd=Path(__file__).resolve().parents[1])
    assert out.returncode == 0, out.stderr[-3000:]
    lines = out.stdout.splitlines()
    assert lines, out.stderr[-2000:]
    too_long = [line for line in lines if len(line) > PLAIN_WIDTH]
    assert not too_long, too_long
    assert not [line for line in lines if set(line) & BOX], "box borders in plain output"
    # the long model ids are printed whole (folded, not cut with an ellipsis)
    text = "".join(line.strip() for line in lines)
    assert f"{LONG}1" in text.replace(" ", "")
    assert "…" not in out.stdout
    # each verdict once
    for marker in ("top set (", "overtake", "The label-free metrics"):
        hits = [line for line in lines if marker in line]
        assert len(hits) == len(set(hits)), hits
    assert sum("top set (" in line for line in lines) == 1
