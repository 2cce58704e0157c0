"""Config → :class:`ResolvedModel` rows: globs expanded, ``from_tune`` read, ids, fingerprints.

No network is built and no weights are read into memory here (a checkpoint's bytes are hashed for
its fingerprint).
"""

from __future__ import annotations

import glob
import hashlib
import os
import re
from dataclasses import dataclass
from functools import lru_cache
from pathlib import Path

import zoorank
from zoorank.config import FromTuneSpec, ModelSpec, RunConfig, file_digest, fingerprint
from zoorank.errors import ConfigError
from zoorank.zoo.build import _torchscript_file
from zoorank.zoo.preprocessing import (
    DEFAULT_GEOMETRY,
    DEFAULT_NORMALIZATION,
    Geometry,
    Normalization,
    _timm_preprocessing,
    _transformers_preprocessing,
)
from zoorank.zoo.zoofile import read_zoo_file

_GLOB_CHARS = "*?["


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
