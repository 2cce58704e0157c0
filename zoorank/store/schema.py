"""The store's table schemas: the key and columns of the manifest and metrics tables, and when a
stored row may be replaced (the Delta MERGE condition per table)."""

from __future__ import annotations

from zoorank.store import layout
from zoorank.store.layout import MANIFEST, METRICS

MANIFEST_KEY = ["dataset", "view", "model_id"]
MANIFEST_COLUMNS = [
    "dataset",
    "view",
    "model_id",
    "fingerprint",
    "status",
    "error",
    "rows",
    "dim",
    "seconds",
    "bad_images",
    "shards",
    "precision",  # as resolved where the forward ran (embed.precision: auto)
    "versions",  # JSON: torch, timm, transformers, Pillow, numpy of the worker
    "param_count",  # parameters of the built model (a prior; None in rows written before it)
    "logit_dim",  # K of the shards' logits column; 0: no head kept (rows written before: 0)
]
METRICS_KEY = ["model_id", "dataset", "metric"]
METRICS_COLUMNS = [
    "model_id",
    "dataset",
    "metric",
    "value",
    "params",
    "n",
    "dim",
    "seed",
    "zoorank_version",
    "fingerprint",
]


#: When a row already in a table may be replaced by a new row with the same key (a Delta MERGE
#: condition over ``t``, the table, and ``s``, the new rows). First finished result wins: a row
#: computed from the same inputs (fingerprint) is never rewritten, so a slow, stopped or
#: concurrent writer cannot overwrite what another committed; a new fingerprint always replaces.
#: Manifest: a done row of the same fingerprint is replaced only by a ``broken`` row naming
#: exactly its shards (a compare-and-swap by a run that found them unreadable). Metrics and
#: oracle: a row of the same fingerprint is replaced only when its value is missing (a crash).
UPDATE_RULES = {
    MANIFEST: ("t.fingerprint IS NULL OR s.fingerprint IS NULL OR t.fingerprint <> s.fingerprint"
               " OR t.status IS NULL OR t.status <> 'done'"
               " OR (s.status = 'broken' AND t.shards = s.shards)"),
    METRICS: ("t.fingerprint IS NULL OR s.fingerprint IS NULL OR t.fingerprint <> s.fingerprint"
              " OR t.value IS NULL"),
    layout.ORACLE: ("t.fingerprint IS NULL OR s.fingerprint IS NULL"
                    " OR t.fingerprint <> s.fingerprint OR t.value IS NULL"),
}
