"""A plain PyTorch training loop tuned under Ray Tune + ASHA through zoorank's wrapper.

The user code is ``ssl_digits.train`` (SimCLR on digits). Its lr 8.0 trial learns nothing (the
loss stays at log(2N − 1)) and its features lose most of their rank: on 600 digits, RankMe ≈ 3.4
then 4.3 against ≈ 6.5 then 7.9 for lr 0.05 (measured; ≈ 2–3.5 against ≈ 7–9 on all 1797), so
ASHA stops it at the first rung and it ranks last, in Tune's results and in a ``zoorank run`` over
the exported zoo file.
"""

from __future__ import annotations

import math

import numpy as np
import pytest
import ray.cloudpickle
import ssl_digits
from ray import tune

from zoorank.integrations.ray_tune import ProbeReporter, search
from zoorank.metrics import registry
from zoorank.probe import build_probe_set

ray.cloudpickle.register_pickle_by_value(ssl_digits)  # the workers cannot import tests/


@pytest.fixture(scope="module")
def probe():
    return build_probe_set({"name": "digits", "source": "sklearn_digits", "limit": 600},
                           input_size=8, samples=128, per_sample=4, mean=ssl_digits.MEAN,
                           std=ssl_digits.STD)


def test_reporter_outside_tune_returns_metrics_and_reports_nan_as_the_floor(probe):
    import torch

    report = ProbeReporter(probe, metrics=["rankme", "cluster_learnability"])
    values = report(lambda x: torch.full((len(x), 4), float("nan")), epoch=1)
    assert values["rankme"] == registry.tune_floors()["rankme"] and values["flag_nonfinite"] == 1.0
    assert values["epoch"] == 1.0 and report.reports == 1


@pytest.mark.slow
@pytest.mark.timeout(600)
def test_asha_stops_the_collapsing_plain_loop_trial_and_zoorank_run_ranks_it_last(
        ray_session, tmp_path, probe):
    from zoorank.config.loading import parse_config
    from zoorank.pipeline import run_all
    from zoorank.store import Store

    epochs = 2  # max_t 2, grace 1: one rung, at epoch 1
    outcome = search(
        ssl_digits.train, probe,
        {"lr": tune.grid_search([0.05, 8.0]), "epochs": epochs, "negatives": True, "limit": 600,
         "batch_size": 64},
        model=ssl_digits.BACKBONE, metric="rankme", max_t=epochs, grace_period=1,
        reduction_factor=2, storage_path=tmp_path / "tune", name="plain",
        cpus_per_trial=1.0, max_concurrent_trials=1, metrics=["rankme", "lidar"])
    by_lr = {r.config["lr"]: r for r in outcome.grid}
    healthy, collapsing = by_lr[0.05], by_lr[8.0]
    assert healthy.metrics["training_iteration"] == epochs
    assert collapsing.metrics["training_iteration"] < epochs  # stopped by ASHA
    assert collapsing.metrics["rankme"] < healthy.metrics["rankme"]
    # the zoo file rebuilds both backbones, and zoorank run ranks the collapsing one last, by the
    # search's objective, which the zoo records beside it
    from zoorank.zoo import read_zoo_objective

    assert read_zoo_objective(outcome.zoo_file) == "rankme"
    config = parse_config(probe.run_config([{"from_tune": str(outcome.zoo_file)}],
                                           str(tmp_path / "store"), metrics=["lidar", "rankme"]))
    run_all(config)
    store = Store(config.store)
    board = store.read_frame("leaderboard")
    metrics = store.read_metrics()
    rankme = metrics[metrics.metric == "rankme"].set_index("model_id")["value"]
    ids = {lr: f"trial-{r.metrics['trial_id']}" for lr, r in by_lr.items()}
    assert rankme[ids[8.0]] < rankme[ids[0.05]]
    # the stored score is the one the trial reported with its last checkpoint
    assert math.isclose(rankme[ids[0.05]], healthy.metrics["rankme"], rel_tol=1e-4)
    assert board.sort_values("rank")["model_id"].iloc[-1] == ids[8.0]
    assert np.isfinite(rankme.to_numpy()).all()
