"""The ``score:`` options metrics read: each declared once, with its default and meaning, beside the
metrics that read it (``option("mle_k", 20, "...")``). ``ScoreOptions`` (zoorank.config) takes the
defaults from here and adds types and bounds; :func:`resolve_options` fills every option's value
from a ``ScoreOptions`` or any object or mapping.

This module imports nothing of zoorank's: it is the bottom of the metrics layer.
"""

from __future__ import annotations

from collections.abc import Mapping
from dataclasses import dataclass
from typing import Any


@dataclass(frozen=True)
class Option:
    """One ``score:`` option a metric reads, with its default (``ScoreOptions`` takes it from here)."""

    name: str
    default: Any
    doc: str = ""


OPTIONS: dict[str, Option] = {}


def option(name: str, default: Any, doc: str = "") -> Option:
    """Declare a ``score:`` option with its default (once; the same declaration again is a no-op)."""
    new = Option(name, default, doc)
    old = OPTIONS.get(name)
    if old is not None and old.default != default:
        raise ValueError(f"option {name!r} is declared twice with different defaults "
                         f"({old.default!r}, {default!r})")
    OPTIONS.setdefault(name, new)
    return OPTIONS[name]


def resolve_options(options: Any = None) -> dict[str, Any]:
    """Every declared option's value: from a mapping or an object's attributes, else its default."""
    out = {}
    for name, opt in OPTIONS.items():
        if isinstance(options, Mapping):
            out[name] = options.get(name, opt.default)
        else:
            out[name] = getattr(options, name, opt.default)
    return out
