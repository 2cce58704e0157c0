"""``zoorank init``'s view of a sweep: the run folders of a group of checkpoint files, their seed
ensembles (``group``) and families, and the globs that keep every epoch a run saved but not the
``last.*`` copies.

* **Run folder**: the last folder level whose name differs between the files
  (``runs/lr0.1-s0/checkpoints/…``: ``lr0.1-s0``). A name with a seed token (``s0``, ``seed1``,
  ``seed=2``, ``seed_3``) is a member of the seed ensemble named by the rest (``lr0.1``).
* **Family**: a folder level above the runs that differs too (``runs/simclr/lr0.1-s0``:
  ``simclr``), else the folder that holds the runs (one method swept).
* **File names**: ``last.*`` beside other files of its folder with the same bytes is a copy and
  is left out; names that differ or carry a number become ``<common prefix>*<suffix>``
  (``epoch=*.ckpt``), so the epochs saved later are found too; ``last.ckpt`` in every run stays as
  it is.
"""

from __future__ import annotations

import hashlib
import os
import re
from collections import Counter
from dataclasses import dataclass
from pathlib import Path

_SEED = re.compile(r"(^|[-_.+ ])(s|seed[=_-]?)\d+(?=$|[-_.+ ])", re.IGNORECASE)


@dataclass
class RunGroup:
    """One entry of a sweep: its glob (relative to the folder scanned), files, group, family."""

    pattern: str
    files: list[Path]
    group: str | None
    family: str | None


def _digest(path: Path) -> str:
    h = hashlib.sha256()
    with open(path, "rb") as f:
        for block in iter(lambda: f.read(1 << 20), b""):
            h.update(block)
    return h.hexdigest()


def without_last_copies(files: list[Path]) -> list[Path]:
    """``files`` less each ``last.*`` whose bytes equal another file of its folder."""
    out = []
    for f in files:
        if f.stem == "last":
            others = [o for o in files if o.parent == f.parent and o != f
                      and o.stat().st_size == f.stat().st_size]
            if others and any(_digest(o) == _digest(f) for o in others):
                continue
        out.append(f)
    return out


def name_glob(names: list[str], suffix: str, left_out: bool = False) -> str:
    """The file-name part of a glob: a name shared by every file and without a number stays as
    it is (``last.ckpt``); names that differ give ``*<suffix>``; one name with a number, or
    names beside ``last.*`` copies left out (``left_out``), give their common prefix, cut before
    its first digit, then ``*<suffix>`` (``epoch=*.ckpt``)."""
    stems = [n[: -len(suffix)] if suffix and n.endswith(suffix) else n for n in names]
    if len(set(names)) == 1 and not re.search(r"\d", stems[0]):
        return names[0]
    if len(set(names)) > 1 and not left_out:
        return "*" + suffix
    prefix = os.path.commonprefix(stems)
    prefix = re.split(r"\d", prefix, maxsplit=1)[0]
    return re.sub(r"[*?\[\]]", "?", prefix) + "*" + suffix


def _group_name(run: str) -> str | None:
    if not _SEED.search(run):
        return None
    rest = _SEED.sub("", run).strip("-_.+ ")
    return re.sub(r"[^A-Za-z0-9_.\-]+", "_", rest) or None


def _valid(name: str) -> str:
    return re.sub(r"[^A-Za-z0-9_.\-]+", "_", name).strip("_.-") or "runs"


def run_groups(files: list[Path], root: Path) -> list[RunGroup]:
    """The entries of files alike (one suffix and depth): one per family and seed ensemble where
    some family or ensemble has two files or more, else one for them all."""
    kept = without_last_copies(files)
    left_out, files = len(kept) < len(files), kept
    parts = [f.relative_to(root).parts for f in files]
    names = name_glob([p[-1] for p in parts], files[0].suffix, left_out)
    varying = [c for c in range(len(parts[0]) - 1) if len({p[c] for p in parts}) > 1]
    if not varying:
        return [RunGroup("/".join([*parts[0][:-1], names]), files, None, None)]
    run_at = varying[-1]
    family_at = varying[0] if len(varying) > 1 else None
    if family_at is not None and max(Counter(p[family_at] for p in parts).values()) < 2:
        family_at = None  # one model a family: nothing to compare within one
    families = [p[family_at] if family_at is not None else None for p in parts]
    groups = [_group_name(p[run_at]) for p in parts]
    if None in groups or max(Counter(zip(families, groups)).values()) < 2:
        groups = [None] * len(parts)
    fixed = [p for p in parts[0][: varying[0]]]
    holder = _valid(fixed[-1] if fixed else root.absolute().name)
    by_entry: dict[tuple[str | None, str | None], list[int]] = {}
    for i, key in enumerate(zip(families, groups)):
        by_entry.setdefault(key, []).append(i)
    out = []
    for (family, group), members in by_entry.items():
        columns = []
        for c in range(len(parts[0]) - 1):
            values = {parts[i][c] for i in members}
            if c == run_at and group is not None:
                columns.append(_SEED.sub(lambda m: m.group(1) + m.group(2) + "*",
                                         parts[members[0]][c]))
            else:
                columns.append(next(iter(values)) if len(values) == 1 else "*")
        out.append(RunGroup("/".join([*columns, names]), [files[i] for i in members],
                            group, _valid(family) if family is not None else holder))
    return out


def run_notes(run: RunGroup, all_files: list[Path], root: Path) -> list[str]:
    """The comment lines of one entry: its files, and the copies left out."""
    shown = run.files[0].relative_to(root).as_posix()
    notes = [f"{len(run.files)} checkpoint file(s) like {shown}"]
    if run.group:
        notes.append(f"group {run.group}: the run folders that differ only in the seed")
    left = [f for f in all_files if f.stem == "last" and f not in run.files
            and any(f.parent == r.parent for r in run.files)]
    if left:
        notes.append(f"{len(left)} last.* file(s) left out: copies of an epoch file beside them")
    return notes
