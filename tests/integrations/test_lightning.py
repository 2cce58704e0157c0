"""The Lightning callback: a user's Lightning SimCLR on digits, scored every N epochs, and tuned
under Ray Tune with ASHA through the callback (``ssl_digits`` is the user code; its lr 8.0 trial
loses most of its feature rank, see ``test_ray_tune``)."""

from __future__ import annotations

import lightning as L
import pytest
import ray.cloudpickle
import ssl_digits
from ray import tune

from zoorank.integrations.lightning import ProbeCallback
from zoorank.probe import build_probe_set, evaluate

ray.cloudpickle.register_pickle_by_value(ssl_digits)


@pytest.fixture(scope="module")
def probe():
    return build_probe_set({"name": "digits", "source": "sklearn_digits", "limit": 600},
                           input_size=8, samples=128, per_sample=4, mean=ssl_digits.MEAN,
                           std=ssl_digits.STD)


def _trainer(tmp_path, callback, epochs):
    from lightning.pytorch.loggers import CSVLogger

    return L.Trainer(max_epochs=epochs, callbacks=[callback], logger=CSVLogger(tmp_path),
                     enable_progress_bar=False, enable_model_summary=False,
                     enable_checkpointing=False, accelerator="cpu", devices=1)


def test_callback_logs_the_backbone_probe_scores_every_n_epochs(tmp_path, probe):
    import pandas as pd

    config = {"lr": 0.05, "negatives": True, "limit": 256, "batch_size": 64}
    module = ssl_digits.lightning_module(config)
    callback = ProbeCallback(probe, every_n_epochs=2, metrics=["rankme", "lidar"])
    trainer = _trainer(tmp_path, callback, epochs=4)
    trainer.fit(module, ssl_digits.digits_loader(config))
    expected = evaluate(module.backbone, probe, metrics=["rankme", "lidar"])
    assert callback.last.metrics["rankme"] == pytest.approx(expected.metrics["rankme"], rel=1e-6)
    assert float(trainer.callback_metrics["probe/lidar"]) == pytest.approx(
        expected.metrics["lidar"], rel=1e-5)
    log = pd.read_csv(next(tmp_path.rglob("metrics.csv")))
    logged = log.dropna(subset=["probe/rankme"])
    assert len(logged) == 2  # epochs 2 and 4
    assert logged["probe/flag_collapsed"].eq(0).all()


@pytest.mark.slow
@pytest.mark.timeout(600)
def test_asha_through_the_callback_stops_the_collapsing_lightning_trial(ray_session, tmp_path,
                                                                         probe):
    from zoorank.integrations.ray_tune import export_zoo
    from zoorank.zoo import read_zoo_file

    epochs = 2  # max_t 2, grace 1: one rung, at epoch 1 (RankMe ≈ 5.5 against ≈ 3.4 there, measured)
    trainable = tune.with_resources(tune.with_parameters(ssl_digits.train_lightning, probe=probe),
                                    {"cpu": 1.0})
    from ray.tune.schedulers import ASHAScheduler

    tuner = tune.Tuner(
        trainable,
        param_space={"lr": tune.grid_search([0.05, 8.0]), "epochs": epochs, "negatives": True,
                     "limit": 600, "batch_size": 64},
        tune_config=tune.TuneConfig(
            metric="rankme", mode="max", max_concurrent_trials=1,
            scheduler=ASHAScheduler(time_attr="training_iteration", max_t=epochs,
                                    grace_period=1, reduction_factor=2)),
        run_config=tune.RunConfig(name="lightning", storage_path=str(tmp_path / "tune"),
                                  verbose=0),
    )
    grid = tuner.fit()
    by_lr = {r.config["lr"]: r for r in grid}
    healthy, collapsing = by_lr[0.05], by_lr[8.0]
    assert healthy.error is None and collapsing.error is None
    assert healthy.metrics["training_iteration"] == epochs
    assert collapsing.metrics["training_iteration"] < epochs  # stopped early by ASHA
    ranked = sorted(grid, key=lambda r: r.metrics["rankme"], reverse=True)
    assert ranked[-1].config["lr"] == 8.0  # ranks last
    zoo = read_zoo_file(export_zoo(grid, tmp_path / "tune" / "lightning", ssl_digits.BACKBONE,
                                   probe))
    assert len(zoo) == 2 and all(s.checkpoint.endswith("backbone.safetensors") for s in zoo)
