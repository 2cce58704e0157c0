"""One trial of the search, run by Ray Tune in a worker: build the SSL trainer from the trial's
hyperparameters, train, and at every report point score the probe set (the label-free objective)
and checkpoint; a diverged trial reports the metrics' floors once and stops.
"""

from __future__ import annotations

import logging
import math
import os
import tempfile
from typing import Any

from zoorank.metrics import registry
from zoorank.tune.config import TrialParams
from zoorank.tune.objective import evaluate_probe
from zoorank.tune.setup import SearchSetup

__all__ = ["make_trainer", "train_trial"]


def make_trainer(setup: SearchSetup, params: TrialParams):
    from zoorank.tune.trainers import SSLTrainer

    return SSLTrainer(
        params,
        setup.factory,
        setup.model_kwargs,
        setup.images,
        setup.geometry,
        setup.mean,
        setup.std,
        setup.recipe,
        setup.epochs,
        device=setup.device,
        precision=setup.precision,
    )


def train_trial(config: dict[str, Any], setup: SearchSetup) -> None:
    """Function trainable: train, and at every report point score the probe set and checkpoint.

    Reports ``epoch``, ``step``, ``train_loss``, ``train_seconds`` (since the last report),
    ``objective_seconds``, ``overhead`` (their ratio), ``diverged`` and the label-free metrics.
    A diverged trial (non-finite loss) reports the metrics' floor values once and stops.
    """
    import json

    import torch
    from ray import tune
    from threadpoolctl import threadpool_limits

    # one trial per fractional CPU: more BLAS/OpenMP threads (numpy, faiss) would only contend
    torch.set_num_threads(setup.num_threads)
    threadpool_limits(setup.num_threads)
    logging.getLogger("ray.train").setLevel(logging.WARNING)  # one INFO line per checkpoint
    params = setup.params(config)
    trainer = make_trainer(setup, params)
    checkpoint = tune.get_checkpoint()
    if checkpoint is not None:
        with checkpoint.as_directory() as directory:
            trainer.load(directory)
    per_report = setup.every_steps or setup.every * trainer.steps_per_epoch
    while trainer.step < trainer.total_steps:
        stats = trainer.train_steps(per_report)
        diverged = not math.isfinite(stats["train_loss"])
        if diverged:
            floor = registry.tune_floors()
            scores = {k: floor[k.removeprefix("projector_")] for k in metric_keys(setup.objective)}
            scores.update(degenerate=1.0, objective_seconds=0.0, probe_embed_seconds=0.0)
        else:
            scores = evaluate_probe(trainer, setup.probe, setup.objective)
        metrics = {
            **scores,
            "epoch": trainer.epoch,
            "step": trainer.step,
            "train_loss": stats["train_loss"],
            "train_seconds": stats["train_seconds"],
            "overhead": scores["objective_seconds"] / max(stats["train_seconds"], 1e-9),
            "diverged": float(diverged),
        }
        with tempfile.TemporaryDirectory() as directory:
            trainer.save(directory)
            with open(os.path.join(directory, "report.json"), "w") as f:
                json.dump({"params": params.model_dump(mode="json"), "metrics": metrics}, f)
            tune.report(metrics, checkpoint=tune.Checkpoint.from_directory(directory))
        if diverged:
            return


def metric_keys(objective) -> list[str]:
    names = list(objective.metrics)
    # a pool metric (CLID) reports its terms too (the registry's requires)
    names += [t for n in objective.metrics for t in registry.info(n).requires if t not in names]
    keys = []
    if objective.features in ("representation", "both"):
        keys += names
    if objective.features in ("projector", "both"):
        keys += [f"projector_{m}" for m in names]
    return keys
