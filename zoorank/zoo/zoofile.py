"""The ``zoo.yaml`` format (written by ``zoorank tune``, read by a ``from_tune`` model entry)
-------------------------------------------------------------------------------------------
A YAML list of model-spec mappings: the fields of :class:`zoorank.config.ModelSpec` (contract 4),
unknown keys are errors. A relative ``checkpoint`` (and a relative ``name`` of a transformers or
torchscript entry) is relative to the directory holding ``zoo.yaml``, so a tune output directory
can be moved as a whole. ``from_tune`` names the file or the directory that holds ``zoo.yaml``,
local or a URI::

    - id: simclr-lr0.3-s0
      source: timm
      name: resnet18
      checkpoint: trials/lr0.3-s0/last.safetensors
      group: simclr-lr0.3
      family: simclr
      model_kwargs: {}
"""

from __future__ import annotations

import os
from pathlib import Path
from typing import Any

import yaml
from pydantic import ValidationError

from zoorank.config import ModelSpec
from zoorank.config.loading import validation_message
from zoorank.config.model_spec import source_traits
from zoorank.errors import ConfigError
from zoorank.store import uris
from zoorank.store.uris import is_uri as _is_uri

ZOO_FILE_NAME = "zoo.yaml"
#: beside ``zoo.yaml``: the objective of the search that exported the zoo (``{"metric", "mode"}``)
OBJECTIVE_FILE_NAME = "zoo_objective.json"


# --------------------------------------------------------------------------- zoo.yaml


def _zoo_file(path: str | Path) -> str:
    text = str(path)
    if _is_uri(text):
        return text if uris.is_file(text) else _uri_child(text, ZOO_FILE_NAME)
    local = Path(text).expanduser()
    return str(local / ZOO_FILE_NAME if local.is_dir() else local)


def _uri_child(uri: str, name: str) -> str:
    """``name`` inside the folder ``uri`` (its query string, e.g. an endpoint, is kept)."""
    base, sep, query = uri.partition("?")
    return f"{base.rstrip('/')}/{name}" + (sep + query)


def _uri_parent(uri: str) -> str:
    base, sep, query = uri.partition("?")
    return base.rsplit("/", 1)[0] + (sep + query)


def read_zoo_file(path: str | Path) -> list[ModelSpec]:
    """Model specs of a ``zoo.yaml`` (or of the folder holding one), a local path or a URI;
    see the module docstring.

    Relative checkpoint paths come back joined to the file's folder.
    """
    file = _zoo_file(path)
    shown = uris.redact(file)
    if not uris.is_file(file):
        raise ConfigError(
            f"{shown}: zoo file not found (from_tune expects a zoo.yaml or its folder)"
        )
    try:
        data = yaml.safe_load(uris.read_bytes(file).decode())
    except yaml.YAMLError as err:
        raise ConfigError(f"{shown}: invalid YAML: {err}") from None
    if data is None:
        data = []
    if not isinstance(data, list):
        raise ConfigError(
            f"{shown}: a zoo file is a YAML list of model specs, got {type(data).__name__}"
        )
    specs = []
    for index, entry in enumerate(data):
        try:
            spec = ModelSpec.model_validate(entry)
        except ValidationError as err:
            raise ConfigError(_entry_errors(err, entry, shown, index)) from None
        specs.append(_rebase_paths(spec, file))
    return specs


def write_zoo_objective(folder: str | Path, metric: str, mode: str) -> Path:
    """``<folder>/zoo_objective.json``: the metric (and its mode) the exporting search optimised,
    which orders the zoo's board unless the run config names another (``rank.primary_metric``)."""
    import json

    file = Path(folder).expanduser() / OBJECTIVE_FILE_NAME
    file.parent.mkdir(parents=True, exist_ok=True)
    file.write_text(json.dumps({"metric": metric, "mode": mode}, indent=1) + "\n")
    return file


def read_zoo_objective(path: str | Path) -> str | None:
    """The objective metric recorded beside a zoo file (``path``: as ``read_zoo_file``'s), or
    None when the zoo has none (written by hand, or by a search before the file existed)."""
    import json

    file = _zoo_file(path)
    objective = (_uri_child(_uri_parent(file), OBJECTIVE_FILE_NAME) if _is_uri(file)
                 else str(Path(file).parent / OBJECTIVE_FILE_NAME))
    if not uris.is_file(objective):
        return None
    try:
        data = json.loads(uris.read_bytes(objective).decode())
    except ValueError as err:
        raise ConfigError(f"{uris.redact(objective)}: invalid JSON: {err}") from None
    metric = data.get("metric") if isinstance(data, dict) else None
    return metric if isinstance(metric, str) and metric else None


def search_objective(models: list[Any], computed: list[str] | tuple[str, ...]) -> str | None:
    """The metric that orders a board of exported zoos: when every model entry is a ``from_tune``
    one and their searches recorded one objective that the run computes (one of ``computed``)."""
    if not models or not all(hasattr(m, "from_tune") for m in models):
        return None
    names = {read_zoo_objective(m.from_tune) for m in models}
    metric = names.pop() if len(names) == 1 else None
    return metric if metric in computed else None


def _entry_errors(err: ValidationError, entry: Any, file: str, index: int) -> str:
    label = entry.get("id") or entry.get("name") if isinstance(entry, dict) else None
    where = f"[{index}]" + (f"({label})" if label else "")
    lines = validation_message(err, entry, f"{file}: {where}").splitlines()
    return "\n".join(line.replace(": <root>:", ":", 1) for line in lines)


def _path_fields(spec: ModelSpec) -> tuple[str, ...]:
    return ("checkpoint",) if source_traits(spec.source).name_is_path == "no" else ("checkpoint", "name")


def _rebase_paths(spec: ModelSpec, file: str) -> ModelSpec:
    update = {}
    for field in _path_fields(spec):
        value = getattr(spec, field)
        if value and not _is_uri(value) and not Path(value).expanduser().is_absolute():
            if (field == "name" and source_traits(spec.source).name_is_path == "folder"
                    and _is_hub_id(value, file)):
                continue
            update[field] = (_uri_child(_uri_parent(file), value) if _is_uri(file)
                             else str(Path(file).parent / value))
    return spec.model_copy(update=update) if update else spec


def _is_hub_id(name: str, file: str) -> bool:
    """A transformers ``org/model`` name that is not a folder beside the zoo file."""
    return (name.count("/") == 1 and not name.startswith(".")
            and (_is_uri(file) or not (Path(file).parent / name).exists()))


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
