"""Relative paths in a config file are taken from the file's folder, not the working directory.

So a config runs the same from wherever it is started (``zoorank run ../exp/run.yaml``, a
``ray job submit`` from another folder, a cron job from ``/``), as ``zoo.yaml`` files already
do. The paths: the ``store``, each dataset's ``path``, each model's ``checkpoint`` (globs too),
a ``transformers`` model directory and a ``torchscript`` file given as ``name``, and
``from_tune``. Absolute paths, ``~/...`` and URIs (``s3://``, ``gs://``, ``file://``) are kept as
they are. What the command line gives (``--store``, ``zoorank label FILE``) is relative to the
working directory, as for any command. The docs page ``reference/config-paths.md`` says the same
for users.
"""

from __future__ import annotations

import os
from pathlib import Path
from typing import Any

from zoorank.config import DatasetSpec, FromTuneSpec, ModelSpec, RunConfig
from zoorank.config.model_spec import source_traits


def is_relative_path(value: str | None) -> bool:
    """A local path that is relative: not a URI, not ``~``-based, not absolute."""
    if not value or "://" in value or value.startswith("~"):
        return False
    return not os.path.isabs(value)


def rebase(value: str, base: str | Path) -> str:
    """``value`` joined to ``base`` when it is a relative local path, else ``value`` unchanged."""
    if not is_relative_path(value):
        return value
    return os.path.normpath(os.path.join(os.fspath(base), value))


def _model_directory(name: str, base: Path) -> bool:
    """A folder ``name`` (a transformers model's) that is a folder beside the config (``./m``,
    ``../m``, or a name found there), not a hub id of the local cache (``org/model``)."""
    if not is_relative_path(name):
        return False
    return name.startswith(("./", "../")) or (base / name).is_dir()


def _model(spec: ModelSpec, base: Path) -> ModelSpec:
    update: dict[str, Any] = {}
    if spec.checkpoint:
        update["checkpoint"] = rebase(spec.checkpoint, base)
    name_is_path = source_traits(spec.source).name_is_path
    if name_is_path == "file" and not spec.checkpoint:  # a torchscript file
        update["name"] = rebase(spec.name, base)
    elif name_is_path == "folder" and _model_directory(spec.name, base):
        update["name"] = rebase(spec.name, base)
    update = {k: v for k, v in update.items() if v != getattr(spec, k)}
    return spec.model_copy(update=update) if update else spec


def resolve_paths(config: RunConfig, base: str | Path) -> RunConfig:
    """``config`` with its relative paths joined to ``base`` (the config file's folder; made
    absolute from the working directory when it is relative)."""
    base = Path(base).absolute()
    datasets = [d.model_copy(update={"path": rebase(d.path, base)})
                if d.path and is_relative_path(d.path) else d for d in config.datasets]
    models = [FromTuneSpec(from_tune=rebase(m.from_tune, base)) if isinstance(m, FromTuneSpec)
              else _model(m, base) for m in config.models]
    record = (rebase(config.record, base) if config.record and is_relative_path(config.record)
              else config.record)
    return config.model_copy(update={"store": rebase(config.store, base), "datasets": datasets,
                                     "models": models, "record": record})


def resolve_dataset(spec: DatasetSpec, base: str | Path) -> DatasetSpec:
    """One dataset entry with its relative ``path`` joined to ``base`` (for other configs that
    hold datasets, e.g. the tune config)."""
    if spec.path and is_relative_path(spec.path):
        return spec.model_copy(update={"path": rebase(spec.path, Path(base).absolute())})
    return spec
