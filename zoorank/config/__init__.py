"""The run config (contract 4): the pydantic schema, one class per section.

The sections live in :mod:`.schema_base` (shared base), :mod:`.dataset_spec`, :mod:`.model_spec`
and :mod:`.stage_options`; every name is re-exported here (``from zoorank.config import ModelSpec``).

Reading a YAML file into it, with errors that name the file and field, is
:mod:`zoorank.config.loading`; the hashes that fingerprint configs and files are
:mod:`zoorank.config.digests`.

Every field has a description (a string just below it, or ``Field(description=...)``): the JSON
schema (``zoorank config schema``) and the docs' config reference are generated from them.
Relative paths in a config file are taken from the file's folder (:mod:`zoorank.config.paths`).
"""

from __future__ import annotations

from typing import Any

from pydantic import Field, field_validator, model_validator

from zoorank.config.dataset_spec import DatasetSpec
from zoorank.config.model_spec import FromTuneSpec, ModelEntry, ModelSpec
from zoorank.config.schema_base import (
    DEFAULT_METRICS,
    LABEL_FREE_METRICS,
    NAME_PATTERN,
    RELATIVE_PATHS,
    Name,
    OneLineSchema,
    PriorName,
    PriorValue,
    Strict,
)
from zoorank.config.stage_options import (
    EmbedOptions,
    OracleSpec,
    RankOptions,
    ScoreOptions,
    ViewSpec,
)
from zoorank.config.suggest import did_you_mean
from zoorank.metrics import registry
from zoorank.metrics.heads.classifier import DEFAULT_CLASSIFIER_METRIC, DEFAULT_CLASSIFIER_METRIC_WITH_SOURCE
from zoorank.metrics.primary import default_primary

__all__ = [
    "DEFAULT_METRICS",
    "LABEL_FREE_METRICS",
    "NAME_PATTERN",
    "RELATIVE_PATHS",
    "DatasetSpec",
    "EmbedOptions",
    "FromTuneSpec",
    "ModelEntry",
    "ModelSpec",
    "Name",
    "OneLineSchema",
    "OracleSpec",
    "PriorName",
    "PriorValue",
    "RankOptions",
    "RunConfig",
    "ScoreOptions",
    "Strict",
    "ViewSpec",
    "case_clash",
]


def _metrics_description() -> str:
    """The ``metrics:`` field's description, naming every metric registered now."""
    return ("Label-free metrics to compute, by name (known: " + ", ".join(registry.config_names())
            + "). Default: all of them.")


class RunConfig(Strict):
    """A zoorank run: the images, the models, and how they are embedded, scored and ranked."""

    @classmethod
    def model_json_schema(cls, *args: Any, **kwargs: Any) -> dict[str, Any]:
        """The JSON schema, the known metrics read from the registry now (one registered after
        import, by a family module found later or a notebook, is listed too)."""
        schema = super().model_json_schema(*args, **kwargs)
        schema["properties"]["metrics"]["description"] = _metrics_description()
        return schema

    store: str = Field(default="./zoorank-store", description=(
        "Where everything is written: a folder or a URI (`s3://`, `gs://`). `--store` on the "
        "command line overrides it (a relative `--store` is taken from the working directory). "
        "Default `./zoorank-store`, beside the config file. " + RELATIVE_PATHS))
    seed: int = 0
    """Seeds every random choice (sample subsets, augmented views, folds, probes). Default 0."""
    datasets: list[DatasetSpec] = Field(min_length=1)
    """The images every model is run on (at least one). Required."""
    models: list[ModelEntry] = Field(min_length=1)
    """The zoo: model entries, and `{from_tune: ...}` entries for the checkpoints of a
    `zoorank tune` search (one mapping is read as a list of one). Required."""
    views: list[ViewSpec] = Field(default_factory=lambda: [ViewSpec(name="clean")])
    """The views embedded: the clean view and any augmented views (LiDAR and the augmented
    metrics need one). Default: the clean view only."""
    metrics: list[str] = Field(
        default_factory=lambda: list(DEFAULT_METRICS), description=_metrics_description())
    oracle: OracleSpec | None = None
    """Label-based measures to check the ranking against. Default: none."""
    embed: EmbedOptions = Field(default_factory=EmbedOptions)
    """How EMBED runs (devices, batches, memory)."""
    score: ScoreOptions = Field(default_factory=ScoreOptions)
    """How SCORE computes the metrics (metric options, rank uncertainty)."""
    rank: RankOptions = Field(default_factory=RankOptions)
    """How RANK orders the models."""
    source: Name | None = None
    """The labelled in-distribution dataset (the name of another dataset of the run) on which
    DoC, ATC and COT calibrate a classifier head's accuracy estimate. Default: none (those
    estimates are not computed)."""
    record: str | None = Field(default=None, description=(
        "A calibration record written by `zoorank calibrate` from this team's labelled zoos: RANK "
        "orders the board by its metric (unless `rank.primary_metric` names one) and takes its "
        "shortlist fraction, and the console prints its held-out units and baselines. Default: "
        "the record zoorank ships. " + RELATIVE_PATHS))

    @field_validator("models", mode="before")
    @classmethod
    def _models_mapping(cls, value: Any) -> Any:
        return [value] if isinstance(value, dict) else value

    @field_validator("metrics")
    @classmethod
    def _known_metrics(cls, value: list[str]) -> list[str]:
        known = registry.config_names()
        unknown = [m for m in value if m not in known]
        if unknown:
            raise ValueError(f"unknown metric(s) {unknown}{did_you_mean(unknown[0], known)}; "
                             f"known: {list(known)}")
        return value

    @model_validator(mode="after")
    def _unique_names(self) -> RunConfig:
        for what, names in (
            ("datasets", [d.name for d in self.datasets]),
            ("views", [v.name for v in self.views]),
            ("models", [m.id for m in self.models if isinstance(m, ModelSpec) and m.id]),
        ):
            dupes = sorted({n for n in names if names.count(n) > 1})
            if dupes:
                raise ValueError(f"{what}: duplicate names {dupes}")
            clash = case_clash(names)
            if clash:
                raise ValueError(f"{what}: names {clash[0]!r} and {clash[1]!r} differ only in case; "
                                 "they would share one directory of the store on a "
                                 "case-insensitive file system")
        return self

    @model_validator(mode="after")
    def _source_is_labelled(self) -> RunConfig:
        if self.source is None:
            return self
        spec = next((d for d in self.datasets if d.name == self.source), None)
        if spec is None:
            raise ValueError(f"source: {self.source!r} is not a dataset of this config "
                             f"(datasets: {[d.name for d in self.datasets]})")
        if not spec.has_labels:
            raise ValueError(f"source: dataset {self.source!r} has no labels (set its "
                             "label_column, or labels_from_folders for an image folder)")
        return self

    @model_validator(mode="after")
    def _classifier_metric_known(self) -> RunConfig:
        name = self.classifier_metric
        known = registry.classifier_metrics()
        if name not in known:
            raise ValueError(f"rank.classifier_metric: unknown estimate {name!r}; known: {list(known)}")
        if known[name].notes.get("source") and self.source is None:
            raise ValueError(f"rank.classifier_metric: {name!r} needs a labelled source set; set "
                             "source: to a labelled dataset of the run")
        return self

    @property
    def classifier_metric(self) -> str:
        """The estimate that orders the models with a head: ``rank.classifier_metric``, else COT
        with a ``source:`` set and the nuclear norm without (the shift benchmark's choice)."""
        if self.rank.classifier_metric is not None:
            return self.rank.classifier_metric
        return DEFAULT_CLASSIFIER_METRIC_WITH_SOURCE if self.source else DEFAULT_CLASSIFIER_METRIC

    @property
    def primary_metric(self) -> str | None:
        """The configured primary metric, else the first default candidate the config computes
        (RANK may pass over it per dataset when it ranks too few models there: NC without seed
        ensembles; ``metrics.primary.default_for_coverage``)."""
        return self.rank.primary_metric or default_primary(self.metrics,
                                                           augmented=bool(self.augmented_views))

    @property
    def clean_view(self) -> ViewSpec | None:
        return next((v for v in self.views if v.is_clean), None)

    @property
    def augmented_views(self) -> list[ViewSpec]:
        return [v for v in self.views if not v.is_clean]


def case_clash(names: list[str]) -> tuple[str, str] | None:
    """Two distinct names equal up to case (``casefold``), or None: stores on case-insensitive file
    systems (macOS, Windows, some object-store gateways) would give both one directory."""
    seen: dict[str, str] = {}
    for n in names:
        other = seen.setdefault(n.casefold(), n)
        if other != n:
            return other, n
    return None
