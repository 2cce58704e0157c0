"""``zoorank init --timm NAMES``: one timm entry per name, pretrained where the local Hugging Face
cache has the weights."""

from __future__ import annotations

from typing import Any

from zoorank.config.suggest import did_you_mean
from zoorank.errors import ConfigError, InputError


def timm_entries(names: list[str]) -> list[dict[str, Any]]:
    """One entry per timm name (a ConfigError with a did-you-mean for an unknown one);
    ``pretrained: true`` where the local cache has its weights."""
    import timm

    entries = []
    for name in names:
        if not timm.is_model(name):
            raise ConfigError(f"--timm {name}: not a timm architecture"
                              f"{did_you_mean(name, timm.list_models())}")
        spec = {"source": "timm", "name": name, "pretrained": True}
        cached = _loads_resolves(spec)
        entry: dict[str, Any] = {"source": "timm", "name": name, "pretrained": cached}
        entry["#"] = ("timm, the hub weights from the local Hugging Face cache" if cached else
                      "timm, a seeded random init: TODO pretrained: true once the weights are "
                      f"in the local Hugging Face cache (hf download timm/{name})")
        entries.append(entry)
    return entries


def _loads_resolves(spec: dict[str, Any]) -> bool:
    from zoorank.config.loading import parse_config
    from zoorank.zoo.resolve import resolve_models

    try:
        resolve_models(parse_config({"datasets": [{"name": "probe", "source": "sklearn_digits"}],
                                     "models": [spec]}))
    except (ConfigError, InputError, OSError):
        return False
    return True
