"""``zoorank label CONFIG FILE``: take labels back (a filled CSV or a Label Studio export), merge
them into ``<store>/labels/`` and say what they changed (the stopping rule).

The merge is all or nothing (:mod:`zoorank.labels.table`). The labels then reach the label oracle
through the catalog (:func:`zoorank.catalog.with_given_labels`): the dataset's labels fingerprint
changes, so the next RANK recomputes the oracle, few-label scores and agreement of that dataset
only; the label-free ranking never reads them. The few-label pick after the merge (the stopping
rule's leader and its p(best | labels), :func:`zoorank.labels.stopping.few_label_pick`) goes into
the store's ``decision.json`` (:func:`zoorank.decide.verdict.update_few_label`) when RANK has
written one.
"""

from __future__ import annotations

from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

import pandas as pd

from zoorank.catalog.context import RunContext
from zoorank.config import RunConfig
from zoorank.decide.verdict import update_few_label
from zoorank.labels.head_predictions import with_head_predictions
from zoorank.labels.pool import load_pool, with_labels
from zoorank.labels.stopping import console_lines, evidence, few_label_pick, stopping_rule
from zoorank.labels.table import check_labels, merge_labels, parse_file, read_labels


@dataclass
class LabelMerge:
    dataset: str
    added: int
    rule: dict[str, Any]
    #: sample_id → (the label given, the label kept): labelled otherwise first by another merge
    conflicts: dict[int, tuple[str, str]] = field(default_factory=dict)
    #: the few-label pick after the merge (:func:`zoorank.labels.stopping.few_label_pick`)
    few_label: dict[str, Any] | None = None
    #: whether ``decision.json`` holds it (False before the first RANK wrote one)
    recorded: bool = False


def known_labels(pool) -> dict[int, str]:
    """sample_id → class name of every labelled sample of the dataset (own or given)."""
    index = pool.catalog.indexes[pool.dataset]
    if index.label is None:
        return {}
    label = index.label.reset_index(drop=True)
    has = label.notna().to_numpy()
    return {int(s): pool.classes[int(v)] for s, v in zip(index.sample_id[has], label[has])
            if 0 <= int(v) < len(pool.classes)}


def run_label(context: RunContext | RunConfig, path: str, dataset: str | None = None,
              round_size: int = 40, max_labels: int | None = None, out=print) -> LabelMerge:
    """Check and merge the labels of ``path``; print the stopping rule (before → after)."""
    rows = parse_file(path)
    context = RunContext.of(context)
    config = context.config
    pool = with_head_predictions(config, load_pool(config, dataset, context=context), context)
    before = evidence(pool, config.seed)
    index = pool.catalog.indexes[pool.dataset]
    new = check_labels(rows, pool.dataset, index.sample_id, pool.classes, known_labels(pool))
    merged = merge_labels(context.store, pool.dataset, new, Path(path).name)
    added = merged.added
    skipped = len(rows) - len(new) + merged.already
    out(f"label: {added} new label(s) for {pool.dataset} from {Path(path).name}"
        + (f" ({skipped} already known, unchanged)" if skipped else ""))
    if merged.conflicts:
        out(conflict_line(merged.conflicts))
    # the same pool with the labels as committed (this merge's and any merged meanwhile)
    after_pool = with_labels(pool, read_labels(context.store, pool.dataset)) if added else pool
    after = evidence(after_pool, config.seed) if added else before
    rule = stopping_rule(after_pool, after, round_size=round_size, seed=config.seed,
                         previous=before if added else None, max_labels=max_labels)
    for line in console_lines(rule):
        out(line)
    few = few_label_pick(rule)
    recorded = update_few_label(context.store, pool.dataset, few) is not None
    return LabelMerge(pool.dataset, added, rule, merged.conflicts, few, recorded)


def conflict_line(conflicts: dict[int, tuple[str, str]], shown: int = 10) -> str:
    """The console line of the samples another merge labelled otherwise first."""
    items = sorted(conflicts.items())
    ids = ", ".join(f"{s} ({given!r}, kept {kept!r})" for s, (given, kept) in items[:shown])
    more = f" and {len(items) - shown} more" if len(items) > shown else ""
    return (f"label: {len(items)} conflict(s): labelled otherwise by a merge committed first, "
            f"whose label is kept: sample_id {ids}{more}")


def labels_frame(config: RunConfig | RunContext) -> pd.DataFrame:
    """The store's labels table (for readers and tests)."""
    return read_labels(RunContext.of(config).store)
