"""The TUNE stage: a Ray Tune search over SSL hyperparameters driven by a label-free objective.

``run_search(config)`` prepares the data and the probe set once on the driver (both go to the
object store through ``tune.with_parameters``), runs one function trainable per point of the space
(fractional CPUs, one GPU where the cluster has them), prunes with ASHA on the label-free metric,
and writes under ``<store>/tune/<experiment>/``:

* Tune's own experiment state and each trial's last checkpoint (every report's with
  ``export_epochs``): ``backbone.safetensors`` + the full training state. A rerun of an
  interrupted search (same config, so the same experiment folder) resumes it: finished trials are
  kept, unfinished ones continue bit-exactly from their last checkpoint. (Tune does not restore
  ASHA's rungs, so pruning after a resume compares only results reported since.)
* ``tune_results.parquet`` (:mod:`zoorank.tune.results`) and ``zoo.yaml`` (every trial's final
  backbone as a ``source: python`` model, for ``models: {from_tune: <experiment dir>}``).

With ``oracle:`` every trial's final backbone is also scored with labels (kNN / linear probe) and
the label-free choice is compared with the labelled one (regret, Kendall τ).
"""

from __future__ import annotations

import math
import os
import signal
import sys
import threading
import warnings
from typing import Any

import pandas as pd
from ray.tune import Callback

from zoorank.errors import ConfigError
from zoorank.store.redact import redact
from zoorank.store.uris import without_credentials
from zoorank.tune import results as R
from zoorank.tune.config import (
    TuneConfig,
    experiment_location,
    gpus_per_trial,
    load_tune_config,
    param_space,
)
from zoorank.tune.objective import build_probe_set
from zoorank.tune.setup import SearchSetup
from zoorank.tune.trial import train_trial
from zoorank.tune.trial_oracle import add_oracle

# Tune warns whenever checkpoints force frequent experiment snapshots; with one checkpoint per
# report of short trials that is the normal case here.
os.environ.setdefault("TUNE_WARN_EXCESSIVE_EXPERIMENT_CHECKPOINT_SYNC_THRESHOLD_S", "0")

__all__ = [
    "SearchSetup",
    "prepare_search",
    "run_search",
    "run_tune",
]



# ------------------------------------------------------------------------------------------------
# the driver


def prepare_search(config: TuneConfig, address: str | None = None) -> SearchSetup:
    """Check the config, load and decode the dataset, draw the probe set, then start/join Ray.

    Config problems (unknown recipe or backbone, a probe set larger than the data) raise
    ConfigError before Ray starts.
    """
    from zoorank.data import load_samples
    from zoorank.data.views import get_recipe
    from zoorank.runtime import cluster_gpus, ensure_ray
    from zoorank.tune.models import build_backbone
    from zoorank.tune.trainers import decode_images
    from zoorank.zoo import Geometry

    for field, recipe in (("recipe", config.recipe), ("probe.recipe", config.probe.recipe)):
        if recipe is not None:
            try:
                get_recipe(recipe)
            except ConfigError as err:
                raise ConfigError(f"{field}: {err}") from None
    bb = config.backbone
    try:
        build_backbone(bb.factory, bb.factory_kwargs())
    except Exception as err:
        raise ConfigError(
            f"backbone: cannot build {bb.name!r}: {type(err).__name__}: {err}"
        ) from None
    table = load_samples(config.dataset, config.probe_seed)
    if config.probe.samples > len(table):
        raise ConfigError(
            f"probe.samples: {config.probe.samples} exceeds the {len(table)} samples of dataset "
            f"{config.dataset.name!r}"
        )
    images = decode_images(table.images)
    input_size = bb.input_size or max(images[0].shape[:2])
    geometry = Geometry(input_size, bb.interpolation, 1.0)
    recipe = config.probe.recipe or config.recipe
    probe = build_probe_set(
        table, config.probe.samples, config.probe.per_sample, recipe, geometry, config.probe_seed
    )
    ensure_ray(address)
    device = config.device
    if device == "auto":
        device = "cuda" if gpus_per_trial(config, cluster_gpus()) > 0 else "cpu"
    return SearchSetup(
        base=config.trial_params().model_dump(),
        factory=bb.factory,
        model_kwargs=bb.factory_kwargs(),
        images=images,
        input_size=input_size,
        interpolation=bb.interpolation,
        mean=bb.mean,
        std=bb.std,
        recipe=config.recipe,
        epochs=config.epochs,
        probe=probe,
        objective=config.objective,
        every=config.probe.every,
        every_steps=config.probe.every_steps,
        device=device,
        precision=config.precision,
        num_threads=config.search.num_threads,
    )


def _batch_sizes(config: TuneConfig) -> list[int]:
    spec = config.space.get("batch_size")
    return [int(v) for v in spec.values_to_check()] if spec else [config.batch_size]


#: credentials Ray Tune copies into each trial actor's ``runtime_env`` ``env_vars``, which Ray's
#: runtime-env agent then logs in full at INFO level (``runtime_env_agent.log``).
_CREDENTIAL_ENV_VARS = {"AWS_ACCESS_KEY_ID", "AWS_SECRET_ACCESS_KEY", "AWS_SECURITY_TOKEN",
                        "AWS_SESSION_TOKEN"}


def _keep_credentials_out_of_runtime_envs() -> None:
    """Stop Tune propagating AWS credentials through ``runtime_env`` (it would log them). Trial
    actors of a local Ray inherit the driver's environment from the raylet; on a cluster, workers
    take credentials from their own environment or instance role, as every other stage does."""
    try:
        from ray.tune.execution import class_cache
    except ImportError:  # another Ray layout: nothing to do
        return
    names = getattr(class_cache, "ENV_VARS_TO_PROPAGATE", None)
    if isinstance(names, (set, frozenset)):
        class_cache.ENV_VARS_TO_PROPAGATE = set(names) - _CREDENTIAL_ENV_VARS


def build_tuner(config: TuneConfig, setup: SearchSetup, verbose: bool = True, store: Any = None):
    """A new Tuner for the config, or the restored one of an interrupted run of it (``store``:
    the config's, when the caller holds it)."""
    from ray import tune
    from ray.tune.schedulers import ASHAScheduler, FIFOScheduler
    from ray.tune.search import BasicVariantGenerator

    from zoorank.runtime import cluster_gpus

    _keep_credentials_out_of_runtime_envs()
    store, storage, rel = experiment_location(config, store)
    s = config.search
    gpus = gpus_per_trial(config, cluster_gpus())
    trainable = tune.with_resources(
        tune.with_parameters(train_trial, setup=setup), {"cpu": s.cpus_per_trial, "gpu": gpus}
    )
    experiment_path = f"{storage}/{config.experiment_name}"
    # Tune pickles its filesystem into its experiment files: it gets the environment's (or the
    # instance role's) credentials, never ones carried by the store URI
    fs = None if store.is_local else without_credentials(store.fs)
    if s.resume and tune.Tuner.can_restore(experiment_path, storage_filesystem=fs):
        try:
            return tune.Tuner.restore(experiment_path, trainable=trainable, resume_errored=True,
                                      storage_filesystem=fs)
        except Exception as err:  # a state written half-way (killed while saving): start afresh
            warnings.warn(
                f"cannot resume {redact(experiment_path)} ({type(err).__name__}: {redact(err)}); "
                "starting the search afresh",
                stacklevel=2,
            )
    max_t = max(setup.n_reports(b) for b in _batch_sizes(config))
    metric, mode = config.objective.key, config.objective.mode
    if s.scheduler == "asha":
        scheduler = ASHAScheduler(
            time_attr="training_iteration",
            max_t=max_t,
            grace_period=min(s.grace_period, max_t),
            reduction_factor=s.reduction_factor,
        )
    else:
        scheduler = FIFOScheduler()
    max_concurrent = s.max_concurrent_trials
    if s.algorithm == "optuna":
        import optuna
        from ray.tune.search.optuna import OptunaSearch

        search_alg = OptunaSearch(sampler=optuna.samplers.TPESampler(seed=config.probe_seed))
    else:
        # Tune ignores TuneConfig.max_concurrent_trials for a generator passed in: set it here.
        search_alg = BasicVariantGenerator(
            random_state=config.probe_seed, max_concurrent=max_concurrent or 0
        )
        max_concurrent = None
    callbacks = [_RichProgress(metric)] if verbose else []
    return tune.Tuner(
        trainable,
        param_space=param_space(config),
        tune_config=tune.TuneConfig(
            metric=metric,
            mode=mode,
            scheduler=scheduler,
            search_alg=search_alg,
            num_samples=s.num_samples,
            max_concurrent_trials=max_concurrent,
            reuse_actors=False,
        ),
        run_config=tune.RunConfig(
            name=config.experiment_name,
            storage_path=storage,
            storage_filesystem=fs,
            checkpoint_config=tune.CheckpointConfig(
                num_to_keep=None if config.export_epochs else 1
            ),
            failure_config=tune.FailureConfig(max_failures=s.max_failures),
            callbacks=callbacks,
            verbose=0,
        ),
    )


def expected_trials(config: TuneConfig) -> int:
    """Trials the search creates when it runs to the end."""
    grids = [len(p.values_to_check()) for p in config.space.values() if p.kind == "grid"]
    if config.search.algorithm == "grid":
        grids = [len(p.values_to_check()) for p in config.space.values()]
    if config.search.algorithm == "optuna":
        return config.search.num_samples
    return config.search.num_samples * math.prod(grids)


def _fit(tuner):
    """``tuner.fit()``; None when Tune caught a Ctrl-C (it saved the state and returned early).

    Ray 2.60's Tune swaps in its own SIGINT handler for the run and puts the previous one back on
    the first Ctrl-C only; that is the one trace an interrupt leaves (trials it stopped look
    terminated). The previous handler is restored either way.
    """
    main = threading.current_thread() is threading.main_thread()
    before = signal.getsignal(signal.SIGINT) if main else None
    grid = tuner.fit()
    if not main:
        return grid
    interrupted = signal.getsignal(signal.SIGINT) is before and not int(
        os.environ.get("TUNE_DISABLE_SIGINT_HANDLER", "0")
    )
    signal.signal(signal.SIGINT, before)
    return None if interrupted else grid


def run_search(
    config: TuneConfig, address: str | None = None, verbose: bool = True, store: Any = None
) -> pd.DataFrame:
    """Run (or resume) the search of ``config``; returns the ``tune_results`` frame.

    The frame has one row per trial (see :func:`zoorank.tune.results.results_frame`), with the
    oracle columns when ``config.oracle`` is set. It is also written to
    ``<store>/tune/<experiment>/tune_results.parquet`` beside ``zoo.yaml``. ``store``: the
    config's :class:`~zoorank.store.Store`, when the caller holds it (one per command).
    """
    if config.trainer is not None:  # the user's own training function (zoorank.tune.user)
        from zoorank.tune.user import run_user_search

        return run_user_search(config, address=address, verbose=verbose, store=store)
    store, _, rel = experiment_location(config, store)
    check_experiment_matches(config, store, rel)
    setup = prepare_search(config, address)
    store.write_json(f"{rel}/tune_config.json", config.model_dump(mode="json"))
    store.write_json(f"{rel}/tune_fingerprint.json", {"fingerprint": config.fingerprint()})
    tuner = build_tuner(config, setup, verbose=verbose, store=store)
    grid = _fit(tuner)
    if grid is None or len(grid) < expected_trials(config):
        print(
            f"zoorank tune: search interrupted; its state is saved in {store.path(rel)}: rerun "
            "the same command to resume it",
            file=sys.stderr,
        )
        raise KeyboardInterrupt
    frame = R.results_frame(config, setup, grid)
    if config.oracle is not None:
        frame = add_oracle(config, setup, frame)
    frame = R.add_selection(config, frame)
    store.write_parquet(f"{rel}/tune_results.parquet", R.to_parquet_frame(frame))
    R.write_zoo(config, setup, frame, store, rel)
    if verbose:
        R.print_summary(config, frame, store.path(rel))
    return frame


def check_experiment_matches(config: TuneConfig, store: Any, rel: str) -> None:
    """A named experiment folder made by another config is never resumed nor exported as this
    one's (its trials would be stale): ConfigError naming ``search.name``."""
    if not (config.search.resume and store.exists(f"{rel}/tune_fingerprint.json")):
        return
    made_by = store.read_json(f"{rel}/tune_fingerprint.json").get("fingerprint")
    if made_by != config.fingerprint():
        raise ConfigError(
            f"search.name: the experiment {config.experiment_name!r} in {store.name} was made by "
            "a different search config, so its trials cannot be resumed or exported as this "
            "config's; choose another search.name, or delete "
            f"{store.name}/{rel}")


def run_tune(
    config_path: str, store: str | None = None, address: str | None = None
) -> pd.DataFrame:
    """``zoorank tune CONFIG``: load the config (ConfigError → exit 2) and run the search."""
    config = load_tune_config(config_path, store=store)
    return run_search(config, address=address)


class _RichProgress(Callback):
    """A Tune callback printing one line per report (trial, iteration, objective, loss)."""

    def __init__(self, metric: str) -> None:
        self.metric = metric
        self._console = None  # made on first use: a Console cannot be pickled with the Tuner

    @property
    def console(self):
        if self._console is None:
            from rich.console import Console

            self._console = Console(stderr=True, highlight=False)
        return self._console

    def __getstate__(self) -> dict[str, Any]:
        return {"metric": self.metric, "_console": None}

    def on_trial_result(self, iteration, trials, trial, result, **info):
        value = result.get(self.metric)
        shown = "-" if value is None else f"{value:.3f}"
        self.console.print(
            f"[dim]tune[/dim] {trial.trial_id} report {result.get('training_iteration')} "
            f"epoch {result.get('epoch', float('nan')):.2f} {self.metric} {shown} "
            f"loss {result.get('train_loss', float('nan')):.4f}"
        )

    def on_trial_complete(self, iteration, trials, trial, **info):
        self.console.print(f"[dim]tune[/dim] {trial.trial_id} finished")
