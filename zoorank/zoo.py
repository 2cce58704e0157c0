"""The model zoo: model specs → torch modules + preprocessing, with safe checkpoint loading.

``resolve_models(config)`` turns the config's ``models`` into concrete :class:`ResolvedModel` rows
(globs expanded, ``from_tune`` zoo files read, preprocessing resolved, fingerprints computed)
without building a network or reading weights into memory; ``load_model`` builds one on a device.

Conventions
-----------
* **Input and output.** A loaded model maps a *normalized* float tensor ``(B, 3, H, W)`` (the clean
  view of :class:`Geometry` followed by :class:`Normalization`) to float32 features ``(B, dim)``.
* **Sources.** ``timm``: ``timm.create_model(name, pretrained=False, num_classes=0,
  **model_kwargs)``, i.e. timm's pooled pre-logits features. ``transformers``: ``name`` is a local
  model directory (never ``trust_remote_code``); multimodal configs with a ``vision_config`` (CLIP,
  SigLIP, ...) load their ``<Name>VisionModel``; ``pooling`` is ``cls`` (token 0 of
  ``last_hidden_state``), ``mean`` (mean over *all* tokens of ``last_hidden_state``) or ``pooler``
  (the model's ``pooler_output``); a 4-D ``last_hidden_state`` (conv nets) is global-average-pooled
  for ``cls`` and ``mean``. ``torchscript``: the scripted file is ``checkpoint`` when given, else
  ``name``. ``python``: ``name`` is ``"package.module:function"``, called with ``model_kwargs``; it
  returns an ``nn.Module``.
* **Outputs other than (B, dim)** (a python/torchscript model's output, or a ``layer:``'s) are
  pooled: the first tensor of a tuple/dict; 4-D maps ``(B, C, H, W)`` are global-average-pooled,
  3-D token sequences ``(B, N, C)`` are averaged over tokens, anything else is flattened.
* **Models without a checkpoint** are initialised under torch seed 0, so every actor that builds
  the same spec holds the same weights.
* **Checkpoints.** ``.safetensors`` via ``safetensors.torch.load_file``; anything else through
  ``torch.load(weights_only=True)``: tensors and plain containers only, so a pickle that would run
  code is refused (:class:`CheckpointError`) before anything in it runs. ``trust_checkpoint: true``
  switches to ``weights_only=False`` (arbitrary code from the file runs!). The state dict is the top
  level when every value is a tensor, else the entry named ``state_dict_key``, else the first of
  ``state_dict``/``model``/``module`` (searched a few levels deep; a pickled ``nn.Module`` gives its
  ``state_dict()``). A prefix of ``strip_prefixes`` is removed while every key carries it and the
  model's own keys do not. For timm, checkpoint keys under the architecture's classifier
  (``pretrained_cfg["classifier"]``, e.g. ``fc.*``, ``head.*``) that the headless model lacks are
  dropped, so a checkpoint saved with its classifier loads into the ``num_classes=0`` backbone.
  Missing ``num_batches_tracked`` buffers are ignored. With ``strict`` any other missing or
  unexpected key is an error listing them; a shape mismatch, or a checkpoint sharing no key with the
  model, is an error either way.
* **Fingerprint** = ``fingerprint(zoorank version, digest of the weight bytes, spec)``; the weight
  bytes are the checkpoint file (plus, for transformers, every file of the model directory; for
  torchscript, the scripted file), so a renamed or moved checkpoint keeps its fingerprint. The
  spec part leaves out what does not change the features: ``id``, ``group``, ``family``, the
  checkpoint path and, for transformers/torchscript, ``name`` (a path whose bytes are hashed).
  The code of a ``python`` factory is not hashed: bump a ``model_kwargs`` entry when it changes.

The ``zoo.yaml`` format (written by ``zoorank tune``, read by a ``from_tune`` model entry)
-------------------------------------------------------------------------------------------
A YAML list of model-spec mappings: the fields of :class:`zoorank.config.ModelSpec` (contract 4),
unknown keys are errors. A relative ``checkpoint`` (and a relative ``name`` of a transformers or
torchscript entry) is relative to the directory holding ``zoo.yaml``, so a tune output directory
can be moved as a whole. ``from_tune`` names the file or the directory that holds ``zoo.yaml``::

    - id: simclr-lr0.3-s0
      source: timm
      name: resnet18
      checkpoint: trials/lr0.3-s0/last.safetensors
      group: simclr-lr0.3
      family: simclr
      model_kwargs: {}
"""

from __future__ import annotations

import contextlib
import difflib
import glob
import hashlib
import importlib
import json
import math
import os
import pickle
import re
import warnings
from collections.abc import Iterator, Mapping
from dataclasses import dataclass
from functools import lru_cache
from pathlib import Path
from typing import Any

import torch
import yaml
from pydantic import ValidationError
from torch import nn

import zoorank
from zoorank.config import (
    FromTuneSpec,
    ModelSpec,
    RunConfig,
    file_digest,
    fingerprint,
    validation_message,
)
from zoorank.errors import ConfigError, InputError

__all__ = [
    "CheckpointError",
    "FeatureExtractor",
    "Geometry",
    "Normalization",
    "ResolvedModel",
    "ZOO_FILE_NAME",
    "check_features",
    "estimate_model_bytes",
    "load_model",
    "pool_features",
    "read_checkpoint",
    "read_zoo_file",
    "resolve_models",
    "write_zoo_file",
]

IMAGENET_MEAN = (0.485, 0.456, 0.406)
IMAGENET_STD = (0.229, 0.224, 0.225)
ZOO_FILE_NAME = "zoo.yaml"
#: state-dict containers looked for, in order, when the top level is not a tensor dict.
AUTO_STATE_DICT_KEYS = ("state_dict", "model", "module")
_GLOB_CHARS = "*?["
_SAFETENSORS_SUFFIXES = (".safetensors",)
# PIL resampling codes used by transformers image processors.
_PIL_RESAMPLE = {0: "nearest", 2: "bilinear", 3: "bicubic"}
_MAX_LISTED = 10
_INIT_SEED = 0


class CheckpointError(InputError):
    """A model cannot be built or its checkpoint cannot be loaded; the message says why."""


@dataclass(frozen=True)
class Geometry:
    """How a clean image becomes the model's input (models with equal Geometry share decoding).

    Clean view (timm's eval transform): resize the shorter side to ``resize_size``, then
    center-crop ``input_size`` × ``input_size``.
    """

    input_size: int
    interpolation: str  # "bilinear" | "bicubic" | "nearest"
    crop_pct: float

    @property
    def resize_size(self) -> int:
        # timm's transforms_factory uses floor (224 / 0.95 -> 235), not round.
        return math.floor(self.input_size / self.crop_pct)


@dataclass(frozen=True)
class Normalization:
    """Per-channel ``(x - mean) / std`` on RGB values scaled to [0, 1]."""

    mean: tuple[float, float, float]
    std: tuple[float, float, float]


DEFAULT_GEOMETRY = Geometry(input_size=224, interpolation="bicubic", crop_pct=0.875)
DEFAULT_NORMALIZATION = Normalization(mean=IMAGENET_MEAN, std=IMAGENET_STD)


@dataclass(frozen=True)
class ResolvedModel:
    """One concrete model: spec with a single checkpoint file, preprocessing, fingerprint."""

    model_id: str
    spec: ModelSpec
    fingerprint: str
    geometry: Geometry
    normalization: Normalization
    group: str | None
    family: str | None
    #: sha256 of the weight bytes (checkpoint file, transformers directory, scripted file); None
    #: for a checkpoint-less timm/python model (seeded random initialisation).
    checkpoint_digest: str | None = None


# --------------------------------------------------------------------------- zoo.yaml


def _zoo_file(path: str | Path) -> Path:
    path = Path(path).expanduser()
    return path / ZOO_FILE_NAME if path.is_dir() else path


def read_zoo_file(path: str | Path) -> list[ModelSpec]:
    """Model specs of a ``zoo.yaml`` (or of the directory holding one); see the module docstring.

    Relative checkpoint paths come back joined to the file's directory.
    """
    file = _zoo_file(path)
    if not file.is_file():
        raise ConfigError(
            f"{file}: zoo file not found (from_tune expects a zoo.yaml or its folder)"
        )
    try:
        data = yaml.safe_load(file.read_text())
    except yaml.YAMLError as err:
        raise ConfigError(f"{file}: invalid YAML: {err}") from None
    if data is None:
        data = []
    if not isinstance(data, list):
        raise ConfigError(
            f"{file}: a zoo file is a YAML list of model specs, got {type(data).__name__}"
        )
    specs = []
    for index, entry in enumerate(data):
        try:
            spec = ModelSpec.model_validate(entry)
        except ValidationError as err:
            raise ConfigError(_entry_errors(err, entry, file, index)) from None
        specs.append(_rebase_paths(spec, file.parent))
    return specs


def _entry_errors(err: ValidationError, entry: Any, file: Path, index: int) -> str:
    label = entry.get("id") or entry.get("name") if isinstance(entry, dict) else None
    where = f"[{index}]" + (f"({label})" if label else "")
    lines = validation_message(err, entry, f"{file}: {where}").splitlines()
    return "\n".join(line.replace(": <root>:", ":", 1) for line in lines)


def _path_fields(spec: ModelSpec) -> tuple[str, ...]:
    return (
        ("checkpoint", "name")
        if spec.source in ("transformers", "torchscript")
        else ("checkpoint",)
    )


def _rebase_paths(spec: ModelSpec, base: Path) -> ModelSpec:
    update = {}
    for field in _path_fields(spec):
        value = getattr(spec, field)
        if value and not _is_uri(value) and not Path(value).expanduser().is_absolute():
            update[field] = str(base / value)
    return spec.model_copy(update=update) if update else spec


def write_zoo_file(path: str | Path, specs: list[ModelSpec]) -> Path:
    """Write specs as a ``zoo.yaml`` (atomically); paths under its folder are stored relative.

    ``path`` is the file or a directory (then ``<path>/zoo.yaml``). Returns the file written.
    """
    path = Path(path).expanduser()
    file = path / ZOO_FILE_NAME if path.is_dir() or not path.suffix else path
    file.parent.mkdir(parents=True, exist_ok=True)
    base = file.parent.resolve()
    entries = []
    for spec in specs:
        entry = spec.model_dump(mode="json", exclude_defaults=True)
        entry["source"], entry["name"] = spec.source, spec.name
        for field in _path_fields(spec):
            value = entry.get(field)
            if value and not _is_uri(value):
                absolute = Path(value).expanduser().resolve()
                # the reader joins relative paths to the file's folder, not to today's cwd
                if absolute.is_relative_to(base):
                    entry[field] = absolute.relative_to(base).as_posix()
                elif Path(value).exists():
                    entry[field] = absolute.as_posix()
        entries.append(entry)
    tmp = file.with_name(f".{file.name}.tmp-{os.getpid()}")
    tmp.write_text(yaml.safe_dump(entries, sort_keys=False))
    os.replace(tmp, file)
    return file


# --------------------------------------------------------------------------- resolve


def resolve_models(config: RunConfig) -> list[ResolvedModel]:
    """Expand and resolve the config's models (no weights are read into memory).

    One model per checkpoint file of a glob, with the id made from the file's path below the
    glob's fixed prefix (``runs/*/last.safetensors`` → ``lr0.3-s0-last``, or ``<id>-lr0.3-s0-last``
    when the spec has an id); ``from_tune`` entries contribute the models of their ``zoo.yaml``.
    Raises ConfigError naming the model when a glob matches nothing, a file or directory is
    missing, an architecture is unknown, or two models get the same id.
    """
    resolved: list[tuple[str, ResolvedModel]] = []
    for index, entry in enumerate(config.models):
        if isinstance(entry, FromTuneSpec):
            specs = read_zoo_file(entry.from_tune)
            if not specs:
                raise ConfigError(f"models[{index}]: from_tune {entry.from_tune!r} lists no models")
            for j, spec in enumerate(specs):
                label = f"models[{index}] (from_tune {entry.from_tune}) [{j}]"
                resolved += [(label, r) for r in _expand(spec, label)]
        else:
            label = f"models[{index}]" + (f" ({entry.id})" if entry.id else f" ({entry.name})")
            resolved += [(label, r) for r in _expand(entry, label)]
    seen: dict[str, str] = {}
    for label, model in resolved:
        if model.model_id in seen:
            raise ConfigError(
                f"{label}: model id {model.model_id!r} is also produced by {seen[model.model_id]}; "
                "give the entries distinct ids"
            )
        seen[model.model_id] = label
    return [model for _, model in resolved]


def _is_uri(path: str) -> bool:
    return "://" in path


def _valid_name(text: str) -> str:
    name = re.sub(r"[^A-Za-z0-9_.\-]+", "_", text).strip("_.-")
    return name[:200] or "model"


def _glob_prefix(pattern: str) -> str:
    parts = Path(pattern).parts
    fixed = []
    for part in parts:
        if any(c in part for c in _GLOB_CHARS):
            break
        fixed.append(part)
    return str(Path(*fixed)) if fixed else "."


def _id_from_path(path: str, prefix: str) -> str:
    relative = Path(os.path.relpath(path, prefix))
    return _valid_name("-".join(relative.with_suffix("").parts))


def _expand(spec: ModelSpec, label: str) -> list[ResolvedModel]:
    checkpoint = spec.checkpoint
    if checkpoint and any(c in checkpoint for c in _GLOB_CHARS):
        pattern = os.path.expanduser(checkpoint)
        matches = sorted(p for p in glob.glob(pattern, recursive=True) if os.path.isfile(p))
        if not matches:
            raise ConfigError(f"{label}: checkpoint glob {checkpoint!r} matches no file")
        prefix = _glob_prefix(pattern)
        out = []
        for match in matches:
            suffix = _id_from_path(match, prefix)
            model_id = f"{spec.id}-{suffix}" if spec.id else suffix
            concrete = spec.model_copy(update={"id": model_id, "checkpoint": match})
            out.append(_resolve_one(concrete, f"{label} [{match}]"))
        return out
    if spec.id is None:
        model_id = _valid_name(spec.name)
        if checkpoint:
            model_id = _valid_name(f"{spec.name}-{Path(checkpoint).stem}")
        spec = spec.model_copy(update={"id": model_id})
    if checkpoint:
        spec = spec.model_copy(update={"checkpoint": os.path.expanduser(checkpoint)})
    return [_resolve_one(spec, label)]


def _resolve_one(spec: ModelSpec, label: str) -> ResolvedModel:
    if spec.checkpoint and not os.path.isfile(spec.checkpoint):
        raise ConfigError(f"{label}: checkpoint file not found: {spec.checkpoint}")
    if spec.source == "timm":
        geometry, normalization = _timm_preprocessing(spec, label)
    elif spec.source == "transformers":
        geometry, normalization = _transformers_preprocessing(spec, label)
    else:
        if spec.source == "torchscript":
            _torchscript_file(spec, label)
        elif ":" not in spec.name:
            raise ConfigError(
                f"{label}: python models are named 'package.module:function', got {spec.name!r}"
            )
        geometry, normalization = DEFAULT_GEOMETRY, DEFAULT_NORMALIZATION
    geometry = Geometry(
        input_size=spec.input_size or geometry.input_size,
        interpolation=spec.interpolation or geometry.interpolation,
        crop_pct=spec.crop_pct or geometry.crop_pct,
    )
    normalization = Normalization(
        mean=tuple(spec.mean or normalization.mean), std=tuple(spec.std or normalization.std)
    )
    digest = _weights_digest(spec, label)
    excluded = {"id", "group", "family", "checkpoint"}
    if spec.source in ("transformers", "torchscript"):
        excluded.add("name")
    spec_part = spec.model_dump(mode="json", exclude=excluded)
    return ResolvedModel(
        model_id=str(spec.id),
        spec=spec,
        fingerprint=fingerprint(zoorank.__version__, digest, spec_part),
        geometry=geometry,
        normalization=normalization,
        group=spec.group,
        family=spec.family,
        checkpoint_digest=digest,
    )


def _torchscript_file(spec: ModelSpec, label: str = "") -> str:
    path = spec.checkpoint or os.path.expanduser(spec.name)
    if not os.path.isfile(path):
        raise ConfigError(f"{label or spec.id}: torchscript file not found: {path}")
    return path


@lru_cache(maxsize=4096)
def _cached_file_digest(path: str, size: int, mtime_ns: int) -> str:
    return file_digest(path)


def _digest(path: str) -> str:
    stat = os.stat(path)
    return _cached_file_digest(os.path.abspath(path), stat.st_size, stat.st_mtime_ns)


def _directory_digest(directory: Path) -> str:
    h = hashlib.sha256()
    for file in sorted(p for p in directory.rglob("*") if p.is_file()):
        relative = file.relative_to(directory).as_posix()
        if relative.startswith(".") or "/." in relative:
            continue  # caches and lock files of hub tooling
        h.update(f"{relative}\0{_digest(str(file))}\n".encode())
    return h.hexdigest()


def _weights_digest(spec: ModelSpec, label: str) -> str | None:
    if spec.source == "torchscript":
        return _digest(_torchscript_file(spec, label))
    parts = []
    if spec.source == "transformers":
        parts.append(_directory_digest(Path(spec.name).expanduser()))
    if spec.checkpoint:
        parts.append(_digest(spec.checkpoint))
    if not parts:
        return None
    return parts[0] if len(parts) == 1 else hashlib.sha256("+".join(parts).encode()).hexdigest()


@lru_cache(maxsize=256)
def _timm_meta_model(name: str, kwargs_json: str) -> nn.Module:
    import timm

    kwargs = {"num_classes": 0, **json.loads(kwargs_json)}
    with torch.device("meta"):
        return timm.create_model(name, pretrained=False, **kwargs)


def _kwargs_json(spec: ModelSpec) -> str:
    return json.dumps(spec.model_kwargs, sort_keys=True, default=str)


def _timm_preprocessing(spec: ModelSpec, label: str) -> tuple[Geometry, Normalization]:
    import timm
    from timm.data import resolve_data_config

    if not timm.is_model(spec.name):
        close = difflib.get_close_matches(spec.name, timm.list_models(), n=3)
        hint = f" (did you mean {', '.join(close)}?)" if close else ""
        raise ConfigError(f"{label}: unknown timm architecture {spec.name!r}{hint}")
    try:
        model = _timm_meta_model(spec.name, _kwargs_json(spec))
    except Exception as err:  # a bad model_kwargs entry, reported with the model's name
        raise ConfigError(f"{label}: timm.create_model({spec.name!r}) failed: {err}") from None
    cfg = resolve_data_config({}, model=model)
    input_size = cfg["input_size"][-1]
    img_size = spec.model_kwargs.get("img_size")  # timm does not reflect it in pretrained_cfg
    if img_size is not None:
        input_size = img_size if isinstance(img_size, int) else int(img_size[-1])
    geometry = Geometry(int(input_size), str(cfg["interpolation"]), float(cfg["crop_pct"]))
    return geometry, Normalization(tuple(cfg["mean"]), tuple(cfg["std"]))


def _side(value: Any) -> int | None:
    if value is None:
        return None
    if isinstance(value, int):
        return value
    if isinstance(value, (list, tuple)):
        return int(value[-1])
    if isinstance(value, Mapping):
        for key in ("shortest_edge", "height", "width"):
            if key in value:
                return int(value[key])
    return None


def _transformers_preprocessing(spec: ModelSpec, label: str) -> tuple[Geometry, Normalization]:
    """``preprocessor_config.json`` of the directory, else ``config.json``'s image_size.

    A processor that center-crops ``crop_size`` from a resize to ``shortest_edge`` gives
    ``crop_pct = crop / shortest_edge``; one that resizes straight to ``size`` gives 1.0.
    """
    directory = Path(spec.name).expanduser()
    config_file = directory / "config.json"
    if not config_file.is_file():
        raise ConfigError(
            f"{label}: {directory} is not a transformers model directory (no config.json)"
        )
    geometry, normalization = DEFAULT_GEOMETRY, DEFAULT_NORMALIZATION
    config = json.loads(config_file.read_text())
    image_size = _side(
        config.get("image_size") or config.get("vision_config", {}).get("image_size")
    )
    if image_size:
        geometry = Geometry(image_size, geometry.interpolation, geometry.crop_pct)
    processor_file = directory / "preprocessor_config.json"
    if processor_file.is_file():
        proc = json.loads(processor_file.read_text())
        size, crop = _side(proc.get("size")), _side(proc.get("crop_size"))
        if proc.get("do_center_crop", crop is not None) and crop and size:
            geometry = Geometry(crop, geometry.interpolation, min(1.0, crop / size))
        elif size:
            geometry = Geometry(size, geometry.interpolation, 1.0)
        resample = proc.get("resample")
        interpolation = _PIL_RESAMPLE.get(resample, "bicubic") if resample is not None else None
        geometry = Geometry(
            geometry.input_size, interpolation or geometry.interpolation, geometry.crop_pct
        )
        normalization = Normalization(
            tuple(proc.get("image_mean") or normalization.mean),
            tuple(proc.get("image_std") or normalization.std),
        )
    return geometry, normalization


# --------------------------------------------------------------------------- checkpoints


def _truncated(names: list[str]) -> str:
    shown = ", ".join(names[:_MAX_LISTED])
    return shown + (f", ... (+{len(names) - _MAX_LISTED} more)" if len(names) > _MAX_LISTED else "")


def _weights_only_refusal(err: Exception) -> tuple[str | None, str]:
    """(the refused global, if any; a one-line reason) from torch's weights-only error text."""
    text = re.sub(r"\x1b\[[0-9;]*m", "", str(err))
    found = re.search(r"GLOBAL\s+([\w.]+)", text)
    if found:
        return found.group(1), f"it needs the global {found.group(1)}"
    found = re.search(r"WeightsUnpickler error:\s*(.+)", text, re.DOTALL)
    lines = [ln.strip() for ln in (found.group(1) if found else text).splitlines() if ln.strip()]
    return None, lines[0] if lines else type(err).__name__


def _torch_load(path: str, trust: bool) -> Any:
    try:
        with warnings.catch_warnings():
            # raised for protocol-4 pickles that the weights-only loader then refuses anyway
            warnings.filterwarnings("ignore", message="Detected pickle protocol")
            return torch.load(path, map_location="cpu", weights_only=not trust)
    except Exception as err:
        if not trust and "Weights only load failed" in str(err):
            refused, detail = _weights_only_refusal(err)
            if refused:
                raise CheckpointError(
                    f"{path}: unsafe pickle refused ({detail}); set trust_checkpoint: true only "
                    "for a file you trust (loading it runs code from the file)"
                ) from None
            raise CheckpointError(
                f"{path}: not a readable weights-only checkpoint, corrupt or a pickle the safe "
                f"loader cannot read ({detail}); trust_checkpoint: true allows arbitrary pickles"
            ) from None
        if trust:
            with contextlib.suppress(Exception), open(path, "rb") as f:
                return pickle.load(f)  # a plain (non-torch.save) pickle, trusted by the user
        first = str(err).splitlines()[0] if str(err) else type(err).__name__
        raise CheckpointError(f"{path}: corrupt or unreadable checkpoint ({first})") from None


def _is_tensor_dict(obj: Any) -> bool:
    return (
        isinstance(obj, Mapping)
        and len(obj) > 0
        and all(isinstance(k, str) and isinstance(v, torch.Tensor) for k, v in obj.items())
    )


def _find_state_dict(
    obj: Any, key: str | None, path: str, depth: int = 0
) -> dict[str, torch.Tensor]:
    if isinstance(obj, nn.Module):
        return dict(obj.state_dict())
    if key is not None:
        node = obj
        for part in [key] if isinstance(obj, Mapping) and key in obj else key.split("."):
            if not isinstance(node, Mapping) or part not in node:
                keys = list(obj) if isinstance(obj, Mapping) else []
                raise CheckpointError(
                    f"{path}: state_dict_key {key!r} not found; top-level keys: {_truncated(keys)}"
                )
            node = node[part]
        return _find_state_dict(node, None, path, depth)
    if _is_tensor_dict(obj):
        return dict(obj)
    if isinstance(obj, Mapping) and depth < 3:
        for candidate in AUTO_STATE_DICT_KEYS:
            if candidate in obj:
                with contextlib.suppress(CheckpointError):
                    return _find_state_dict(obj[candidate], None, path, depth + 1)
    if depth == 0:
        keys = [str(k) for k in obj] if isinstance(obj, Mapping) else []
        raise CheckpointError(
            f"{path}: no state dict found ({type(obj).__name__}"
            + (f" with keys {_truncated(keys)}" if keys else "")
            + "); set state_dict_key"
        )
    raise CheckpointError(f"{path}: no state dict found")


def read_checkpoint(
    path: str | Path,
    *,
    trust: bool = False,
    state_dict_key: str | None = None,
) -> dict[str, torch.Tensor]:
    """The state dict of a checkpoint file (on CPU), following the conventions of the module."""
    path = str(path)
    if path.endswith(_SAFETENSORS_SUFFIXES):
        from safetensors.torch import load_file

        try:
            obj: Any = load_file(path, device="cpu")
        except Exception as err:
            raise CheckpointError(
                f"{path}: corrupt or unreadable safetensors file ({err})"
            ) from None
    else:
        obj = _torch_load(path, trust)
    return _find_state_dict(obj, state_dict_key, path)


def _strip_prefixes(
    state: dict[str, torch.Tensor], prefixes: tuple[str, ...], model_keys: set[str]
) -> dict[str, torch.Tensor]:
    changed = True
    while changed and state:
        changed = False
        for prefix in prefixes:
            if all(k.startswith(prefix) for k in state) and not all(
                k.startswith(prefix) for k in model_keys
            ):
                state = {k[len(prefix) :]: v for k, v in state.items()}
                changed = True
    return state


def _classifier_names(model: nn.Module) -> tuple[str, ...]:
    cfg = getattr(model, "pretrained_cfg", None) or {}
    names = cfg.get("classifier") if isinstance(cfg, Mapping) else None
    if not names:
        return ()
    return (names,) if isinstance(names, str) else tuple(names)


def _load_state_into(model: nn.Module, spec: ModelSpec, *, drop_classifier: bool) -> None:
    path = str(spec.checkpoint)
    state = read_checkpoint(path, trust=spec.trust_checkpoint, state_dict_key=spec.state_dict_key)
    own = model.state_dict()
    state = _strip_prefixes(state, tuple(spec.strip_prefixes), set(own))
    if drop_classifier:
        heads = _classifier_names(model)
        state = {
            k: v
            for k, v in state.items()
            if k in own or not any(k == h or k.startswith(h + ".") for h in heads)
        }
    missing = [k for k in own if k not in state and not k.endswith("num_batches_tracked")]
    unexpected = [k for k in state if k not in own]
    mismatched = [
        f"{k} {tuple(v.shape)} vs model {tuple(own[k].shape)}"
        for k, v in state.items()
        if k in own and v.shape != own[k].shape
    ]
    problems = []
    if mismatched:
        problems.append(f"shape mismatch ({len(mismatched)}): {_truncated(mismatched)}")
    if spec.strict and missing:
        problems.append(f"missing keys ({len(missing)}): {_truncated(missing)}")
    if spec.strict and unexpected:
        problems.append(f"unexpected keys ({len(unexpected)}): {_truncated(unexpected)}")
    if not problems and not any(k in own for k in state):
        problems.append(
            f"no key matches the model (checkpoint keys: {_truncated(list(state))}; "
            f"model keys: {_truncated(list(own))})"
        )
    if problems:
        raise CheckpointError(
            f"{path}: checkpoint does not fit {spec.name!r}: " + "; ".join(problems)
        )
    model.load_state_dict({k: v for k, v in state.items() if k in own}, strict=False)


# --------------------------------------------------------------------------- modules


def pool_features(out: Any) -> torch.Tensor:
    """A model or layer output as float32 ``(B, dim)`` (conventions in the module docstring)."""
    if isinstance(out, Mapping):
        out = next((v for v in out.values() if isinstance(v, torch.Tensor)), None)
    elif isinstance(out, (tuple, list)):
        out = next((v for v in out if isinstance(v, torch.Tensor)), None)
    if not isinstance(out, torch.Tensor):
        raise CheckpointError(f"model output holds no tensor (got {type(out).__name__})")
    if out.ndim == 4:
        out = out.mean(dim=(2, 3))
    elif out.ndim == 3:
        out = out.mean(dim=1)
    elif out.ndim != 2:
        out = out.reshape(out.shape[0], -1)
    return out.float()


class _LayerReached(Exception):
    """Raised by the layer hook: the rest of the network need not run."""


class FeatureExtractor(nn.Module):
    """Wraps a backbone: normalized ``(B, 3, H, W)`` → float32 ``(B, dim)``.

    With ``layer`` the output of that submodule is taken (forward hook; the forward stops there).
    """

    def __init__(
        self,
        model: nn.Module,
        *,
        source: str,
        pooling: str = "cls",
        layer: str | None = None,
        forward_kwargs: dict[str, Any] | None = None,
    ) -> None:
        super().__init__()
        self.model = model
        self.source = source
        self.pooling = pooling
        self.layer = layer
        self.forward_kwargs = dict(forward_kwargs or {})
        self._captured: list[Any] = []
        if layer is not None:
            model.get_submodule(layer).register_forward_hook(self._capture)

    def _capture(self, module: nn.Module, args: Any, output: Any) -> None:
        self._captured.append(output)
        raise _LayerReached

    def _run(self, x: torch.Tensor) -> Any:
        if self.source == "transformers":
            return self.model(pixel_values=x, **self.forward_kwargs)
        return self.model(x)

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        if self.layer is not None:
            self._captured.clear()
            try:
                self._run(x)
            except _LayerReached:
                pass
            if not self._captured:
                raise CheckpointError(f"layer {self.layer!r} did not run in the forward pass")
            out = self._captured[0]
            self._captured.clear()
            return pool_features(out)
        out = self._run(x)
        if self.source == "transformers":
            return self._pool_transformers(out)
        return pool_features(out)

    def _pool_transformers(self, out: Any) -> torch.Tensor:
        if self.pooling == "pooler":
            pooled = getattr(out, "pooler_output", None)
            if pooled is None:
                raise CheckpointError(
                    "this transformers model has no pooler output; use pooling cls or mean"
                )
            return pool_features(pooled)
        hidden = out.last_hidden_state
        if hidden.ndim == 4:
            return hidden.mean(dim=(2, 3)).float()
        return (hidden[:, 0] if self.pooling == "cls" else hidden.mean(dim=1)).float()


@contextlib.contextmanager
def _seeded(seed: int) -> Iterator[None]:
    with torch.random.fork_rng(devices=[]):
        torch.manual_seed(seed)
        yield


@contextlib.contextmanager
def _quiet_transformers() -> Iterator[None]:
    from transformers.utils import logging as hf_logging

    verbosity = hf_logging.get_verbosity()
    bars = hf_logging.is_progress_bar_enabled()
    hf_logging.set_verbosity_error()
    hf_logging.disable_progress_bar()
    try:
        yield
    finally:
        hf_logging.set_verbosity(verbosity)
        if bars:
            hf_logging.enable_progress_bar()


def _python_factory(name: str) -> Any:
    module_name, _, attr = name.partition(":")
    try:
        obj: Any = importlib.import_module(module_name)
    except ImportError as err:
        raise CheckpointError(
            f"python model {name!r}: cannot import {module_name!r} ({err})"
        ) from None
    for part in attr.split("."):
        if not hasattr(obj, part):
            raise CheckpointError(f"python model {name!r}: {module_name} has no attribute {attr!r}")
        obj = getattr(obj, part)
    return obj


def _transformers_class(directory: str) -> tuple[Any, Any]:
    import transformers
    from transformers import AutoConfig, AutoModel

    config = AutoConfig.from_pretrained(directory, local_files_only=True)
    if getattr(config, "vision_config", None) is not None:
        vision = getattr(
            transformers, type(config).__name__.removesuffix("Config") + "VisionModel", None
        )
        if vision is not None:
            return vision, config
    return AutoModel, config


def _build(spec: ModelSpec) -> tuple[nn.Module, dict[str, Any]]:
    """The bare network (weights of the directory / file, or seeded init) and forward kwargs."""
    if spec.source == "timm":
        import timm

        kwargs = {"num_classes": 0, **spec.model_kwargs}
        return timm.create_model(spec.name, pretrained=False, **kwargs), {}
    if spec.source == "transformers":
        with _quiet_transformers():
            cls, config = _transformers_class(spec.name)
            model = cls.from_pretrained(spec.name, local_files_only=True, **spec.model_kwargs)
        forward_kwargs = {}
        vision_config = getattr(config, "vision_config", None) or config
        image_size = _side(getattr(vision_config, "image_size", None))
        if spec.input_size and image_size and spec.input_size != image_size:
            import inspect

            if "interpolate_pos_encoding" in inspect.signature(model.forward).parameters:
                forward_kwargs["interpolate_pos_encoding"] = True
        return model.float(), forward_kwargs
    if spec.source == "torchscript":
        return torch.jit.load(_torchscript_file(spec), map_location="cpu"), {}
    factory = _python_factory(spec.name)
    model = factory(**spec.model_kwargs)
    if not isinstance(model, nn.Module):
        raise CheckpointError(
            f"python model {spec.name!r} returned {type(model).__name__}, not an nn.Module"
        )
    return model, {}


def _check_layer(model: nn.Module, spec: ModelSpec) -> None:
    if spec.source == "torchscript":
        raise CheckpointError(f"model {spec.id}: layer: is not supported for torchscript models")
    names = [n for n, _ in model.named_modules() if n]
    if spec.layer not in names:
        close = difflib.get_close_matches(str(spec.layer), names, n=5, cutoff=0.5)
        raise CheckpointError(
            f"model {spec.id}: unknown layer {spec.layer!r}; "
            + (f"close: {', '.join(close)}; " if close else "")
            + f"modules include: {_truncated(names)}"
        )


def load_model(resolved: ResolvedModel, device: str | torch.device = "cpu") -> nn.Module:
    """Build a resolved model with its checkpoint: eval mode, no grad, on ``device``.

    Returns a :class:`FeatureExtractor` mapping normalized ``(B, 3, H, W)`` to float32
    ``(B, dim)``. Raises CheckpointError with the reason.
    """
    spec = resolved.spec
    try:
        with _seeded(_INIT_SEED):
            model, forward_kwargs = _build(spec)
    except CheckpointError:
        raise
    except Exception as err:
        raise CheckpointError(
            f"model {resolved.model_id}: cannot build {spec.source} {spec.name!r}: "
            f"{type(err).__name__}: {str(err).splitlines()[0] if str(err) else ''}"
        ) from err
    if spec.checkpoint and spec.source != "torchscript":
        try:
            _load_state_into(model, spec, drop_classifier=spec.source == "timm")
        except CheckpointError as err:
            raise CheckpointError(f"model {resolved.model_id}: {err}") from None
    if spec.layer is not None:
        _check_layer(model, spec)
    extractor = FeatureExtractor(
        model,
        source=spec.source,
        pooling=spec.pooling,
        layer=spec.layer,
        forward_kwargs=forward_kwargs,
    )
    extractor.eval().requires_grad_(False)
    return extractor.to(device)


def _state_bytes(model: nn.Module) -> int:
    return sum(t.numel() * t.element_size() for t in model.state_dict().values())


@lru_cache(maxsize=256)
def _meta_bytes(source: str, name: str, kwargs_json: str) -> int:
    if source == "timm":
        return _state_bytes(_timm_meta_model(name, kwargs_json))
    if source == "transformers":
        with _quiet_transformers():
            cls, config = _transformers_class(name)
            with torch.device("meta"):
                model = cls.from_config(config)
        return sum(t.numel() * 4 for t in model.state_dict().values())  # loaded as float32
    with torch.device("meta"):
        return _state_bytes(_python_factory(name)(**json.loads(kwargs_json)))


def estimate_model_bytes(resolved: ResolvedModel) -> int:
    """Bytes of the model's parameters and buffers once loaded (for memory-bounded actor chunks).

    A meta-device build (no memory, no weights) where possible; else the weight file's size.
    """
    spec = resolved.spec
    if spec.source != "torchscript":
        with contextlib.suppress(Exception):
            return _meta_bytes(spec.source, spec.name, _kwargs_json(spec))
    if spec.source == "torchscript":
        return os.path.getsize(_torchscript_file(spec))
    if spec.checkpoint:
        return os.path.getsize(spec.checkpoint)
    if spec.source == "transformers":
        return sum(
            p.stat().st_size
            for p in Path(spec.name).expanduser().rglob("*")
            if p.suffix in (".safetensors", ".bin")
        )
    raise CheckpointError(f"model {resolved.model_id}: cannot estimate its size")


def check_features(features: Any, model_id: str | None = None) -> None:
    """Raise CheckpointError unless ``features`` is a finite 2-D ``(B, dim)`` array."""
    t = torch.as_tensor(features)
    who = f"model {model_id}: " if model_id else ""
    if t.ndim != 2:
        raise CheckpointError(f"{who}features must be 2-D (batch, dim), got shape {tuple(t.shape)}")
    if t.is_floating_point() or t.is_complex():
        nan = int(torch.isnan(t).sum())
        inf = int(torch.isinf(t).sum())
        if nan or inf:
            raise CheckpointError(
                f"{who}features contain {nan} NaN and {inf} Inf values (of {t.numel()})"
            )
