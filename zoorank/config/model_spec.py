"""The ``models:`` section: a :class:`ModelSpec` per model (or glob), or a ``from_tune`` entry."""

from __future__ import annotations

from dataclasses import dataclass
from typing import Annotated, Any, Literal

from pydantic import (
    Discriminator,
    Field,
    GetCoreSchemaHandler,
    GetJsonSchemaHandler,
    Tag,
    field_validator,
    model_validator,
)
from pydantic_core import core_schema

from zoorank.config.schema_base import (
    RELATIVE_PATHS,
    Name,
    PriorName,
    PriorValue,
    Strict,
)


@dataclass(frozen=True)
class SourceTraits:
    """What the config layer knows of a model source (the rest is :mod:`zoorank.zoo.sources`,
    whose ``register`` adds a new source here): how its ``name`` is read and its head default."""

    #: its names make readable ids (timm's architectures): ``id`` is optional without a checkpoint
    name_is_id: bool = False
    #: what ``name`` is on disk: ``"no"`` (an architecture, a factory), ``"file"`` (the model file
    #: when there is no ``checkpoint``) or ``"folder"`` (a folder, else a hub id of the cache)
    name_is_path: Literal["no", "file", "folder"] = "no"
    #: its head is looked for unless ``head: false`` (False: only with ``head: true`` or a name)
    head_by_default: bool = True


#: the model sources the schema accepts, in the order the config reference lists them.
MODEL_SOURCES: dict[str, SourceTraits] = {
    "timm": SourceTraits(name_is_id=True),
    "transformers": SourceTraits(name_is_path="folder"),
    "torchscript": SourceTraits(name_is_path="file", head_by_default=False),
    "python": SourceTraits(),
}


def source_traits(name: str) -> SourceTraits:
    """The traits of the model source ``name`` (KeyError for a source nobody registered)."""
    return MODEL_SOURCES[name]


def _known_source(value: str) -> str:
    if value not in MODEL_SOURCES:
        raise ValueError(f"unknown model source {value!r}; the sources: "
                         + ", ".join(MODEL_SOURCES))
    return value


class _SourceName(str):
    """A model source's name: one of :data:`MODEL_SOURCES` (read when validating and when the
    schema is made, so a source registered later is accepted and listed)."""

    @classmethod
    def __get_pydantic_core_schema__(cls, source: Any, handler: GetCoreSchemaHandler) -> Any:
        return core_schema.no_info_after_validator_function(_known_source,
                                                            core_schema.str_schema())

    @classmethod
    def __get_pydantic_json_schema__(cls, schema: Any, handler: GetJsonSchemaHandler) -> Any:
        return {"enum": list(MODEL_SOURCES), "type": "string"}



class ModelSpec(Strict):
    """One model, or with a glob one model per matching checkpoint (an entry of ``models:``)."""

    id: Name | None = None
    """The model's id on the leaderboard and in the store. With a glob, the prefix of the ids
    (`<id>-<path below the glob's fixed part>`). Default: for a glob, the path below the glob's
    fixed part; else the architecture name (and the checkpoint's file stem). Required for
    `transformers`, `torchscript` and `python` models without a checkpoint."""
    source: _SourceName
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
        if (self.id is None and not globbed and self.checkpoint is None
                and not source_traits(self.source).name_is_id):
            # timm architecture names make a readable default id; others need one.
            named = " or ".join(n for n, t in MODEL_SOURCES.items() if t.name_is_id)
            raise ValueError(f"'id' is required unless 'checkpoint' is a glob or source is {named}")
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
