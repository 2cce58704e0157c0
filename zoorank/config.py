"""The run config (contract 4): pydantic schema, YAML loading with field-naming errors, fingerprints.

Relative paths in a config are taken relative to the current working directory (the directory a
user or ``ray job submit --working-dir`` runs from), as the example configs assume.
"""

from __future__ import annotations

import hashlib
import json
from pathlib import Path
from typing import Annotated, Any, Literal

import yaml
from pydantic import (
    BaseModel,
    ConfigDict,
    Discriminator,
    Field,
    Tag,
    ValidationError,
    field_validator,
    model_validator,
)

from zoorank.errors import ConfigError
from zoorank.metrics import registry

NAME_PATTERN = r"^[A-Za-z0-9][A-Za-z0-9_.\-]*$"
Name = Annotated[str, Field(pattern=NAME_PATTERN, max_length=200)]

#: label-free metrics a run can ask for (config names; zoorank.metrics.registry is the table).
LABEL_FREE_METRICS = registry.CONFIG_NAMES
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
    limit: int | None = Field(default=None, gt=0)
    on_bad_image: Literal["skip", "fail"] = "skip"

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

    @model_validator(mode="after")
    def _ids_for_single_files(self) -> ModelSpec:
        globbed = (self.checkpoint is not None and any(c in self.checkpoint for c in "*?[")) or (
            self.pretrained and any(c in self.name for c in "*?[")
        )
        if self.id is None and not globbed and self.checkpoint is None and self.source != "timm":
            # timm architecture names make a readable default id; others need one.
            raise ValueError("'id' is required unless 'checkpoint' is a glob or source is timm")
        return self


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


class ScoreOptions(Strict):
    #: cap on clean samples used per model (deterministic subset); None = all.
    max_samples: int | None = Field(default=None, gt=0)
    lidar_delta: float = Field(default=1e-6, ge=0)
    #: "absolute": Σ_w + δI; "relative": Σ_w + δ·tr(Σ_w)/p·I (spec C; see benchmarks/lidar_delta.py).
    lidar_delta_mode: Literal["absolute", "relative"] = "absolute"
    eps: float = Field(default=1e-7, gt=0)
    alpha_fit_range: tuple[int, int] = (10, 100)
    mle_k: int = Field(default=20, gt=1)
    cl_chunk_size: int = Field(default=10_000, gt=1)
    coding_rate_eps2: float = Field(default=0.5, gt=0)
    nc_k: int = Field(default=100, gt=0)
    nc_reference_size: int = Field(default=5000, gt=1)
    nc_metric: Literal["cosine", "euclidean"] = "cosine"
    num_cpus_per_actor: float = Field(default=0.5, gt=0)


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
    #: (None = the probe's default, zoorank.metrics.oracle.loss_data_curve).
    loss_data_points: int = Field(default=8, gt=1)
    loss_data_seeds: int = Field(default=3, gt=0)
    loss_data_steps: int | None = Field(default=None, gt=0)
    #: share of labelled samples used as the oracle's test split (stratified, seeded).
    test_fraction: float = Field(default=0.5, gt=0, lt=1)
    #: few-label transferability scores and their label-budget curve (zoorank.budget): each score
    #: on seeded subsets of the train split with k labels per class, ranked against kNN / probe.
    transferability: list[Literal["logme", "h_score", "nleep", "gbc"]] = []
    labels_per_class: tuple[int, ...] = (5, 10, 25, 50, 100)
    label_budget_seeds: int = Field(default=3, gt=0)

    @model_validator(mode="after")
    def _budget_needs_reference(self) -> OracleSpec:
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
    #: metric that orders the leaderboard; None = the first of registry.PRIMARY_PREFERENCE that
    #: the config computes. Validated against the registry and ``metrics:``.
    primary_metric: str | None = None
    bootstrap: int = Field(default=1000, ge=0)
    top_k: int = Field(default=3, gt=0)


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

    @field_validator("models", mode="before")
    @classmethod
    def _models_mapping(cls, value: Any) -> Any:
        return [value] if isinstance(value, dict) else value

    @field_validator("metrics")
    @classmethod
    def _known_metrics(cls, value: list[str]) -> list[str]:
        unknown = [m for m in value if m not in LABEL_FREE_METRICS]
        if unknown:
            raise ValueError(f"unknown metric(s) {unknown}; known: {list(LABEL_FREE_METRICS)}")
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

    @property
    def primary_metric(self) -> str | None:
        """The metric that orders the leaderboard (configured, else the registry's default)."""
        return self.rank.primary_metric or registry.default_primary(self.metrics)

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


def _format_location(loc: tuple[Any, ...], data: Any) -> str:
    parts: list[str] = []
    node = data
    for item in loc:
        if isinstance(item, int):
            label = None
            if isinstance(node, list) and 0 <= item < len(node) and isinstance(node[item], dict):
                label = node[item].get("id") or node[item].get("name")
            parts.append(f"[{item}]" + (f"({label})" if label else ""))
            node = node[item] if isinstance(node, list) and 0 <= item < len(node) else None
        else:
            if item in ("model", "from_tune") and not (isinstance(node, dict) and item in node):
                continue
            parts.append(("." if parts else "") + str(item))
            node = node.get(item) if isinstance(node, dict) else None
    return "".join(parts) or "<root>"


def validation_message(err: ValidationError, data: Any, source: str) -> str:
    """One line per problem: ``file: field.path: message``."""
    seen = []
    for e in err.errors():
        where = _format_location(tuple(e["loc"]), data)
        msg = e["msg"].removeprefix("Value error, ")
        if e["type"] == "extra_forbidden":
            msg = "unknown key"
        line = f"{source}: {where}: {msg}"
        if line not in seen:
            seen.append(line)
    return "\n".join(seen)


def parse_config(data: Any, source: str = "<config>") -> RunConfig:
    """Validate a mapping as a RunConfig; raises ConfigError naming the file and field."""
    if not isinstance(data, dict):
        raise ConfigError(f"{source}: the config must be a YAML mapping, got {type(data).__name__}")
    try:
        config = RunConfig.model_validate(data)
    except ValidationError as err:
        raise ConfigError(validation_message(err, data, source)) from None
    _check_primary_metric(config, source)
    return config


def _check_primary_metric(config: RunConfig, source: str) -> None:
    """``rank.primary_metric`` must be a primary-eligible metric that this config computes."""
    name = config.rank.primary_metric
    if name is None:
        return
    allowed = registry.primary_candidates(config.metrics, [v.name for v in config.augmented_views])
    if name in allowed:
        return
    if registry.is_label_free(name) and registry.info(name).primary:
        why = (f"{name!r} is not computed by this config (metrics: {list(config.metrics)}"
               + (f", augmented views: {[v.name for v in config.augmented_views]}"
                  if "@" in name else "") + ")")
    elif registry.is_label_free(name):
        why = f"{name!r} is a diagnostic, not a ranking metric"
    else:
        why = f"unknown metric {name!r}"
    raise ConfigError(f"{source}: rank.primary_metric: {why}; choose one of {allowed}")


def load_yaml(path: str | Path) -> Any:
    path = Path(path)
    if not path.is_file():
        raise ConfigError(f"{path}: config file not found")
    try:
        return yaml.safe_load(path.read_text())
    except yaml.YAMLError as err:
        raise ConfigError(f"{path}: invalid YAML: {err}") from None


def load_config(path: str | Path, *, store: str | None = None) -> RunConfig:
    """Load and validate a run config; ``store`` overrides the config's store (``--store``)."""
    data = load_yaml(path)
    config = parse_config(data, str(path))
    if store is not None:
        config = config.model_copy(update={"store": store})
    return config


def fingerprint(*parts: Any, length: int = 16) -> str:
    """Stable short hash of JSON-serialisable parts (pydantic models are dumped first)."""

    def plain(x: Any) -> Any:
        if isinstance(x, BaseModel):
            return x.model_dump(mode="json")
        return x

    blob = json.dumps([plain(p) for p in parts], sort_keys=True, default=str)
    return hashlib.sha256(blob.encode()).hexdigest()[:length]


def file_digest(path: str | Path, chunk: int = 1 << 20) -> str:
    """sha256 of a file's bytes (checkpoints are fingerprinted by content, not by path)."""
    h = hashlib.sha256()
    with open(path, "rb") as f:
        while block := f.read(chunk):
            h.update(block)
    return h.hexdigest()
