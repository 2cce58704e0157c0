"""Label-free Ray Tune for a plain PyTorch training function ``train(config, report)``.

The user's function trains as it always does and calls ``report(model, **extra)`` every epoch (or
every N steps) with the module whose features are ranked (a backbone). ``report`` scores it on the
probe set (:func:`zoorank.probe.evaluate`) and, inside a Tune trial, calls ``ray.tune.report`` with
the metrics (``<metric>``, ``flag_<flag>``, the ``extra`` values) and a checkpoint directory
holding ``backbone.safetensors`` (the module's ``state_dict``) and ``probe.json``. Outside Tune it
only returns the metrics::

    def train(config, report):
        model = Backbone(width=config["width"]); ...
        for epoch in range(config["epochs"]):
            ...  # your loop
            report(model, epoch=epoch + 1, train_loss=loss)

    outcome = search(train, probe, {"lr": tune.grid_search([1e-3, 1e-2])},
                     model={"source": "python", "name": "mynets:backbone"},
                     metric="lidar", max_t=10, storage_path="/tmp/tune", name="sweep")
    outcome.zoo_file   # zoo.yaml: every trial's last backbone, for ``models: {from_tune: ...}``

ASHA's time unit is Tune's ``training_iteration`` (one per ``report``). ``model`` is the zoo entry
that rebuilds the backbone (``source``/``name``/``model_kwargs``, contract 4), or a function of the
trial's config returning it; the probe set's preprocessing is added, so ``zoorank run`` embeds the
backbone as the probe did.
"""

from __future__ import annotations

import json
import math
import os
import tempfile
import warnings
from collections.abc import Callable, Mapping, Sequence
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from zoorank.metrics import registry
from zoorank.probe import ProbeSet, evaluate

# one checkpoint per report of short trials forces frequent experiment snapshots: the normal case
os.environ.setdefault("TUNE_WARN_EXCESSIVE_EXPERIMENT_CHECKPOINT_SYNC_THRESHOLD_S", "0")

#: value reported for a metric that is undefined on a trial's features (its worst).

__all__ = ["BACKBONE_FILE", "ProbeReporter", "SearchOutcome", "export_zoo", "in_tune_trial",
           "report_to_tune", "save_backbone", "search", "trainable", "trial_spec"]

BACKBONE_FILE = "backbone.safetensors"
REPORT_FILE = "probe.json"


def in_tune_trial() -> bool:
    """Whether this code runs inside a Ray Tune trial (a Tune session is active)."""
    try:
        from ray import tune
    except ImportError:
        return False
    with warnings.catch_warnings():
        warnings.simplefilter("ignore")
        try:
            return tune.get_context().get_trial_id() is not None
        except Exception:  # no session machinery at all
            return False


def save_backbone(module: Any, directory: str | os.PathLike[str]) -> Path:
    """``<directory>/backbone.safetensors``: the module's state dict (CPU copies, unshared)."""
    from safetensors.torch import save_file

    state = {k: v.detach().to("cpu").clone().contiguous() for k, v in module.state_dict().items()}
    path = Path(directory) / BACKBONE_FILE
    save_file(state, str(path))
    return path


def report_to_tune(metrics: Mapping[str, float], module: Any | None = None,
                   info: Mapping[str, Any] | None = None) -> None:
    """``ray.tune.report(metrics, checkpoint=...)`` with the module's backbone file and
    ``probe.json`` (metrics + ``info``) in the checkpoint; no checkpoint when ``module`` is None."""
    from ray import tune

    if module is None:
        tune.report(dict(metrics))
        return
    with tempfile.TemporaryDirectory() as directory:
        save_backbone(module, directory)
        with open(os.path.join(directory, REPORT_FILE), "w") as f:
            json.dump({"metrics": dict(metrics), **dict(info or {})}, f, default=str)
        tune.report(dict(metrics), checkpoint=tune.Checkpoint.from_directory(directory))


class ProbeReporter:
    """The ``report`` a training function gets: ``report(model, **extra) -> metrics``.

    Scores ``model`` on ``probe`` (``metrics``/``options``/``device``/``precision`` as
    :func:`zoorank.probe.evaluate`); in a Tune trial reports them with a checkpoint.
    """

    def __init__(self, probe: ProbeSet, *, metrics: Sequence[str] | None = None,
                 options: Mapping[str, Any] | None = None, device: Any = None,
                 precision: str | None = None, config: Mapping[str, Any] | None = None) -> None:
        self.probe = probe
        self.metrics = list(metrics) if metrics is not None else None
        self.options = options
        self.device = device
        self.precision = precision
        self.config = dict(config or {})
        self.reports = 0

    def __call__(self, model: Any, **extra: float) -> dict[str, float]:
        result = evaluate(model, self.probe, metrics=self.metrics, options=self.options,
                          device=self.device, precision=self.precision)
        values = result.as_dict()
        for name, value in result.metrics.items():
            if math.isnan(value) and name in registry.tune_floors():
                # ASHA compares numbers: an undefined value (NaN/Inf features, a collapsed CL)
                # is reported as the metric's worst, as the TUNE stage reports a diverged trial
                values[name] = registry.tune_floors()[name]
        values |= {k: float(v) for k, v in extra.items()}
        values["probe_seconds"] = result.seconds["total"]
        self.reports += 1
        if in_tune_trial():
            report_to_tune(values, model, {"config": self.config, "report": self.reports,
                                           "errors": result.errors})
        return values


def trainable(train: Callable[[dict[str, Any], ProbeReporter], Any], probe: ProbeSet,
              **reporter: Any) -> Callable[[dict[str, Any]], None]:
    """A Tune function trainable calling ``train(config, report)``; wrap it in
    ``tune.with_parameters`` for big probe sets (:func:`search` does)."""

    def run(config: dict[str, Any], probe: ProbeSet = probe) -> None:
        train(config, ProbeReporter(probe, config=config, **reporter))

    run.__name__ = getattr(train, "__name__", "train")
    return run


def _with_probe(train, reporter_kwargs):
    def run(config: dict[str, Any], probe: ProbeSet) -> None:
        import torch

        kwargs = dict(reporter_kwargs)
        torch.set_num_threads(int(kwargs.pop("_threads", 1) or 1))
        train(config, ProbeReporter(probe, config=config, **kwargs))

    run.__name__ = getattr(train, "__name__", "train")
    return run


@dataclass
class SearchOutcome:
    """What :func:`search` returns: Tune's ResultGrid, its experiment folder and the zoo file."""

    grid: Any
    path: Path
    zoo_file: Path | None


def _gpus(gpus_per_trial: float | str) -> float:
    if gpus_per_trial != "auto":
        return float(gpus_per_trial)
    import ray

    return 1.0 if float(ray.cluster_resources().get("GPU", 0.0)) > 0 else 0.0


def search(
    train: Callable[[dict[str, Any], ProbeReporter], Any],
    probe: ProbeSet,
    param_space: Mapping[str, Any],
    *,
    model: Mapping[str, Any] | Callable[[dict[str, Any]], Mapping[str, Any]] | None,
    metric: str = "rankme_aug",
    mode: str = "max",
    max_t: int = 10,
    grace_period: int = 1,
    reduction_factor: float = 2.0,
    scheduler: str = "asha",
    num_samples: int = 1,
    storage_path: str | os.PathLike[str],
    name: str = "zoorank-tune",
    cpus_per_trial: float = 0.5,
    gpus_per_trial: float | str = "auto",
    max_concurrent_trials: int | None = None,
    num_threads: int = 1,
    metrics: Sequence[str] | None = None,
    options: Mapping[str, Any] | None = None,
    precision: str | None = None,
    verbose: int = 0,
    keep_checkpoints: int | None = 1,
) -> SearchOutcome:
    """Run ``train`` under Ray Tune with ASHA on a label-free ``metric``; export the zoo file.

    Starts a local Ray when none is running. ``gpus_per_trial="auto"``: one GPU per trial when
    the cluster has GPUs (the reporter then embeds on the model's device). ``model``: the zoo
    entry that rebuilds the backbone (None: no zoo file). Returns the ResultGrid, the experiment
    folder and ``<experiment>/zoo.yaml``. ``keep_checkpoints``: the reports' checkpoints each
    trial keeps (None: every one; the zoo file lists each trial's last).
    """
    from ray import tune
    from ray.tune.schedulers import ASHAScheduler, FIFOScheduler

    from zoorank.runtime import ensure_ray

    ensure_ray()
    if metrics is not None:  # the objective is always reported: ASHA prunes on it
        metrics = list(dict.fromkeys([metric, *metrics]))
    reporter = {"metrics": metrics, "options": options, "precision": precision,
                "_threads": num_threads}
    fn = tune.with_parameters(_with_probe(train, reporter), probe=probe)
    fn = tune.with_resources(fn, {"cpu": cpus_per_trial, "gpu": _gpus(gpus_per_trial)})
    sched = (ASHAScheduler(time_attr="training_iteration", max_t=max_t,
                           grace_period=min(grace_period, max_t), reduction_factor=reduction_factor)
             if scheduler == "asha" else FIFOScheduler())
    storage = str(Path(storage_path).expanduser().resolve())
    tuner = tune.Tuner(
        fn,
        param_space=dict(param_space),
        tune_config=tune.TuneConfig(metric=metric, mode=mode, scheduler=sched,
                                    num_samples=num_samples,
                                    max_concurrent_trials=max_concurrent_trials,
                                    reuse_actors=False),
        run_config=tune.RunConfig(name=name, storage_path=storage, verbose=verbose,
                                  checkpoint_config=tune.CheckpointConfig(
                                      num_to_keep=keep_checkpoints)),
    )
    grid = tuner.fit()
    path = Path(storage) / name
    zoo_file = (export_zoo(grid, path, model, probe, objective=(metric, mode))
                if model is not None else None)
    return SearchOutcome(grid, path, zoo_file)


def trial_spec(model: Mapping[str, Any], model_id: str, checkpoint: str, *, input_size: int,
               interpolation: str, mean: Sequence[float], std: Sequence[float],
               crop_pct: float = 1.0, **fields: Any):
    """The zoo entry of one trial's checkpoint: ``model`` (``source``/``name``/``model_kwargs``,
    and any entry field it sets itself) with the search's preprocessing, the id and checkpoint;
    ``fields``: further entry fields (``group``, ``family``). The one place a trial becomes a
    :class:`zoorank.config.ModelSpec` (``zoorank tune``'s built-in trainer and :func:`search`)."""
    from zoorank.config import ModelSpec

    entry = {"input_size": input_size, "interpolation": interpolation, "crop_pct": crop_pct,
             "mean": list(mean), "std": list(std), **fields, **dict(model)}
    entry["id"] = entry.get("id") or model_id
    entry["checkpoint"] = checkpoint
    return ModelSpec.model_validate(entry)


def export_zoo(
    grid: Any,
    path: str | os.PathLike[str],
    model: Mapping[str, Any] | Callable[[dict[str, Any]], Mapping[str, Any]],
    probe: ProbeSet | None = None,
    objective: tuple[str, str] | None = None,
) -> Path:
    """``<path>/zoo.yaml``: one entry per trial with a checkpoint (its last), id ``trial-<id>``.

    Each entry is ``model`` (or ``model(config)``) with the probe set's preprocessing and the
    checkpoint's ``backbone.safetensors``; ``zoorank run`` reads it through ``from_tune: <path>``.
    ``objective``: the search's (metric, mode), written beside it (``zoo_objective.json``) so that
    the zoo's board is ordered by it unless the run config names another metric.
    """
    from zoorank.config import ModelSpec
    from zoorank.zoo import write_zoo_file, write_zoo_objective

    specs = []
    for result in grid:
        if result.checkpoint is None:
            continue
        entry = dict(model(dict(result.config or {})) if callable(model) else model)
        trial_id = result.metrics.get("trial_id") or Path(result.path).name
        checkpoint = str(Path(result.checkpoint.path) / BACKBONE_FILE)
        if probe is None:
            specs.append(ModelSpec.model_validate(
                {**entry, "id": entry.get("id") or f"trial-{trial_id}", "checkpoint": checkpoint}))
            continue
        g = probe.geometry
        specs.append(trial_spec(entry, f"trial-{trial_id}", checkpoint, input_size=g.input_size,
                                interpolation=g.interpolation, crop_pct=g.crop_pct,
                                mean=probe.mean, std=probe.std))
    if objective is not None:
        write_zoo_objective(path, *objective)
    return write_zoo_file(Path(path) / "zoo.yaml", specs)
