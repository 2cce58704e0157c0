"""Reading a run config: YAML file → validated :class:`~zoorank.config.RunConfig`, with errors
that name the file and the field (``file: models[2](resnet).input_size: ...``).

On the way: ``${VAR}`` / ``${VAR:-default}`` in string values are replaced from the environment
(:func:`expand_env`); an unknown key gets a did-you-mean (:func:`validation_message`); relative
paths are taken from the config file's folder (:mod:`zoorank.config.paths`).
"""

from __future__ import annotations

import os
import re
import types
import typing
from collections.abc import Mapping
from pathlib import Path
from typing import Any, TypeVar

import yaml
from pydantic import BaseModel, ValidationError

from zoorank.config import RunConfig, Strict
from zoorank.config.paths import resolve_paths
from zoorank.config.suggest import close_matches, did_you_mean
from zoorank.errors import ConfigError
from zoorank.evaluation import load_record
from zoorank.metrics import registry
from zoorank.metrics.primary import primary_candidates

#: the tags of the config's tagged unions (a models entry is a ``model`` or a ``from_tune``).
_UNION_TAGS = ("model", "from_tune")
_Section = TypeVar("_Section", bound=BaseModel)


def _format_location(loc: tuple[Any, ...], data: Any) -> str:
    parts: list[str] = []
    node = data
    after_index = False
    for item in loc:
        if after_index and item in _UNION_TAGS:  # the branch of a tagged union, not a key
            after_index = False
            continue
        after_index = isinstance(item, int)
        if isinstance(item, int):
            label = None
            if isinstance(node, list) and 0 <= item < len(node) and isinstance(node[item], dict):
                label = node[item].get("id") or node[item].get("name")
            parts.append(f"[{item}]" + (f"({label})" if label else ""))
            node = node[item] if isinstance(node, list) and 0 <= item < len(node) else None
        else:
            parts.append(("." if parts else "") + str(item))
            node = node.get(item) if isinstance(node, dict) else None
    return "".join(parts) or "<root>"


def _config_models() -> dict[str, type[BaseModel]]:
    """Every config section class by name (a ValidationError's ``title`` names its model)."""
    found: dict[str, type[BaseModel]] = {}
    todo: list[type[BaseModel]] = [Strict]
    while todo:
        cls = todo.pop()
        found.setdefault(cls.__name__, cls)
        todo.extend(cls.__subclasses__())
    return found


def _unwrap(annotation: Any) -> Any:
    """``X`` of ``Annotated[X, ...]`` and of ``X | None``."""
    while True:
        if typing.get_origin(annotation) is typing.Annotated:
            annotation = typing.get_args(annotation)[0]
            continue
        if typing.get_origin(annotation) in (typing.Union, types.UnionType):
            args = [a for a in typing.get_args(annotation) if a is not type(None)]
            if len(args) == 1:
                annotation = args[0]
                continue
        return annotation


def _tag(annotation: Any) -> str | None:
    if typing.get_origin(annotation) is typing.Annotated:
        for meta in typing.get_args(annotation)[1:]:
            tag = getattr(meta, "tag", None)
            if isinstance(tag, str):
                return tag
    return None


def keys_at(model: type[BaseModel], loc: tuple[Any, ...]) -> list[str] | None:
    """The keys a config section accepts at ``loc`` (a pydantic error location below ``model``),
    or None where the location does not lead to a section."""
    annotation: Any = model
    for item in loc:
        annotation = _unwrap(annotation)
        origin = typing.get_origin(annotation)
        if isinstance(annotation, type) and issubclass(annotation, BaseModel):
            if not (isinstance(item, str) and item in annotation.model_fields):
                return None
            annotation = annotation.model_fields[item].annotation
        elif origin in (list, tuple) and isinstance(item, int):
            annotation = typing.get_args(annotation)[0]
        elif origin is dict and isinstance(item, str):
            annotation = typing.get_args(annotation)[1]
        elif origin in (typing.Union, types.UnionType):  # a tagged union: the tag names the branch
            branch = [a for a in typing.get_args(annotation) if _tag(a) == item]
            if not branch:
                return None
            annotation = branch[0]
        else:
            return None
    annotation = _unwrap(annotation)
    if isinstance(annotation, type) and issubclass(annotation, BaseModel):
        return list(annotation.model_fields)
    return None


def _unknown_key(loc: tuple[Any, ...], title: str) -> str:
    """``unknown key`` with a did-you-mean from the keys of its section, else the keys there."""
    model = _config_models().get(title)
    keys = keys_at(model, loc[:-1]) if model is not None and loc else None
    if not keys:
        return "unknown key"
    close = close_matches(str(loc[-1]), keys, n=1)
    if close:
        return f"unknown key; did you mean {close[0]!r}?"
    return "unknown key (the keys here: " + ", ".join(keys) + ")"


def validation_message(err: ValidationError, data: Any, source: str) -> str:
    """One line per problem: ``file: field.path: message``."""
    seen = []
    for e in err.errors():
        where = _format_location(tuple(e["loc"]), data)
        msg = e["msg"].removeprefix("Value error, ")
        if e["type"] == "extra_forbidden":
            msg = _unknown_key(tuple(e["loc"]), err.title)
        line = f"{source}: {where}: {msg}"
        if line not in seen:
            seen.append(line)
    return "\n".join(seen)


def validate_mapping(model: type[_Section], data: Any, source: str) -> _Section:
    """``data`` (a YAML file's content) validated as ``model`` (a run config, a tune config);
    raises ConfigError naming the file and each field (:func:`validation_message`)."""
    if not isinstance(data, dict):
        raise ConfigError(f"{source}: the config must be a YAML mapping, got {type(data).__name__}")
    try:
        return model.model_validate(data)
    except ValidationError as err:
        raise ConfigError(validation_message(err, data, source)) from None


def parse_config(data: Any, source: str = "<config>", base: str | Path | None = None) -> RunConfig:
    """Validate a mapping as a RunConfig; raises ConfigError naming the file and field.

    ``base``: the folder relative paths are taken from (the config file's,
    :func:`zoorank.config.paths.resolve_paths`); None leaves them as they are (relative to the
    working directory where they are used)."""
    config = validate_mapping(RunConfig, data, source)
    _check_primary_metric(config, source)
    config = config if base is None else resolve_paths(config, base)
    _check_record(config, source)
    return config


def _check_record(config: RunConfig, source: str) -> None:
    """``record:`` must name a readable calibration record (``zoorank calibrate`` writes one)."""
    if config.record is None:
        return
    try:
        load_record(config.record)
    except (OSError, ValueError) as err:
        raise ConfigError(f"{source}: record: {err}") from None


def _check_primary_metric(config: RunConfig, source: str) -> None:
    """``rank.primary_metric`` must be a primary-eligible metric that this config computes."""
    name = config.rank.primary_metric
    if name is None:
        return
    allowed = primary_candidates(config.metrics, [v.name for v in config.augmented_views])
    if name in allowed:
        return
    if registry.is_label_free(name) and registry.info(name).primary:
        why = (f"{name!r} is not computed by this config (metrics: {list(config.metrics)}"
               + (f", augmented views: {[v.name for v in config.augmented_views]}"
                  if "@" in name else "") + ")")
    elif registry.is_label_free(name):
        why = f"{name!r} is a diagnostic, not a ranking metric"
    else:
        why = f"unknown metric {name!r}{did_you_mean(name, allowed)}"
    raise ConfigError(f"{source}: rank.primary_metric: {why}; choose one of {allowed}")


#: ``${NAME}``, ``${NAME:-default}``, and ``$${`` (a literal ``${``).
_ENV_REFERENCE = re.compile(r"\$\$\{|\$\{([A-Za-z_][A-Za-z0-9_]*)(?::-([^}]*))?\}|\$\{")


def _expand_string(text: str, where: str, environ: Mapping[str, str]) -> str:
    def replace(match: re.Match[str]) -> str:
        whole, name, default = match.group(0), match.group(1), match.group(2)
        if whole == "$${":
            return "${"
        if name is None:
            raise ConfigError(f"{where}: malformed ${{...}} in {text!r}: write ${{VAR}} or "
                              "${VAR:-default} (a literal '${' is '$${')")
        value = environ.get(name)
        if value:  # unset or empty: the default, as the shell's ${VAR:-default}
            return value
        if default is not None:
            return default
        state = "is empty" if name in environ else "is not set"
        raise ConfigError(f"{where}: environment variable {name} {state} and ${{{name}}} has no "
                          f"default (set it, or write ${{{name}:-default}})")

    return _ENV_REFERENCE.sub(replace, text)


def expand_env(data: Any, source: str = "<config>",
               environ: Mapping[str, str] | None = None) -> Any:
    """``data`` with ``${VAR}`` and ``${VAR:-default}`` in its string values replaced from the
    environment (keys are left alone). A variable that is unset or empty takes the default; one
    without a default is a ConfigError naming the variable and the field. ``$${`` is a literal
    ``${``. The values stay strings (validation turns ``"32"`` into an integer field's 32)."""
    environ = os.environ if environ is None else environ

    def walk(node: Any, where: str) -> Any:
        if isinstance(node, str):
            return _expand_string(node, f"{source}: {where or '<root>'}", environ) \
                if "${" in node else node
        if isinstance(node, dict):
            return {k: walk(v, f"{where}.{k}" if where else str(k)) for k, v in node.items()}
        if isinstance(node, list):
            out = []
            for i, v in enumerate(node):
                label = v.get("id") or v.get("name") if isinstance(v, dict) else None
                label = f"({label})" if isinstance(label, str) and "${" not in label else ""
                out.append(walk(v, f"{where}[{i}]{label}"))
            return out
        return node

    return walk(data, "")


def load_yaml(path: str | Path) -> Any:
    """The YAML file's content, ``${VAR}`` references replaced (:func:`expand_env`)."""
    path = Path(path)
    if not path.is_file():
        raise ConfigError(f"{path}: config file not found")
    try:
        data = yaml.safe_load(path.read_text())
    except yaml.YAMLError as err:
        raise ConfigError(f"{path}: invalid YAML: {err}") from None
    return expand_env(data, str(path))


def load_config(path: str | Path, *, store: str | None = None) -> RunConfig:
    """Load and validate a run config; relative paths in it are taken from its folder
    (:mod:`zoorank.config.paths`); ``store`` overrides the config's store (``--store``, taken as
    it is: relative to the working directory)."""
    data = load_yaml(path)
    config = parse_config(data, str(path), base=Path(path).parent)
    if store is not None:
        config = config.model_copy(update={"store": store})
    return config
