"""The text of the config ``zoorank init`` writes: entries as commented YAML, paths relative to the
file's folder."""

from __future__ import annotations

import datetime as _dt
import os
from pathlib import Path
from typing import Any

import yaml

from zoorank.zoo import sources


def _scalar(value: Any) -> str:
    return yaml.safe_dump(value, default_flow_style=True, width=1000).strip().removesuffix(
        "\n...").removesuffix("...").strip()


def _relative(path: Path, base: Path) -> str:
    """``path`` as written in a config in ``base``: ``./...`` below it, else absolute."""
    rel = os.path.relpath(path.absolute(), base.absolute())
    if rel == ".":
        return "."
    return str(path.absolute()) if rel.startswith("..") else f"./{rel}"


def _entry_lines(entry: dict[str, Any], base: Path) -> list[str]:
    lines = []
    note = entry.pop("#", None)
    for n in ([note] if isinstance(note, str) else note or []):
        lines.append(f"  # {n}")
    first = True
    for key, value in entry.items():
        if isinstance(value, Path):
            value = _relative(value, base)
        lines.append(f"  {'- ' if first else '  '}{key}: {_scalar(value)}")
        first = False
    return lines


def render(folder: Path | None, datasets: list[dict[str, Any]], models: list[dict[str, Any]],
           base: Path, input_size: int | None, config_name: str = "zoorank.yaml") -> str:
    """The config's text: a header, then ``store``, ``datasets``, ``models``, ``views`` and
    ``metrics`` with comments."""
    stamp = _dt.datetime.now().replace(microsecond=0).isoformat(sep=" ")
    source = ("" if folder is None else " from this folder" if _relative(folder, base) == "."
              else f" from {_relative(folder, base)}")
    lines = [
        f"# zoorank run config, written by `zoorank init`{source} ({stamp}).",
        "# Relative paths are taken from this file's folder. Every field: `zoorank config "
        "schema`,",
        "# or the configuration reference of the docs. Check the lines marked TODO, then:",
        f"#   zoorank zoo {config_name}     # what the models resolve to, every checkpoint "
        "loaded",
        f"#   zoorank run {config_name}     # embed, score, rank, report",
        "store: ./zoorank-store       # a folder (beside this file) or s3:// / gs://",
        "seed: 0",
        "datasets:",
    ]
    for entry in datasets:
        lines += _entry_lines(entry, base)
        lines.append("    # limit: 5000            # a seeded subset of this many images")
    lines.append("models:")
    for entry in models:
        if (input_size and "input_size" not in entry
                and sources.get(entry["source"]).config_input_size):
            entry["input_size"] = input_size
        lines += _entry_lines(entry, base)
    if input_size:
        lines.append(f"# input_size {input_size}: the images are at most {input_size} px, so "
                     "the models see them as they are")
    lines += [
        "views:",
        "  - name: clean",
        "  # - {name: simclr, samples: 500, per_sample: 10}   # augmented views: LiDAR and the "
        "augmented metrics",
        "# metrics: [rankme, ...]      # default: every label-free metric",
        "# oracle: {knn: true}        # with labelled data: check the ranking against labels",
    ]
    return "\n".join(lines) + "\n"
