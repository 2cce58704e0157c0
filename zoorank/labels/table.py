"""The labels people give back: reading a filled CSV or a Label Studio export, checking every row,
and merging into the store's Delta table ``<store>/labels/`` in one commit.

Columns of the table: ``dataset``, ``sample_id`` (int64), ``label`` (the class name), ``source``
(the file the label came from) and ``time`` (UTC, when it was merged). A merge is all or
nothing: every row is checked first and the first bad one raises :class:`InputError` naming its
row; only then are the new rows inserted (one insert-only MERGE commit keyed on (dataset,
sample_id), :func:`merge_labels`). A label equal to one already known (in the table or the
dataset's own label column) is a no-op, so merging the same labels twice, or the same labels
through another format, leaves the same table. Merges running at once never lose each other's
labels; a sample two of them label differently keeps the first label committed, and the other
merge reports the conflict.
"""

from __future__ import annotations

import csv
import io
import json
from dataclasses import dataclass
from datetime import datetime, timezone
from pathlib import Path

import numpy as np
import pandas as pd

from zoorank.errors import InputError
from zoorank.store import Store
from zoorank.store.layout import LABELS

LABEL_COLUMNS = ["dataset", "sample_id", "label", "source", "time"]


@dataclass(frozen=True)
class GivenLabel:
    """One label read from a file; ``where`` names its row for error messages."""

    sample_id: object
    label: str
    where: str


def read_labels(store: Store, dataset: str | None = None) -> pd.DataFrame:
    """The labels table (of one ``dataset``), empty with its columns when there is none."""
    if not store.table_exists(LABELS):
        return pd.DataFrame(columns=LABEL_COLUMNS)
    frame = store.read_frame(LABELS)
    if dataset is not None:
        frame = frame[frame["dataset"] == dataset]
    return frame.reset_index(drop=True)


def parse_csv(text: str, name: str) -> list[GivenLabel]:
    """Rows of a filled ``to_label.csv`` (``sample_id``, ``label``; other columns ignored). A row
    whose label is empty was not answered and is skipped. Rows are named by their line."""
    reader = csv.DictReader(io.StringIO(text))
    fields = [f.strip() for f in (reader.fieldnames or [])]
    if "sample_id" not in fields or "label" not in fields:
        raise InputError(f"{name}: a labels CSV needs the columns sample_id and label "
                         f"(found: {', '.join(fields) or 'none'})")
    out = []
    for line, row in enumerate(reader, start=2):
        row = {(k or "").strip(): (v or "").strip() for k, v in row.items()}
        if row.get("label"):
            out.append(GivenLabel(row.get("sample_id", ""), row["label"], f"{name} line {line}"))
    return out


def _choice(task: dict) -> str | None:
    """The latest non-cancelled annotation's first choice of a Label Studio task."""
    for ann in reversed(task.get("annotations") or task.get("completions") or []):
        if ann.get("was_cancelled"):
            continue
        for result in ann.get("result") or []:
            choices = (result.get("value") or {}).get("choices")
            if choices:
                return str(choices[0])
    for key in ("choice", "label"):  # the JSON_MIN export flattens the choice into the task
        if isinstance(task.get(key), str) and task[key]:
            return task[key]
    return None


def parse_label_studio(text: str, name: str) -> list[GivenLabel]:
    """Rows of a Label Studio export (JSON or JSON_MIN) of a ``label_studio.json`` round: the
    sample id from ``data.sample_id`` (or ``meta.sample_id``), the class from the latest
    annotation's choice. Tasks without an answer are skipped; rows are named ``task N``."""
    try:
        tasks = json.loads(text)
    except json.JSONDecodeError as err:
        raise InputError(f"{name}: not JSON ({err.msg} at line {err.lineno})") from None
    if not isinstance(tasks, list):
        raise InputError(f"{name}: a Label Studio export is a JSON list of tasks")
    out = []
    for i, task in enumerate(tasks, start=1):
        if not isinstance(task, dict):
            raise InputError(f"{name} task {i}: not a JSON object")
        data = task.get("data") if isinstance(task.get("data"), dict) else task
        meta = task.get("meta") if isinstance(task.get("meta"), dict) else {}
        sample_id = data.get("sample_id", meta.get("sample_id", ""))
        label = _choice(task)
        if label:
            out.append(GivenLabel(sample_id, label.strip(), f"{name} task {i}"))
    return out


def parse_file(path: str) -> list[GivenLabel]:
    """A labels file: ``.json`` is a Label Studio export, anything else a CSV. An empty file, or
    one without a single answered row, is an InputError."""
    p = Path(path)
    if not p.is_file():
        raise InputError(f"{path}: no such labels file")
    text = p.read_text(encoding="utf-8-sig")
    if not text.strip():
        raise InputError(f"{path}: the labels file is empty")
    rows = (parse_label_studio(text, p.name) if p.suffix.lower() == ".json"
            else parse_csv(text, p.name))
    if not rows:
        raise InputError(f"{path}: no labelled row (every label is empty)")
    return rows


def _sample_id(value: object, where: str) -> int:
    try:
        text = str(value).strip()
        number = float(text)
        if not np.isfinite(number) or number != int(number):
            raise ValueError
        return int(number)
    except (TypeError, ValueError):
        raise InputError(f"{where}: sample_id {value!r} is not an integer") from None


def check_labels(rows: list[GivenLabel], dataset: str, sample_ids: np.ndarray,
                 classes: tuple[str, ...], known: dict[int, str]) -> pd.DataFrame:
    """The new (sample_id, label) rows of ``rows``, every row checked: an id outside
    ``sample_ids``, a class outside ``classes``, a sample given two labels, or a label that
    contradicts ``known`` (id → class name) raises InputError naming the row. Known labels
    repeated unchanged are dropped."""
    ids = set(int(s) for s in np.asarray(sample_ids).tolist())
    names = set(classes)
    seen: dict[int, tuple[str, str]] = {}
    new = []
    for r in rows:
        sid = _sample_id(r.sample_id, r.where)
        if sid not in ids:
            raise InputError(f"{r.where}: unknown sample_id {sid} (not a sample of dataset "
                             f"{dataset!r})")
        if r.label not in names:
            shown = ", ".join(classes[:12]) + (" ..." if len(classes) > 12 else "")
            raise InputError(f"{r.where}: unknown class {r.label!r} for sample_id {sid} "
                             f"(classes: {shown})")
        if sid in seen and seen[sid][0] != r.label:
            raise InputError(f"{r.where}: sample_id {sid} is labelled {r.label!r} here and "
                             f"{seen[sid][0]!r} at {seen[sid][1]}")
        if sid in known and known[sid] != r.label:
            raise InputError(f"{r.where}: sample_id {sid} is labelled {r.label!r} here but is "
                             f"already labelled {known[sid]!r}")
        if sid not in seen and sid not in known:
            new.append((sid, r.label))
        seen.setdefault(sid, (r.label, r.where))
    return pd.DataFrame(new, columns=["sample_id", "label"])


@dataclass(frozen=True)
class MergedLabels:
    """What one merge did: ``added`` rows inserted; ``conflicts``: sample_id → (the label given
    here, the label kept) for the samples another merge labelled otherwise first (committed
    between this run's check and its commit); ``already``: samples it labelled the same first."""

    added: int
    conflicts: dict[int, tuple[str, str]]
    already: int = 0


#: the key of the labels table: one label per sample of a dataset, the first one merged.
LABEL_KEY = ["dataset", "sample_id"]


def merge_labels(store: Store, dataset: str, new: pd.DataFrame, source: str) -> MergedLabels:
    """Insert ``new`` (sample_id, label) of ``dataset`` into the labels table: one insert-only
    MERGE commit keyed on (dataset, sample_id) (:meth:`zoorank.store.Store.insert_rows`), so
    concurrent merges never remove each other's labels, and a sample that another merge labelled
    first keeps that first label; the samples labelled otherwise are returned as conflicts.
    Nothing is committed when ``new`` is empty."""
    if new.empty:
        return MergedLabels(0, {})
    now = datetime.now(timezone.utc)
    rows = pd.DataFrame({
        "dataset": pd.array([dataset] * len(new), dtype="string"),
        "sample_id": new["sample_id"].astype("int64").to_numpy(),
        "label": pd.array(new["label"].astype(str), dtype="string"),
        "source": pd.array([source] * len(new), dtype="string"),
        "time": pd.Series([now] * len(new), dtype="datetime64[us, UTC]"),
    })
    stats = store.insert_rows(LABELS, rows, LABEL_KEY)
    added = int(stats.get("num_target_rows_inserted", len(rows)))
    if added == len(rows):
        return MergedLabels(added, {})
    # some keys were there at commit time: read which label each kept (the table only grows)
    kept = read_labels(store, dataset)
    kept = dict(zip(kept["sample_id"].astype("int64"), kept["label"].astype(str)))
    given = dict(zip(rows["sample_id"].tolist(), rows["label"].astype(str).tolist()))
    conflicts = {int(s): (lab, kept[s]) for s, lab in given.items()
                 if s in kept and kept[s] != lab}
    return MergedLabels(added, conflicts, len(rows) - added - len(conflicts))
