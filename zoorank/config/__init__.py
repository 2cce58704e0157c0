"""The run config (contract 4): the pydantic schema, one class per section.

Reading a YAML file into it, with errors that name the file and field, is
:mod:`zoorank.config.loading`; the hashes that fingerprint configs and files are
:mod:`zoorank.config.digests`.

Relative paths in a config are taken relative to the current working directory (the directory a
user or ``ray job submit --working-dir`` runs from), as the example configs assume.
"""

from __future__ import annotations

from typing import Annotated, Any, Literal

from pydantic import (
    BaseModel,
    ConfigDict,
    Discriminator,
    Field,
    Tag,
    field_validator,
    model_validator,
)

from zoorank.metrics import registry
from zoorank.metrics.classifier import DEFAULT_CLASSIFIER_METRIC, DEFAULT_CLASSIFIER_METRIC_WITH_SOURCE
from zoorank.metrics.options import OPTIONS
from zoorank.metrics.primary import default_primary

NAME_PATTERN = r"^[A-Za-z0-9][A-Za-z0-9_.\-]*$"
Name = Annotated[str, Field(pattern=NAME_PATTERN, max_length=200)]
#: a ``prior:`` name (a leaderboard column ``prior/<name>``) and its value: a finite number, never
#: a string, a bool or null (strict: "76.1" is an error that names the field).
PriorName = Annotated[str, Field(pattern=r"^[A-Za-z][A-Za-z0-9_]*$", max_length=100)]
PriorValue = Annotated[float, Field(strict=True, allow_inf_nan=False)]

#: label-free metrics a run can ask for (config names; zoorank.metrics.registry is the table, and
#: validation reads it live, so a metric registered later is accepted too).
LABEL_FREE_METRICS = registry.config_names()
#: every label-free metric, in this order, unless a config lists its own.
DEFAULT_METRICS = list(LABEL_FREE_METRICS)


class Strict(BaseModel):
    """Base for every config section: unknown keys are errors that name the key."""

    model_config = ConfigDict(extra="forbid", frozen=True)


class DatasetSpec(Strict):
    name: Name
    source: Literal["parquet", "image_folder", "sklearn_digits", "numpy"]
    path: str | None = None
    image_column: str = "image"
    label_column: str | None = None
    labels_from_folders: bool = False
    #: class names of a dataset without labels of its own (``zoorank ask`` / ``zoorank label``)
    classes: list[str] | None = None
    limit: int | None = Field(default=None, gt=0)
    on_bad_image: Literal["skip", "fail"] = "skip"

    @field_validator("name")
    @classmethod
    def _not_prior(cls, name: str) -> str:
        # leaderboard columns are <dataset>/<metric>; prior/<name> holds the models' prior: values
        if name == "prior":
            raise ValueError("'prior' is reserved (the leaderboard's prior/<name> columns)")
        return name

    @property
    def has_labels(self) -> bool:
        """Whether the dataset brings labels of its own (as ``sources.sample_index`` keeps them)."""
        return self.source in ("sklearn_digits", "numpy") or bool(self.label_column) or (
            self.source == "image_folder" and self.labels_from_folders)

    @model_validator(mode="after")
    def _path_required(self) -> DatasetSpec:
        if self.source != "sklearn_digits" and not self.path:
            raise ValueError(f"source {self.source!r} needs a 'path'")
        return self


class ModelSpec(Strict):
    id: Name | None = None
    source: Literal["timm", "transformers", "torchscript", "python"]
    name: str
    checkpoint: str | None = None
    group: Name | None = None
    family: Name | None = None
    #: square input size override (e.g. 32 for CIFAR-sized images); default: timm's data config.
    input_size: int | None = Field(default=None, gt=0)
    mean: tuple[float, float, float] | None = None
    std: tuple[float, float, float] | None = None
    interpolation: Literal["bilinear", "bicubic", "nearest"] | None = None
    crop_pct: float | None = Field(default=None, gt=0, le=1)
    #: output of a named module (e.g. "head.fc" or a projector) instead of the backbone features.
    layer: str | None = None
    #: transformers pooling of the last hidden state.
    pooling: Literal["cls", "mean", "pooler"] = "cls"
    #: keyword arguments for the constructor (timm.create_model / the python factory).
    model_kwargs: dict[str, Any] = Field(default_factory=dict)
    #: key of a nested state dict in the checkpoint ("state_dict", "model", ...); None = auto-detect.
    state_dict_key: str | None = None
    strip_prefixes: tuple[str, ...] = ("module.", "model.")
    strict: bool = True
    #: allow arbitrary pickled checkpoints (executes code from the file!). Off by default.
    trust_checkpoint: bool = False
    #: timm: the hub weights from the local Hugging Face cache (offline); ``name`` may be a glob.
    pretrained: bool = False
    #: the backbone's keys: those under this prefix (stripped; other keys ignored), or a preset
    #: (``lightning``, ``solo-learn``, ``dino-teacher``, ``dino-student``, ``moco``).
    state_dict_prefix: str | None = None
    #: names of the config's datasets this model is ranked on; None = every dataset.
    datasets: list[Name] | None = None
    #: numbers known about the model without target data (``{imagenet_top1: 76.1, gflops: 4.1}``):
    #: leaderboard columns ``prior/<name>``, compared with the oracle and checked as confounds
    #: (:mod:`zoorank.metrics.priors`); not part of the model's fingerprint.
    prior: dict[PriorName, PriorValue] = Field(default_factory=dict)
    #: the classifier head (:mod:`zoorank.zoo.label_space`): None (default) keeps a trained head
    #: whose outputs line up with a dataset's classes (torchscript: none unless declared); true
    #: keeps it and makes a head that does not line up a config error; false drops it (features
    #: only, as before heads were kept); a python model's classifier submodule by its dotted path
    #: (``fc``, ``classifier.3``, ``output_net.2``) or method name (:mod:`zoorank.zoo.heads`), as
    #: true otherwise. ``embed.heads: false`` turns every head off.
    head: bool | Annotated[str, Field(pattern=r"^[A-Za-z_]\w*(\.\w+)*$", max_length=200)] | None = None
    #: per dataset name: how its classes map to the head's outputs, ``{class name or index: head
    #: output index}`` (every class mapped), or ``imagenet`` (WordNet ids into ImageNet-1k's order).
    label_map: dict[Name, dict[str | int, Annotated[int, Field(ge=0)]] | Literal["imagenet"]] = (
        Field(default_factory=dict))

    @model_validator(mode="after")
    def _ids_for_single_files(self) -> ModelSpec:
        globbed = (self.checkpoint is not None and any(c in self.checkpoint for c in "*?[")) or (
            self.pretrained and any(c in self.name for c in "*?[")
        )
        if self.id is None and not globbed and self.checkpoint is None and self.source != "timm":
            # timm architecture names make a readable default id; others need one.
            raise ValueError("'id' is required unless 'checkpoint' is a glob or source is timm")
        return self

    @field_validator("head", mode="before")
    @classmethod
    def _head_words(cls, value: Any) -> Any:
        # "true"/"false" quoted in YAML are the booleans, not submodules of those names
        if isinstance(value, str) and value.strip().lower() in ("true", "false"):
            return value.strip().lower() == "true"
        return value


class FromTuneSpec(Strict):
    """Every trial checkpoint exported by ``zoorank tune`` (its ``zoo.yaml``) becomes a model."""

    from_tune: str


def _model_entry_kind(value: Any) -> str:
    if isinstance(value, dict):
        return "from_tune" if "from_tune" in value else "model"
    return "from_tune" if isinstance(value, FromTuneSpec) else "model"


ModelEntry = Annotated[
    Annotated[ModelSpec, Tag("model")] | Annotated[FromTuneSpec, Tag("from_tune")],
    Discriminator(_model_entry_kind),
]


class ViewSpec(Strict):
    name: Name
    #: augmentation recipe; defaults to the view's name. "clean" means no augmentation.
    recipe: str | None = None
    samples: int | None = Field(default=None, gt=0)
    per_sample: int = Field(default=1, gt=0)

    @property
    def recipe_name(self) -> str:
        return self.recipe or self.name

    @property
    def is_clean(self) -> bool:
        return self.recipe_name == "clean"

    @model_validator(mode="after")
    def _augmented_views_need_q(self) -> ViewSpec:
        if not self.is_clean and self.per_sample < 2:
            raise ValueError("augmented views need per_sample >= 2 (LiDAR needs q >= 2 views)")
        return self


class EmbedOptions(Strict):
    batch_size: int = Field(default=64, gt=0)
    #: models held by one actor; None = as many as fit in ``actor_memory_gb``.
    models_per_actor: int | None = Field(default=None, gt=0)
    actor_memory_gb: float = Field(default=4.0, gt=0)
    num_actors: int | None = Field(default=None, gt=0)
    num_cpus_per_actor: float = Field(default=0.5, gt=0)
    #: "auto": one GPU per embedding task when the cluster has GPUs or its autoscaler config can
    #: add some, else CPU (zoorank.embed).
    device: Literal["auto", "cpu", "cuda"] = "auto"
    precision: Literal["auto", "fp32", "bf16", "fp16"] = "auto"
    #: with device cuda and no GPU in the cluster yet: how long to wait for the autoscaler.
    gpu_wait_seconds: float = Field(default=600.0, gt=0)
    #: run GPU-scheduled tasks on CPU torch where a worker has no CUDA (tests with fake GPU
    #: resources; also ZOORANK_GPU_AS_CPU=1). Never on for real runs.
    allow_cpu_torch: bool = False
    #: keep classifier heads: each model's logits beside its features, from the same forward
    #: (models' ``head:``); false turns every head off.
    heads: bool = True


def _metric_option(name: str, **constraints: Any) -> Any:
    """A ``score:`` field for a metric option: its default (and meaning) from the registry."""
    opt = OPTIONS[name]
    return Field(default=opt.default, description=opt.doc, **constraints)


class ScoreOptions(Strict):
    """``score:``. The metric options (documented in zoorank.metrics.registry, declared beside
    their metrics) take their defaults from the registry; this class adds their types and bounds."""

    #: cap on clean samples used per model (deterministic subset); None = all.
    max_samples: int | None = Field(default=None, gt=0)
    lidar_delta: float = _metric_option("lidar_delta", ge=0)
    lidar_delta_mode: Literal["absolute", "relative"] = _metric_option("lidar_delta_mode")
    eps: float = _metric_option("eps", gt=0)
    alpha_fit_range: tuple[int, int] = _metric_option("alpha_fit_range")
    mle_k: int = _metric_option("mle_k", gt=1)
    cl_chunk_size: int = _metric_option("cl_chunk_size", gt=1)
    coding_rate_eps2: float = _metric_option("coding_rate_eps2", gt=0)
    nc_k: int = _metric_option("nc_k", gt=0)
    nc_reference_size: int = _metric_option("nc_reference_size", gt=1)
    nc_metric: Literal["cosine", "euclidean"] = _metric_option("nc_metric")
    num_cpus_per_actor: float = Field(default=0.5, gt=0)
    #: rank uncertainty (zoorank.metrics.uncertainty): every ranked metric is computed again on
    #: this many disjoint folds of the images (0 = off: no rank intervals) ...
    resample_folds: int = Field(default=8, ge=0)
    #: ... dealt from this share of the images (the fold bootstrap rescales the spread to the
    #: full sample, so a share below 1 trades precision of the interval for scoring time).
    resample_fraction: float = Field(default=0.5, gt=0, le=1)

    @model_validator(mode="after")
    def _folds(self) -> ScoreOptions:
        if self.resample_folds == 1:
            raise ValueError("resample_folds: use 0 (no rank intervals) or at least 2 folds")
        return self


class OracleSpec(Strict):
    knn: bool = False
    knn_k: int = Field(default=20, gt=0)
    knn_temperature: float = Field(default=0.07, gt=0)
    linear_probe: bool = False
    recall_at_1: bool = False
    r_auroc: bool = False
    loss_data_curve: bool = False
    sdl_eps: tuple[float, ...] = (0.5, 0.2)
    #: loss-data curve: log-uniform subset sizes, probe seeds, and updates per probe
    #: (None = the probe's default, zoorank.metrics.loss_data.loss_data_curve).
    loss_data_points: int = Field(default=8, gt=1)
    loss_data_seeds: int = Field(default=3, gt=0)
    loss_data_steps: int | None = Field(default=None, gt=0)
    #: share of labelled samples used as the oracle's test split (stratified, seeded).
    test_fraction: float = Field(default=0.5, gt=0, lt=1)
    #: few-label transferability scores and their label-budget curve (zoorank.oracle.budget): each score
    #: on seeded subsets of the train split with k labels per class, ranked against kNN / probe.
    #: (the registry's few-label scores: logme, h_score, nleep, gbc)
    transferability: list[str] = []
    labels_per_class: tuple[int, ...] = (5, 10, 25, 50, 100)
    label_budget_seeds: int = Field(default=3, gt=0)

    @model_validator(mode="after")
    def _budget_needs_reference(self) -> OracleSpec:
        known = registry.few_label_scores()
        unknown = [t for t in self.transferability if t not in known]
        if unknown:
            raise ValueError(f"transferability: unknown score(s) {unknown}; known: {list(known)}")
        if self.transferability and not (self.knn or self.linear_probe):
            raise ValueError("transferability: the label-budget curve is measured against the "
                             "kNN or linear-probe oracle; set knn: true or linear_probe: true")
        if any(k < 1 for k in self.labels_per_class):
            raise ValueError(f"labels_per_class: every entry must be >= 1, got "
                             f"{list(self.labels_per_class)}")
        return self


class RankOptions(Strict):
    aggregation: Literal["rank_product", "mean_rank", "borda"] = "rank_product"
    dataset_weights: dict[str, float] = Field(default_factory=dict)
    #: metric that orders the leaderboard; None = per dataset, the first of
    #: metrics.primary.PRIMARY_PREFERENCE that the config computes and that ranks (nearly) every
    #: model there (metrics.primary.default_for_coverage). Validated against the registry and
    #: ``metrics:``.
    primary_metric: str | None = None
    #: the label-free accuracy estimate (zoorank.metrics.classifier) that orders the models with
    #: a classifier head; DoC, ATC and COT need ``source:``. Unset: COT with ``source:``, else the
    #: nuclear norm (zoorank.metrics.classifier's defaults, chosen by the shift benchmark).
    classifier_metric: str | None = None
    bootstrap: int = Field(default=1000, ge=0)
    top_k: int = Field(default=3, gt=0)
    #: rank intervals cover this share of the fold-bootstrap replicates, and the top set is the
    #: Model Confidence Set at level 1 − confidence over them (Hansen, Lunde & Nason 2011; the
    #: T_max rule, zoorank.metrics.uncertainty.top_set), closed upward in the leaderboard's order.
    confidence: float = Field(default=0.95, gt=0, lt=1)
    #: fold-bootstrap replicates behind the rank intervals, p_best and the top set.
    resamples: int = Field(default=1000, gt=0)


class RunConfig(Strict):
    store: str = "./zoorank-store"
    seed: int = 0
    datasets: list[DatasetSpec] = Field(min_length=1)
    models: list[ModelEntry] = Field(min_length=1)
    views: list[ViewSpec] = Field(default_factory=lambda: [ViewSpec(name="clean")])
    metrics: list[str] = Field(default_factory=lambda: list(DEFAULT_METRICS))
    oracle: OracleSpec | None = None
    embed: EmbedOptions = Field(default_factory=EmbedOptions)
    score: ScoreOptions = Field(default_factory=ScoreOptions)
    rank: RankOptions = Field(default_factory=RankOptions)
    #: the labelled in-distribution dataset (the name of another dataset of the run) on which
    #: DoC, ATC and COT calibrate a head's estimate (zoorank.metrics.classifier); None: those
    #: estimates are not computed.
    source: Name | None = None

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
            raise ValueError(f"unknown metric(s) {unknown}; known: {list(known)}")
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
