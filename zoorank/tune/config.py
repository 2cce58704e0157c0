"""The tune config: what ``zoorank tune CONFIG`` trains, how it scores trials, what it searches.

YAML validated by pydantic like the run config (unknown keys are errors naming the key). The
top-level hyperparameters (``method``, ``lr``, ``temperature``, ...) are the defaults of every
trial; ``space`` overrides some of them per trial::

    space:
      method: {grid: [simclr, vicreg]}
      lr: {loguniform: [1.0e-4, 1.0e-2]}
      seed: {grid: [0, 1, 2]}          # seed ensembles: trials equal but for the seed share a group
"""

from __future__ import annotations

from pathlib import Path
from typing import Any, Literal

from pydantic import Field, ValidationError, field_validator, model_validator

from zoorank.config import NAME_PATTERN, DatasetSpec, OracleSpec, Strict
from zoorank.config.digests import fingerprint
from zoorank.config.loading import load_yaml, validate_mapping
from zoorank.config.paths import rebase, resolve_dataset
from zoorank.errors import ConfigError
from zoorank.metrics import registry
from zoorank.metrics.score_options import OPTIONS
from zoorank.store import Store
from zoorank.store.layout import TUNE_DIR, tune_dir

METHODS = ("simclr", "vicreg", "byol")


def _tune_metric(name: str) -> str:
    known = registry.tune_metrics()
    if name not in known:
        raise ValueError(f"{name!r} is not a Tune objective metric; choose one of {list(known)}")
    return name


class TrialParams(Strict):
    """The hyperparameters of one trial (every field is searchable through ``space``)."""

    method: Literal["simclr", "vicreg", "byol"] = "simclr"
    seed: int = 0
    lr: float = Field(default=1e-3, gt=0)
    weight_decay: float = Field(default=1e-4, ge=0)
    batch_size: int = Field(default=128, ge=2)
    #: SimCLR: InfoNCE temperature.
    temperature: float = Field(default=0.2, gt=0)
    #: VICReg: λ (invariance), μ (variance), ν (covariance); μ = 0 collapses.
    inv_weight: float = Field(default=25.0, ge=0)
    var_weight: float = Field(default=25.0, ge=0)
    cov_weight: float = Field(default=1.0, ge=0)
    #: BYOL: EMA decay of the target network.
    ema: float = Field(default=0.99, ge=0, lt=1)
    proj_hidden: int = Field(default=256, gt=0)
    proj_dim: int = Field(default=64, gt=0)


SEARCHABLE = tuple(TrialParams.model_fields)


class BackboneSpec(Strict):
    #: ``small_cnn`` or a timm architecture name (randomly initialised).
    name: str = "small_cnn"
    #: square input side in pixels; default: the dataset's native size (its first image).
    input_size: int | None = Field(default=None, gt=0)
    #: small_cnn: channels of the first stage and number of stages.
    width: int = Field(default=32, gt=0)
    depth: int = Field(default=3, gt=0)
    #: timm ResNets: 3×3 stride-1 stem without max-pool for small images.
    small_stem: bool = True
    model_kwargs: dict[str, Any] = Field(default_factory=dict)
    mean: tuple[float, float, float] = (0.5, 0.5, 0.5)
    std: tuple[float, float, float] = (0.25, 0.25, 0.25)
    interpolation: Literal["bilinear", "bicubic", "nearest"] = "bilinear"

    @property
    def factory(self) -> str:
        return "small_cnn" if self.name == "small_cnn" else "timm_backbone"

    def factory_kwargs(self) -> dict[str, Any]:
        if self.name == "small_cnn":
            return {"width": self.width, "depth": self.depth, **self.model_kwargs}
        return {"name": self.name, "small_stem": self.small_stem, **self.model_kwargs}


class ProbeSpec(Strict):
    """The fixed unlabeled probe set: ``samples`` clean images × ``per_sample`` augmented views."""

    samples: int = Field(default=256, ge=2)
    per_sample: int = Field(default=8, ge=2)
    #: augmentation recipe of the probe views; default: the training recipe.
    recipe: str | None = None
    #: report (embed the probe set, compute the metrics, checkpoint) every N epochs ...
    every: int = Field(default=1, gt=0)
    #: ... or every N optimiser steps instead, when set.
    every_steps: int | None = Field(default=None, gt=0)


class ObjectiveSpec(Strict):
    #: the metric ASHA prunes on and the winner is chosen by.
    #: chosen by leave-one-search-space-out on six digits sweeps (benchmarks/results/tune_benchmark.md);
    #: lidar, the former default, anti-correlated with accuracy there
    metric: str = "rankme_aug"
    #: further metrics reported at every step (for comparisons; each costs its own time).
    report: list[str] = Field(default_factory=list)
    mode: Literal["max", "min"] = "max"
    #: features scored: backbone representation, projector output, or both (the objective then
    #: uses the representation; projector metrics are reported as ``projector_<metric>``).
    features: Literal["representation", "projector", "both"] = "representation"
    #: the metric options the trial's metrics read (defaults: the registry's, as ``score:``).
    lidar_delta: float = Field(default=OPTIONS["lidar_delta"].default, ge=0)
    lidar_delta_mode: Literal["absolute", "relative"] = OPTIONS["lidar_delta_mode"].default
    eps: float = Field(default=OPTIONS["eps"].default, gt=0)

    @field_validator("metric")
    @classmethod
    def _known_metric(cls, value: str) -> str:
        return _tune_metric(value)

    @field_validator("report")
    @classmethod
    def _known_report(cls, value: list[str]) -> list[str]:
        return [_tune_metric(v) for v in value]

    @property
    def metrics(self) -> list[str]:
        return [self.metric] + [m for m in self.report if m != self.metric]

    @property
    def key(self) -> str:
        """Name of the reported value the search optimises."""
        return f"projector_{self.metric}" if self.features == "projector" else self.metric


class SearchSpec(Strict):
    #: experiment folder under ``<store>/tune/``; default: ``tune-<config fingerprint>``, so an
    #: interrupted search resumes when rerun with the same config and a changed one starts afresh.
    name: str | None = Field(default=None, pattern=NAME_PATTERN)
    algorithm: Literal["grid", "random", "optuna"] = "grid"
    #: grid: repetitions of the grid; random / optuna: number of trials.
    num_samples: int = Field(default=1, gt=0)
    scheduler: Literal["asha", "fifo"] = "asha"
    #: ASHA: reports before the first rung, and the rung spacing factor.
    grace_period: int = Field(default=1, gt=0)
    reduction_factor: float = Field(default=2.0, gt=1)
    max_concurrent_trials: int | None = Field(default=None, gt=0)
    #: fractional CPUs per trial (two cores run four trials at 0.5).
    cpus_per_trial: float = Field(default=0.5, gt=0)
    #: "auto": one GPU per trial when the cluster has GPUs, else none.
    gpus_per_trial: float | Literal["auto"] = "auto"
    #: torch threads inside a trial.
    num_threads: int = Field(default=1, gt=0)
    resume: bool = True
    max_failures: int = Field(default=0, ge=0)

    @field_validator("gpus_per_trial")
    @classmethod
    def _non_negative(cls, value: float | str) -> float | str:
        if value != "auto" and float(value) < 0:
            raise ValueError("must be 'auto' or a number >= 0")
        return value


class ParamSpace(Strict):
    """One searched parameter: exactly one of grid, choice, uniform, loguniform."""

    grid: list[Any] | None = None
    choice: list[Any] | None = None
    uniform: tuple[float, float] | None = None
    loguniform: tuple[float, float] | None = None

    @model_validator(mode="after")
    def _exactly_one(self) -> ParamSpace:
        given = [
            k for k in ("grid", "choice", "uniform", "loguniform") if getattr(self, k) is not None
        ]
        if len(given) != 1:
            raise ValueError(f"give exactly one of grid, choice, uniform, loguniform (got {given})")
        kind = given[0]
        if kind in ("grid", "choice") and not getattr(self, kind):
            raise ValueError(f"{kind} is empty")
        if kind in ("uniform", "loguniform"):
            low, high = getattr(self, kind)
            if not low < high:
                raise ValueError(f"{kind}: low must be < high, got [{low}, {high}]")
            if kind == "loguniform" and low <= 0:
                raise ValueError(f"loguniform: bounds must be > 0, got [{low}, {high}]")
        return self

    @property
    def kind(self) -> str:
        return next(
            k for k in ("grid", "choice", "uniform", "loguniform") if getattr(self, k) is not None
        )

    def values_to_check(self) -> list[Any]:
        value = getattr(self, self.kind)
        return list(value)


class TrainerSpec(Strict):
    """Your own training function instead of the built-in methods (``zoorank.tune.user``).

    ``name``: ``"package.module:function"``, called as ``function(config, report)`` in each trial
    (``config`` = ``params`` + one point of ``space`` + ``epochs`` and ``seed``; ``report(model,
    **extra)`` scores ``model`` on the probe set and reports to Tune). ``model``: the zoo entry that
    rebuilds the reported module (``source``/``name``/``model_kwargs``) for ``zoo.yaml``.
    """

    source: Literal["python"] = "python"
    name: str = Field(pattern=r"^[A-Za-z_][\w.]*:[A-Za-z_]\w*$")
    model: dict[str, Any] | None = None
    params: dict[str, Any] = Field(default_factory=dict)
    space: dict[str, ParamSpace] = Field(default_factory=dict)


class TuneConfig(TrialParams):
    store: str = "./zoorank-store"
    #: seeds the probe set (drawn once per search); trial training seeds are the ``seed`` param.
    probe_seed: int = 0
    dataset: DatasetSpec
    #: labelled data for the oracle; default: ``dataset`` when it has labels.
    oracle_dataset: DatasetSpec | None = None
    backbone: BackboneSpec = Field(default_factory=BackboneSpec)
    epochs: int = Field(default=10, gt=0)
    #: training augmentation recipe (``zoorank.data.views.VIEW_RECIPES``).
    recipe: str = "simclr"
    probe: ProbeSpec = Field(default_factory=ProbeSpec)
    objective: ObjectiveSpec = Field(default_factory=ObjectiveSpec)
    space: dict[str, ParamSpace] = Field(default_factory=dict)
    search: SearchSpec = Field(default_factory=SearchSpec)
    oracle: OracleSpec | None = None
    #: your own training function (``source: python``) instead of ``method``; None = built-in.
    trainer: TrainerSpec | None = None
    #: also list every reported (per-epoch) checkpoint in zoo.yaml, not only each trial's last.
    export_epochs: bool = False
    device: Literal["auto", "cpu", "cuda"] = "auto"
    precision: Literal["auto", "fp32", "bf16", "fp16"] = "auto"

    @field_validator("space", mode="before")
    @classmethod
    def _known_parameters(cls, value: Any) -> Any:
        if isinstance(value, dict):
            unknown = [k for k in value if k not in SEARCHABLE]
            if unknown:
                raise ValueError(f"unknown parameter(s) {unknown}; searchable: {list(SEARCHABLE)}")
        return value

    @field_validator("space")
    @classmethod
    def _valid_values(cls, value: dict[str, ParamSpace]) -> dict[str, ParamSpace]:
        for name, spec in value.items():
            ranged = spec.kind in ("uniform", "loguniform")
            if ranged and TrialParams.model_fields[name].annotation is not float:
                raise ValueError(f"{name}: {spec.kind} needs a real-valued parameter; use grid "
                                 "or choice")
            for v in spec.values_to_check():
                try:
                    TrialParams.model_validate({name: v})
                except ValidationError as err:
                    msg = err.errors()[0]["msg"]
                    if name == "method":
                        msg = f"unknown method {v!r}; known: {list(METHODS)}"
                    raise ValueError(f"{name}: {msg} (value {v!r})") from None
        return value

    @model_validator(mode="after")
    def _consistent(self) -> TuneConfig:
        if self.search.algorithm == "grid":
            sampled = [k for k, s in self.space.items() if s.kind in ("uniform", "loguniform")]
            if sampled:
                raise ValueError(
                    f"search.algorithm 'grid' needs grid or choice values; {sampled} are "
                    "ranges (use algorithm 'random' or 'optuna')"
                )
        if (
            self.search.algorithm == "optuna"
            and self.space
            and all(
                s.kind in ("grid", "choice") and len(s.values_to_check()) == 1
                for s in self.space.values()
            )
        ):
            raise ValueError("search.algorithm 'optuna' needs a space with something to search")
        return self

    def trial_params(self, overrides: dict[str, Any] | None = None) -> TrialParams:
        """The defaults of every trial, updated by one point of the space."""
        base = {k: getattr(self, k) for k in SEARCHABLE}
        return TrialParams.model_validate({**base, **(overrides or {})})

    @property
    def labelled_dataset(self) -> DatasetSpec | None:
        if self.oracle_dataset is not None:
            return self.oracle_dataset
        has_labels = self.dataset.label_column or self.dataset.source == "sklearn_digits"
        return self.dataset if has_labels or self.dataset.labels_from_folders else None

    @property
    def experiment_name(self) -> str:
        return self.search.name or f"tune-{self.fingerprint()[:10]}"

    def fingerprint(self) -> str:
        """What decides the trials' results: everything but where and how fast they run."""
        dumped = self.model_dump(mode="json", exclude={"store", "oracle", "oracle_dataset"})
        for k in ("resume", "max_concurrent_trials", "cpus_per_trial", "gpus_per_trial", "name"):
            dumped["search"].pop(k, None)
        return fingerprint(dumped)


def parse_tune_config(data: Any, source: str = "<tune config>") -> TuneConfig:
    """Validate a mapping as a TuneConfig; raises ConfigError naming the file and field."""
    config = validate_mapping(TuneConfig, data, source)
    if config.oracle is not None and config.labelled_dataset is None:
        raise ConfigError(
            f"{source}: oracle: needs labels: give 'oracle_dataset' or a 'dataset' with a "
            "label_column"
        )
    return config


def load_tune_config(path: str | Path, *, store: str | None = None) -> TuneConfig:
    """Load and validate a tune config; its relative paths (``store``, the datasets' ``path``) are
    taken from its folder, as a run config's (:mod:`zoorank.config.paths`); ``store`` overrides
    the config's store (``--store``, relative to the working directory)."""
    config = parse_tune_config(load_yaml(path), str(path))
    base = Path(path).parent
    config = config.model_copy(update={
        "store": rebase(config.store, base.absolute()),
        "dataset": resolve_dataset(config.dataset, base),
        "oracle_dataset": (None if config.oracle_dataset is None
                           else resolve_dataset(config.oracle_dataset, base))})
    if store is not None:
        config = config.model_copy(update={"store": store})
    return config


def gpus_per_trial(config: TuneConfig, cluster_gpus: float) -> float:
    """GPUs of one trial: ``search.gpus_per_trial``, or with ``auto`` one when the cluster has GPUs
    and the config does not ask for the CPU."""
    value = config.search.gpus_per_trial
    if value == "auto":
        return 1.0 if cluster_gpus > 0 and config.device != "cpu" else 0.0
    return float(value)


def param_space(config: TuneConfig) -> dict[str, Any]:
    """The Tune search space of ``config.space`` for its algorithm."""
    from ray import tune

    space: dict[str, Any] = {}
    for name, spec in config.space.items():
        kind = spec.kind
        if kind == "grid" or (kind == "choice" and config.search.algorithm == "grid"):
            values = spec.grid if kind == "grid" else spec.choice
            if config.search.algorithm == "optuna":
                space[name] = tune.choice(values)
            else:
                space[name] = tune.grid_search(values)
        elif kind == "choice":
            space[name] = tune.choice(spec.choice)
        elif kind == "uniform":
            space[name] = tune.uniform(*spec.uniform)
        else:
            space[name] = tune.loguniform(*spec.loguniform)
    return space


def experiment_location(config: TuneConfig, store: Store | None = None) -> tuple[Store, str, str]:
    """(store, Tune storage_path, experiment path relative to the store); ``store``: the config's
    store, when the caller holds it (the command's one ``Store`` of that URI)."""
    store = Store(config.store) if store is None else store
    # an object store is handed to Tune as (its filesystem, a path on it): the URI, with its
    # query and any credentials, never reaches Tune's files, logs or warnings
    return store, store.path(TUNE_DIR), tune_dir(config.experiment_name)
