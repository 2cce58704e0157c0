"""``zoorank tune`` with your own training function: ``trainer: {source: python, name: "m:f"}``.

The config's dataset and ``probe`` make the probe set (:func:`zoorank.probe.build_probe_set`, with
the ``backbone``'s ``input_size``/``interpolation``/``mean``/``std``); each trial imports
``name`` on its worker (the driver's ``sys.path`` and working directory travel with it) and calls
``function(config, report)`` with ``config = trainer.params + one point of trainer.space +
{epochs, seed}``. ``report`` (:class:`zoorank.integrations.ray_tune.ProbeReporter`) scores the
module it is given and reports the ``objective`` metrics and a checkpoint to Tune; ASHA prunes on
``objective.metric`` (``max_t`` = ``epochs`` reports). A GPU per trial where the cluster has
GPUs (``search.gpus_per_trial: auto``).

Writes under ``<store>/tune/<experiment>/`` Tune's folders, ``tune_results.parquet`` (one row per
trial: ``trial_id``, ``model_id``, ``config`` JSON, ``status``, ``reports``, ``final``,
``checkpoint``) and ``zoo.yaml`` (every trial's last backbone, from ``trainer.model``), which a run
config reads with ``models: [{from_tune: <that folder>}]``. Local stores only.
"""

from __future__ import annotations

import importlib
import json
import os
import sys
from pathlib import Path
from typing import Any

import pandas as pd

from zoorank.errors import ConfigError
from zoorank.tune.config import TuneConfig

__all__ = ["load_function", "run_user_search"]


def load_function(name: str, paths: list[str] | tuple[str, ...] = ()):
    """The function ``"package.module:function"``; ``paths`` are put on ``sys.path`` first."""
    sys.path.extend(p for p in paths if p not in sys.path and os.path.isdir(p))
    module_name, _, attr = name.partition(":")
    try:
        fn = getattr(importlib.import_module(module_name), attr)
    except (ImportError, AttributeError) as err:
        raise ConfigError(f"trainer.name: cannot import {name!r}: {type(err).__name__}: {err}") \
            from None
    if not callable(fn):
        raise ConfigError(f"trainer.name: {name!r} is not callable")
    return fn


class _Imported:
    """``train(config, report)`` imported by name where it runs (picklable by reference)."""

    def __init__(self, name: str, paths: list[str]) -> None:
        self.name, self.paths = name, paths
        self.__name__ = name.rpartition(":")[2]

    def __call__(self, config: dict[str, Any], report: Any) -> Any:
        return load_function(self.name, self.paths)(config, report)


def run_user_search(config: TuneConfig, address: str | None = None,
                    verbose: bool = True, store: Any = None) -> pd.DataFrame:
    """Run the search of a config with a ``trainer``; returns the ``tune_results`` frame."""
    from zoorank.integrations.ray_tune import search
    from zoorank.probe import build_probe_set
    from zoorank.runtime import ensure_ray
    from zoorank.tune.config import experiment_location, param_space

    trainer = config.trainer
    assert trainer is not None
    store, storage, rel = experiment_location(config, store)
    if not store.is_local:
        raise ConfigError("trainer: a training function's search needs a local store for now")
    paths = [os.getcwd(), *(p for p in sys.path if p and os.path.isdir(p))]
    load_function(trainer.name, paths)  # an import error is a config error, before Ray starts
    bb = config.backbone
    probe = build_probe_set(
        config.dataset, input_size=bb.input_size, samples=config.probe.samples,
        per_sample=config.probe.per_sample, recipe=config.probe.recipe or config.recipe,
        seed=config.probe_seed, interpolation=bb.interpolation, crop_pct=1.0, mean=bb.mean,
        std=bb.std)
    space = param_space(config.model_copy(update={"space": trainer.space}))
    space = {**trainer.params, "epochs": config.epochs, "seed": config.seed, **space}
    ensure_ray(address)
    objective = config.objective
    s = config.search
    outcome = search(
        _Imported(trainer.name, paths), probe, space, model=trainer.model,
        metric=objective.metric, mode=objective.mode, max_t=config.epochs,
        grace_period=s.grace_period, reduction_factor=s.reduction_factor, scheduler=s.scheduler,
        num_samples=s.num_samples, storage_path=storage, name=config.experiment_name,
        cpus_per_trial=s.cpus_per_trial, gpus_per_trial=s.gpus_per_trial,
        max_concurrent_trials=s.max_concurrent_trials, num_threads=s.num_threads,
        metrics=objective.metrics,
        options={"lidar_delta": objective.lidar_delta, "eps": objective.eps,
                 "lidar_delta_mode": objective.lidar_delta_mode},
    )
    frame = results_frame(outcome.grid, objective.metric, config.epochs)
    store.write_parquet(f"{rel}/tune_results.parquet", frame)
    if verbose:
        shown = frame[["model_id", "status", "reports", "final"]].to_string(index=False)
        print(f"zoorank tune: {len(frame)} trials of {trainer.name}, objective "
              f"{objective.metric} ({objective.mode})\n{shown}\nresults: "
              f"{store.path(rel)}/tune_results.parquet  zoo: {outcome.zoo_file or '-'}")
    return frame


def results_frame(grid: Any, metric: str, max_t: int) -> pd.DataFrame:
    """One row per trial (columns: module docstring)."""
    rows = []
    for result in grid:
        m = result.metrics or {}
        reports = int(m.get("training_iteration", 0))
        status = "error" if result.error is not None else (
            "completed" if reports >= max_t else "stopped")
        trial_id = m.get("trial_id") or Path(result.path).name
        rows.append({
            "trial_id": trial_id,
            "model_id": f"trial-{trial_id}",
            "config": json.dumps(result.config, default=str, sort_keys=True),
            "status": status,
            "error": "" if result.error is None else str(result.error)[:500],
            "reports": reports,
            "final": float(m.get(metric, float("nan"))),
            "checkpoint": "" if result.checkpoint is None
            else str(Path(result.checkpoint.path) / "backbone.safetensors"),
        })
    return pd.DataFrame(rows)
