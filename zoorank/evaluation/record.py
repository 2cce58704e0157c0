"""The record file: writing, reading, and the block a decision carries. Pure (json + files).

A record is a JSON object ``{schema_version: 1, generated_by, alpha, max_fraction, near_best_pp,
seed, n_models, boards: {<board kind>[/<zoo kind>]: entry}}`` (:func:`zoorank.evaluation.entry.
evaluate` documents an entry). The package ships one (``record.json`` beside this module) when it
has been built from the committed units table.
"""

from __future__ import annotations

import json
from importlib import resources
from pathlib import Path
from typing import Any

from zoorank.evaluation.entry import SCHEMA_VERSION
from zoorank.evaluation.units import BOARD_KINDS

SHIPPED = "record.json"
BUILT_IN = "built-in"


def write_record(record: dict[str, Any], path: str | Path) -> Path:
    """Write ``record`` as indented JSON (keys sorted) to ``path``; the path written."""
    path = Path(path)
    path.parent.mkdir(parents=True, exist_ok=True)
    path.write_text(json.dumps(record, indent=1, sort_keys=True, allow_nan=False) + "\n")
    return path


def _checked(record: Any, source: str) -> dict[str, Any]:
    if not isinstance(record, dict) or record.get("schema_version") != SCHEMA_VERSION:
        got = record.get("schema_version") if isinstance(record, dict) else type(record).__name__
        raise ValueError(f"record {source}: schema_version must be {SCHEMA_VERSION}, got {got!r}")
    if not isinstance(record.get("boards"), dict):
        raise ValueError(f"record {source}: missing 'boards' (one entry per board kind)")
    return {**record, "source": source}


def load_record(path: str | Path | None = None) -> dict[str, Any] | None:
    """The record at ``path`` (``source``: the path); ``None``: the record the package ships
    (``source``: ``"built-in"``), or None when it ships none. ``ValueError`` naming the file for
    a file that is not a record; ``FileNotFoundError`` for a missing one."""
    if path is None:
        try:
            text = resources.files("zoorank.evaluation").joinpath(SHIPPED).read_text()
        except (FileNotFoundError, OSError):
            return None
        return _checked(json.loads(text), BUILT_IN)
    path = Path(path)
    try:
        record = json.loads(path.read_text())
    except json.JSONDecodeError as e:
        raise ValueError(f"record {path}: not JSON ({e})") from e
    return _checked(record, str(path))


def record_block(record: dict[str, Any] | None, board_kind: str,
                 zoo_kind: str | None = None) -> dict[str, Any] | None:
    """What ``decision.json`` carries under ``record``: the entry for ``<board_kind>/<zoo_kind>``
    when the record has one, else for ``board_kind`` (``classifiers``/``embeddings`` map to
    ``heads``/``encoders``), plus ``source`` and ``board``; None when the record has neither."""
    if record is None:
        return None
    board = BOARD_KINDS.get(board_kind, board_kind)
    boards = record.get("boards", {})
    key = f"{board}/{zoo_kind}" if zoo_kind and f"{board}/{zoo_kind}" in boards else board
    if key not in boards:
        return None
    return {**boards[key], "source": record.get("source", BUILT_IN), "board": key}
