"""Reading a run config: YAML file → validated :class:`~zoorank.config.RunConfig`, with errors
that name the file and the field (``file: models[2](resnet).input_size: ...``).
"""

from __future__ import annotations

from pathlib import Path
from typing import Any

import yaml
from pydantic import ValidationError

from zoorank.config import RunConfig
from zoorank.errors import ConfigError
from zoorank.metrics import registry
from zoorank.metrics.primary import primary_candidates


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
