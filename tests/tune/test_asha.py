"""ASHA on a space with a collapsing configuration (VICReg without its variance term), local Ray."""

from __future__ import annotations

import pytest

from zoorank.tune.config import parse_tune_config
from zoorank.tune.search import run_search


@pytest.mark.timeout(300)
def test_asha_stops_a_collapsing_vicreg_early_and_it_scores_lowest(ray_session, tmp_path):
    # VICReg without its variance term (μ = 0) shrinks towards a constant: its RankMe drops below
    # the healthy runs' already at the first report. Two at a time, healthy grid points first, so
    # the collapsing ones meet a populated first rung. A healthy seed that reports below the other
    # healthy seed at a rung is in the rung's lower half and may be stopped too (ASHA's cutoff is the
    # median of what the rung holds, and which of the two reports first is a race): only the first
    # healthy run to reach each rung is sure to go on, so at least one healthy run finishes.
    config = parse_tune_config({
        "store": str(tmp_path / "store"),
        "dataset": {"name": "digits", "source": "sklearn_digits", "limit": 900},
        "backbone": {"name": "small_cnn", "width": 32, "depth": 3},
        "method": "vicreg",
        "epochs": 2,  # grace 1, reduction 2: one rung, at epoch 1 (as with 3 epochs)
        "batch_size": 128,
        "lr": 3.0e-3,
        "proj_hidden": 128,
        "proj_dim": 64,
        "probe": {"samples": 128, "per_sample": 4},
        "objective": {"metric": "rankme"},
        "space": {"var_weight": {"grid": [25.0, 0.0]}, "seed": {"grid": [0, 1]}},
        "search": {"name": "collapse", "scheduler": "asha", "grace_period": 1,
                   "reduction_factor": 2, "max_concurrent_trials": 2},
    }, "test")
    frame = run_search(config, verbose=False)
    collapsing = frame["param_var_weight"] == 0.0
    assert (frame.loc[~collapsing, "status"] == "completed").any()
    assert (frame.loc[collapsing, "status"] == "stopped").all()
    assert (frame.loc[collapsing, "reports"] < config.epochs).all()
    # lowest at every report it made, against the healthy runs' same reports
    for row in frame[collapsing].itertuples():
        for i, value in enumerate(row.trajectory):
            healthy = [t[i] for t in frame.loc[~collapsing, "trajectory"]]
            assert value < min(healthy)
    assert frame.loc[collapsing, "final"].max() < frame.loc[~collapsing, "final"].min()
    assert not frame.loc[collapsing, "selected"].any()
