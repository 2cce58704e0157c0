"""The run config (contract 4): the pydantic schema, one class per section.

Reading a YAML file into it, with errors that name the file and field, is
:mod:`zoorank.config.loading`; the hashes that fingerprint configs and files are
:mod:`zoorank.config.digests`.

Every field has a description (a string just below it, or ``Field(description=...)``): the JSON
schema (``zoorank config schema``) and the docs' config reference are generated from them.
Relative paths in a config file are taken from the file's folder (:mod:`zoorank.config.paths`).
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
from pydantic.json_schema import GenerateJsonSchema

from zoorank.config.suggest import did_you_mean
from zoorank.metrics import registry
from zoorank.metrics.heads.classifier import DEFAULT_CLASSIFIER_METRIC, DEFAULT_CLASSIFIER_METRIC_WITH_SOURCE
from zoorank.metrics.primary import default_primary
from zoorank.metrics.score_options import OPTIONS

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


#: how the schema's descriptions name relative paths (and docs/reference/config-paths.md explains).
RELATIVE_PATHS = ("A relative path is taken from the folder of the config file (not the working "
                  "directory); absolute paths, `~` and URIs (`s3://`, `gs://`) are used as they are.")


class OneLineSchema(GenerateJsonSchema):
    """Pydantic's JSON schema, with each description on one line (a docstring's line breaks are
    layout, and a description is read in editors' hovers and in tables)."""

    def generate(self, schema: Any, mode: Any = "validation") -> dict[str, Any]:
        return _one_line(super().generate(schema, mode=mode))


def _one_line(node: Any) -> Any:
    if isinstance(node, dict):
        return {k: " ".join(v.split()) if k == "description" and isinstance(v, str)
                else _one_line(v) for k, v in node.items()}
    if isinstance(node, list):
        return [_one_line(v) for v in node]
    return node


class Strict(BaseModel):
    """Base for every config section: unknown keys are errors that name the key; a string just
    below a field is its description (in ``RunConfig.model_json_schema()`` and the docs)."""

    model_config = ConfigDict(extra="forbid", frozen=True, use_attribute_docstrings=True)

    @classmethod
    def model_json_schema(cls, *args: Any, schema_generator: type[GenerateJsonSchema] | None = None,
                          **kwargs: Any) -> dict[str, Any]:
        """The JSON schema (``zoorank config schema``), every description on one line."""
        return super().model_json_schema(*args, schema_generator=schema_generator or OneLineSchema,
                                         **kwargs)


class DatasetSpec(Strict):
    """One set of images every model is run on (an entry of ``datasets:``)."""

    name: Name
    """The dataset's name: its folder in the store and the prefix of its leaderboard columns
    (`<name>/<metric>`). Letters, digits, `_`, `.` and `-`, starting with a letter or digit;
    `prior` is reserved. Required."""
    source: Literal["parquet", "image_folder", "sklearn_digits", "numpy"]
    """Where the images come from: `parquet` (a Parquet file with a column of encoded images),
    `image_folder` (image files under a folder, searched recursively; hidden files skipped),
    `sklearn_digits` (scikit-learn's bundled 8×8 digits, 1,797 images with labels; no `path`) or
    `numpy` (an `.npz` with an `images` array and optional `labels` and `label_names`, or an
    `.npy` images array). Required."""
    path: str | None = Field(default=None, description=(
        "The Parquet file, image folder or `.npz`/`.npy` file: a local path or a URI (`s3://`, "
        "`gs://`; credentials from the environment, never from the URI). Required except for "
        "`sklearn_digits`. " + RELATIVE_PATHS))
    image_column: str = "image"
    """`parquet`: the column of encoded images (bytes, or a struct with a `bytes` field).
    Default `image`."""
    label_column: str | None = None
    """`parquet`: the column of labels (integers, or strings read as class names in the order of
    a `classes.json` beside the file, else sorted). Only the label oracle and `zoorank ask` /
    `label` use labels; the ranking never does. Default: none (no labels)."""
    labels_from_folders: bool = False
    """`image_folder`: take each image's label from its first sub-folder (class names sorted).
    Default `false`."""
    classes: list[str] | None = None
    """Class names of a dataset without labels of its own, for `zoorank ask` and `zoorank label`
    (the labels people give back are these names). Default: none."""
    limit: int | None = Field(default=None, gt=0)
    """Use a seeded, deterministic subset of this many samples (it depends only on `seed` and the
    number of samples). Default: every sample."""
    on_bad_image: Literal["skip", "fail"] = "skip"
    """An image that cannot be decoded: `skip` leaves it out, counted in the manifest and the
    embed summary; `fail` stops the run naming it. Default `skip`."""

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
    """One model, or with a glob one model per matching checkpoint (an entry of ``models:``)."""

    id: Name | None = None
    """The model's id on the leaderboard and in the store. With a glob, the prefix of the ids
    (`<id>-<path below the glob's fixed part>`). Default: for a glob, the path below the glob's
    fixed part; else the architecture name (and the checkpoint's file stem). Required for
    `transformers`, `torchscript` and `python` models without a checkpoint."""
    source: Literal["timm", "transformers", "torchscript", "python"]
    """How the model is built: `timm` (`timm.create_model`), `transformers` (a model directory or
    a hub id from the local Hugging Face cache), `torchscript` (a scripted file) or `python` (a
    function of yours returning an `nn.Module`). Required."""
    name: str
    """`timm`: the architecture (`resnet18`, `convnext_tiny.fb_in1k`, `hf-hub:timm/...`; a glob
    over cached models with `pretrained: true`). `transformers`: a model directory (a relative
    one from the config file's folder when it exists there) or a hub id in the local cache,
    optionally `org/model@revision`. `torchscript`: the scripted file when `checkpoint` is not
    given (a relative path from the config file's folder). `python`: `package.module:function`,
    imported from Python's `sys.path`. Required."""
    checkpoint: str | None = Field(default=None, description=(
        "The weights: a file (`.safetensors`, or a `torch.load` pickle read safely), a URI "
        "(`s3://`, `gs://`), or a glob over either (`runs/*/last.ckpt`: one model per file, ids "
        "from the paths). Default: none (timm and python models are then a seeded random "
        "init). " + RELATIVE_PATHS))
    group: Name | None = None
    """A seed ensemble: models trained alike but for the seed share a group; the NC metric scores
    each group's members against each other. Default: none."""
    family: Name | None = None
    """A family of models whose RankMe / LiDAR values are comparable (one training method);
    the report compares those metrics within a family. Default: none."""
    input_size: int | None = Field(default=None, gt=0)
    """Square input side in pixels (e.g. 32 for CIFAR-sized images). Another size than the
    model's data config turns its zoom off (`crop_pct` 1.0) unless `crop_pct` is given. Default:
    the model's data config (timm, transformers), else 224."""
    mean: tuple[float, float, float] | None = None
    """Per-channel mean subtracted from [0, 1] RGB values. Default: the model's data config, else
    ImageNet's."""
    std: tuple[float, float, float] | None = None
    """Per-channel standard deviation the [0, 1] RGB values are divided by. Default: the model's
    data config, else ImageNet's."""
    interpolation: Literal["bilinear", "bicubic", "nearest"] | None = None
    """The resize filter of the clean view. Default: the model's data config, else `bicubic`."""
    crop_pct: float | None = Field(default=None, gt=0, le=1)
    """The clean view resizes the shorter side to `floor(input_size / crop_pct)` and centre-crops
    `input_size`; 1.0 means no zoom. In (0, 1]. Default: the model's data config, else 1.0."""
    layer: str | None = None
    """Take the output of this named module (e.g. `head.fc`, or a projector) instead of the
    backbone's features; outputs other than (batch, dim) are pooled. Default: the backbone's
    pooled features."""
    pooling: Literal["cls", "mean", "pooler"] = "cls"
    """`transformers`: how the last hidden state becomes one vector: `cls` (token 0), `mean` (mean
    over all tokens) or `pooler` (the model's `pooler_output`). Default `cls`."""
    model_kwargs: dict[str, Any] = Field(default_factory=dict)
    """Keyword arguments of the constructor (`timm.create_model`, or your python function).
    Default: none."""
    state_dict_key: str | None = None
    """The checkpoint entry that holds the state dict (`state_dict`, `model`, ...). Default: the
    top level when every value is a tensor, else the first of `state_dict`, `model`, `module`."""
    strip_prefixes: tuple[str, ...] = ("module.", "model.")
    """Key prefixes removed while every key of the checkpoint carries one and the model's own
    keys do not (DataParallel's `module.`). Default `[module., model.]`."""
    strict: bool = True
    """Load the weights strictly: any missing or unexpected key is an error listing them (a shape
    mismatch is an error either way). Default `true`."""
    trust_checkpoint: bool = False
    """Allow checkpoints that are arbitrary pickles, and TorchScript files: loading them RUNS
    CODE from the file. Only for files you trust. Default `false` (safe loading; a pickle that
    needs code is refused before anything in it runs)."""
    pretrained: bool = False
    """`timm`: load the hub weights from the local Hugging Face cache (`HF_HOME` /
    `HF_HUB_CACHE`, offline); `name` may then be a glob over the cached `timm/*` models.
    Default `false`."""
    state_dict_prefix: str | None = None
    """Keep only the checkpoint keys under this prefix, stripped (projector, head and momentum
    encoder ignored), or a preset: `lightning`, `solo-learn`, `dino-teacher`, `dino-student`,
    `moco` (`zoorank inspect CHECKPOINT` shows which apply). Default: none."""
    datasets: list[Name] | None = None
    """Names of the config's datasets this model is ranked on. Default: every dataset."""
    prior: dict[PriorName, PriorValue] = Field(default_factory=dict)
    """Numbers known about the model without target data (`{imagenet_top1: 76.1, gflops: 4.1}`):
    leaderboard columns `prior/<name>`, compared with the label oracle and checked as confounds.
    Numbers only; not part of the model's fingerprint. Default: none."""
    #: the classifier head (:mod:`zoorank.zoo.label_space`): None (default) keeps a trained head
    #: whose outputs line up with a dataset's classes (torchscript: none unless declared); true
    #: keeps it and makes a head that does not line up a config error; false drops it (features
    #: only, as before heads were kept); a python model's classifier by name (:mod:`zoorank.zoo.heads`).
    #: ``embed.heads: false`` turns every head off.
    head: bool | Annotated[str, Field(pattern=r"^[A-Za-z_]\w*(\.\w+)*$", max_length=200)] | None = None
    """The classifier head: unset keeps a trained head whose outputs line up with a dataset's
    classes; `true` keeps it and makes a head that does not line up a config error; `false` drops
    it (the model is ranked by its features); a name (python models) says which submodule, by its
    dotted path (`fc`, `classifier.3`, `output_net.2`), or which method is the classifier, as
    `true` otherwise. Unset, a python model's head is looked for as `forward_features` +
    `forward_head`, then `head` (a submodule or a method), `fc`, `classifier`. `embed.heads: false`
    turns every head off. Default: unset."""
    label_map: dict[Name, dict[str | int, Annotated[int, Field(ge=0)]] | Literal["imagenet"]] = (
        Field(default_factory=dict))
    """Per dataset name, how its classes map to the head's outputs: `{class name or index: head
    output index}` (every class mapped, to distinct outputs), or `imagenet` (WordNet ids into
    ImageNet-1k's order). Default: the identity where the numbers of classes agree."""

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

    from_tune: str = Field(description=(
        "The `zoo.yaml` written by `zoorank tune`, or the experiment folder holding it "
        "(`<store>/tune/<experiment>`): a local path or a URI; the relative paths inside it are "
        "taken from its own folder. Required. " + RELATIVE_PATHS))


def _model_entry_kind(value: Any) -> str:
    if isinstance(value, dict):
        return "from_tune" if "from_tune" in value else "model"
    return "from_tune" if isinstance(value, FromTuneSpec) else "model"


ModelEntry = Annotated[
    Annotated[ModelSpec, Tag("model")] | Annotated[FromTuneSpec, Tag("from_tune")],
    Discriminator(_model_entry_kind),
]


class ViewSpec(Strict):
    """One view of the images (an entry of ``views:``): the clean view, or an augmentation."""

    name: Name
    """The view's name (a folder of the store; augmented metrics are reported as
    `<metric>@<view>`). Required."""
    recipe: str | None = None
    """The augmentation recipe: `clean` (no augmentation) or `simclr` (random resized crop, flip,
    colour jitter, grayscale, blur). Default: the view's name."""
    samples: int | None = Field(default=None, gt=0)
    """Augmented views: how many clean samples get views (a seeded subset shared by views with
    the same number). Default: every sample."""
    per_sample: int = Field(default=1, gt=0)
    """Augmented views: views per sample, q (LiDAR needs q >= 2). Default 1 (the clean view)."""

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
    """``embed:``: how the EMBED stage runs the models over the images."""

    batch_size: int = Field(default=64, gt=0)
    """Images per forward pass. Default 64."""
    models_per_actor: int | None = Field(default=None, gt=0)
    """Models one embedding task holds and runs on every batch it reads (one read, many models).
    Default: as many as fit in `actor_memory_gb`."""
    actor_memory_gb: float = Field(default=4.0, gt=0)
    """Memory budget of one embedding task's models, in GiB (each model's size estimated from
    its parameters); decides how many models share a task when `models_per_actor` is unset.
    Default 4.0."""
    num_actors: int | None = Field(default=None, gt=0)
    """Embedding tasks that run at once. Default: one per GPU on GPU; on CPU up to 4 sharing the
    cores."""
    num_cpus_per_actor: float = Field(default=0.5, gt=0)
    """CPUs Ray reserves for each embedding task (fractions share a core); on GPU also its torch
    threads (rounded down, at least 1). Default 0.5."""
    device: Literal["auto", "cpu", "cuda"] = "auto"
    """`auto`: one GPU per embedding task when the cluster has GPUs or its autoscaler can add
    some, else the CPU. `cuda` waits for GPUs (`gpu_wait_seconds`). Default `auto`."""
    precision: Literal["auto", "fp32", "bf16", "fp16"] = "auto"
    """Forward precision. `auto`: fp32 on CPU; on GPU bf16 where the GPU supports it, else fp16
    (the manifest records what was used). Default `auto`."""
    gpu_wait_seconds: float = Field(default=600.0, gt=0)
    """With GPUs wanted and none in the cluster yet: seconds to wait for the autoscaler to add
    them before the run stops with a config error. Default 600."""
    allow_cpu_torch: bool = False
    """Run GPU-scheduled tasks on CPU torch where a worker has no CUDA (tests with fake GPU
    resources; also `ZOORANK_GPU_AS_CPU=1`). Never for real runs. Default `false`."""
    heads: bool = True
    """Keep classifier heads: each model's logits beside its features, from the same forward
    (see the models' `head`); `false` turns every head off. Default `true`."""


def _metric_option(name: str, **constraints: Any) -> Any:
    """A ``score:`` field for a metric option: its default (and meaning) from the registry."""
    opt = OPTIONS[name]
    default = list(opt.default) if isinstance(opt.default, tuple) else opt.default
    return Field(default=opt.default, description=f"{opt.doc}. Default {default}.", **constraints)


class ScoreOptions(Strict):
    """``score:``: how the SCORE stage computes the metrics. The metric options (declared beside
    their metrics in zoorank.metrics) take their defaults from the registry; this class adds their
    types and bounds."""

    max_samples: int | None = Field(default=None, gt=0)
    """Cap on the clean samples scored per model (a deterministic subset). Default: every
    sample."""
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
    """CPUs Ray reserves for each scoring task (fractions share a core). Default 0.5."""
    resample_folds: int = Field(default=8, ge=0)
    """Rank uncertainty: every ranked metric is computed again on this many disjoint folds of
    the images, giving rank intervals, p(best) and the top set. 0 turns them off; 1 is refused.
    Default 8."""
    resample_fraction: float = Field(default=0.5, gt=0, le=1)
    """Share of the images the folds are dealt from (the fold bootstrap rescales the spread to
    the full sample, so a share below 1 trades interval precision for scoring time). In (0, 1].
    Default 0.5."""

    @model_validator(mode="after")
    def _folds(self) -> ScoreOptions:
        if self.resample_folds == 1:
            raise ValueError("resample_folds: use 0 (no rank intervals) or at least 2 folds")
        return self


class OracleSpec(Strict):
    """``oracle:``: label-based measures of each model, to check the label-free ranking against.
    Only datasets with labels get them; the label-free ranking never reads labels."""

    knn: bool = False
    """Weighted kNN accuracy on the oracle's test split. Default `false`."""
    knn_k: int = Field(default=20, gt=0)
    """kNN: neighbours k. Default 20."""
    knn_temperature: float = Field(default=0.07, gt=0)
    """kNN: temperature of the similarity weights. Default 0.07."""
    linear_probe: bool = False
    """Linear-probe (logistic regression) accuracy on the oracle's test split. Default `false`."""
    recall_at_1: bool = False
    """Recall@1 (the nearest neighbour has the same label). Default `false`."""
    r_auroc: bool = False
    """R-AUROC: how well each per-sample uncertainty (NC and its baselines) predicts a Recall@1
    error. Default `false`."""
    loss_data_curve: bool = False
    """The loss-data curve of a probe and its reducers (SDL, eSC, MDL). Default `false`."""
    sdl_eps: tuple[float, ...] = (0.5, 0.2)
    """Loss-data curve: the loss thresholds ε of SDL and eSC. Default [0.5, 0.2]."""
    loss_data_points: int = Field(default=8, gt=1)
    """Loss-data curve: training-set sizes, log-uniformly spaced. Default 8."""
    loss_data_seeds: int = Field(default=3, gt=0)
    """Loss-data curve: probe seeds per size. Default 3."""
    loss_data_steps: int | None = Field(default=None, gt=0)
    """Loss-data curve: optimiser updates per probe. Default: the probe's own."""
    test_fraction: float = Field(default=0.5, gt=0, lt=1)
    """Share of the labelled samples held out as the oracle's test split (stratified, seeded).
    In (0, 1). Default 0.5."""
    transferability: list[str] = []
    """Few-label transferability scores (`logme`, `h_score`, `nleep`, `gbc`, ...) and their
    label-budget curve: each score on seeded subsets of the train split with k labels per class,
    ranked against the kNN or linear-probe oracle (one of them must be on). Default: none."""
    labels_per_class: tuple[int, ...] = (5, 10, 25, 50, 100)
    """Label-budget curve: the labels per class k. Default [5, 10, 25, 50, 100]."""
    label_budget_seeds: int = Field(default=3, gt=0)
    """Label-budget curve: seeded subsets per k. Default 3."""

    @model_validator(mode="after")
    def _budget_needs_reference(self) -> OracleSpec:
        known = registry.few_label_scores()
        unknown = [t for t in self.transferability if t not in known]
        if unknown:
            raise ValueError(f"transferability: unknown score(s) {unknown}"
                             f"{did_you_mean(unknown[0], known)}; known: {list(known)}")
        if self.transferability and not (self.knn or self.linear_probe):
            raise ValueError("transferability: the label-budget curve is measured against the "
                             "kNN or linear-probe oracle; set knn: true or linear_probe: true")
        if any(k < 1 for k in self.labels_per_class):
            raise ValueError(f"labels_per_class: every entry must be >= 1, got "
                             f"{list(self.labels_per_class)}")
        return self


class RankOptions(Strict):
    """``rank:``: how the RANK stage orders the models."""

    aggregation: Literal["rank_product", "mean_rank", "borda"] = "rank_product"
    """How per-dataset ranks combine into one order: `rank_product` (weighted geometric mean),
    `mean_rank` (weighted mean) or `borda` (weighted Borda count). Default `rank_product`."""
    dataset_weights: dict[str, float] = Field(default_factory=dict)
    """Weight of each dataset in the aggregation, by name (non-negative; unnamed datasets weigh
    1). Default: equal weights."""
    primary_metric: str | None = None
    """The metric that orders the leaderboard; it must be a ranking metric this config computes.
    Default: per dataset, the first of the preference order that the config computes and that
    ranks (nearly) every model there."""
    classifier_metric: str | None = None
    """The label-free accuracy estimate that orders the models with a classifier head; DoC, ATC
    and COT need `source:`. Default: COT with `source:`, else the nuclear norm."""
    bootstrap: int = Field(default=1000, ge=0)
    """Bootstrap replicates of the metric-vs-oracle agreement's intervals (Kendall, Spearman,
    regret); 0 turns the intervals off. Default 1000."""
    top_k: int = Field(default=3, gt=0)
    """Agreement: the k of the top-k recall (how many of the oracle's top k the metric's top k
    holds). Default 3."""
    confidence: float = Field(default=0.95, gt=0, lt=1)
    """Level of the rank intervals (the share of fold-bootstrap replicates they cover) and of the
    top set (the Model Confidence Set at level 1 − confidence). In (0, 1). Default 0.95."""
    resamples: int = Field(default=1000, gt=0)
    """Fold-bootstrap replicates behind the rank intervals, p(best) and the top set.
    Default 1000."""


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
