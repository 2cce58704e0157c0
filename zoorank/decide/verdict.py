"""``decision.json``: the verdict a run supports, for people and pipelines.

RANK writes it beside ``leaderboard.csv`` (``<store>/decision.json``); REPORT, the console, the
Python API (:func:`zoorank.open`) and ``zoorank label`` read it; ``zoorank label`` adds the
few-label pick (:func:`update_few_label`). Its schema (``schema_version`` 1) is documented in
the docs' store reference; a reader ignores keys it does not know.

Keys (all written, ``null`` where they do not apply):

* ``schema_version``, ``zoorank_version``, ``created`` (UTC ISO time), ``store`` (redacted name)
* ``pick``: ``{model_id, checkpoint, metric, value, dataset}`` — the leaderboard's first model
* ``shortlist``: :func:`zoorank.decide.shortlist.shortlist_for` — the models, the rule and its
  measured record (hits of ``zoos``, ``hit_rate``, ``mean_size``, ``held_out_zoos`` ...)
* ``expected_regret_pp``: ``{median, p90, zoos}`` — the pick's measured regret on held-out zoos
* ``disagreement``: one line on how far the label-free metrics agree
* ``next_step``: ``{command, budget, basis}`` — ``zoorank ask --budget N``
* ``top_set``: the Model Confidence Set of the ordering metric (a detail)
* ``few_label``: per dataset, the few-label pick after ``zoorank label`` (else ``{}``)
* ``caveats``: sentences, each one caveat
"""

from __future__ import annotations

import datetime as _dt
from collections.abc import Mapping
from typing import Any

from zoorank.store import Store

DECISION_JSON = "decision.json"
SCHEMA_VERSION = 1


def now_iso() -> str:
    return _dt.datetime.now(_dt.timezone.utc).replace(microsecond=0).isoformat()


def write_decision(store: Store, doc: Mapping[str, Any]) -> None:
    """Write ``doc`` as ``<store>/decision.json`` (atomic, redacted like every text file)."""
    store.write_json(DECISION_JSON, dict(doc))


def read_decision(store: Store) -> dict[str, Any] | None:
    """The stored decision, or None before the first RANK."""
    if not store.exists(DECISION_JSON):
        return None
    doc = store.read_json(DECISION_JSON)
    return doc if isinstance(doc, dict) else None


def update_few_label(store: Store, dataset: str, few_label: Mapping[str, Any]) -> dict[str, Any] | None:
    """Record ``zoorank label``'s few-label pick for ``dataset`` (``few_label``: at least
    ``model_id``, ``p_best``, ``labels``) in the stored decision; returns the new document, or None
    when there is no decision yet (RANK has not run)."""
    doc = read_decision(store)
    if doc is None:
        return None
    entries = dict(doc.get("few_label") or {})
    entries[dataset] = dict(few_label, updated=now_iso())
    doc["few_label"] = entries
    write_decision(store, doc)
    return doc
