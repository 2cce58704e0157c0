"""What SCORE should hold for classifier heads (pure): the label-free accuracy estimates of every
model whose clean embeddings kept its head (manifest ``logit_dim > 0``), with fingerprints.

Rows (``metrics`` table, one per model and estimate, :func:`zoorank.metrics.registry.classifier_metrics`):

* per-model estimates (AC, nuclear norm) hash the model's clean entry on the dataset;
* source-calibrated ones (DoC, ATC, COT: ``notes["source"]``) also hash the model's clean entry on
  the config's ``source:`` dataset, which must have the same number of head outputs; a model
  without a fresh source entry gets no such row;
* zoo estimates (consensus agreement, Dawid–Skene: ``notes["zoo"]``) hash every headed model's
  entry on the dataset (one fingerprint for the dataset's zoo);
* ``head_accuracy`` (the heads' own accuracy on a labelled dataset: the classifier oracle) hashes
  the entry; RANK moves it from the metric rows to the oracle.

Every fingerprint also holds the settings that change the values (``max_samples``, the seed, the
fold settings are in the fold rows' own fingerprints), :data:`HEADS_VERSION` and the estimate's
registry version. Cost O(models × datasets).
"""

from __future__ import annotations

from dataclasses import dataclass, field
from typing import Any

import pandas as pd

from zoorank.catalog.applicability import wants
from zoorank.config import RunConfig
from zoorank.config.digests import fingerprint
from zoorank.metrics import registry
from zoorank.store.shards import parse_shards

#: version of SCORE's reading of logits (sample selection, alignment of the zoo's images): bump it
#: when that changes; each estimate's maths is versioned in the registry.
HEADS_VERSION = 1
#: the oracle of a classifier: the head's own top-1 accuracy on the dataset's labels.
HEAD_ORACLE = "head_accuracy"


@dataclass(frozen=True)
class HeadEntry:
    """One model's clean entry with a head: fingerprint, shards, number of head outputs."""

    fingerprint: str
    shards: tuple[str, ...] | None
    logit_dim: int


@dataclass
class HeadPlan:
    """Per dataset: the headed models' entries (and on the source), and every row's fingerprint."""

    entries: dict[str, dict[str, HeadEntry]] = field(default_factory=dict)
    source: dict[str, HeadEntry] = field(default_factory=dict)
    #: (model_id, dataset, metric) → fingerprint of every row SCORE writes for heads
    fingerprints: dict[tuple[str, str, str], str] = field(default_factory=dict)

    def rows_of(self, dataset: str) -> dict[tuple[str, str, str], str]:
        return {k: v for k, v in self.fingerprints.items() if k[1] == dataset}


def logit_dims(manifest: pd.DataFrame) -> pd.Series:
    """Each manifest row's ``logit_dim`` (0 where the column or the value is missing: older
    stores, models without a head)."""
    if "logit_dim" not in manifest:
        return pd.Series(0, index=manifest.index, dtype="int64")
    return pd.to_numeric(manifest["logit_dim"], errors="coerce").fillna(0).astype("int64")


def head_entries(manifest: pd.DataFrame, dataset: str, view: str) -> dict[str, HeadEntry]:
    """model_id → its ``done`` entry of (dataset, view) when it has a head (``logit_dim > 0``)."""
    if manifest.empty:
        return {}
    dims = logit_dims(manifest)
    rows = manifest[(manifest["dataset"] == dataset) & (manifest["view"] == view)
                    & (manifest["status"] == "done") & (dims > 0)]
    out = {}
    for i, r in rows.iterrows():
        shards = parse_shards(r.get("shards"))
        out[str(r["model_id"])] = HeadEntry(str(r["fingerprint"]),
                                            None if shards is None else tuple(shards),
                                            int(dims.loc[i]))
    return out


def plan_heads(config: RunConfig, models: list[Any], manifest: pd.DataFrame) -> HeadPlan:
    """Every head row SCORE should hold for ``config`` over a fresh ``manifest``."""
    plan = HeadPlan()
    clean = config.clean_view.name if config.clean_view else None
    if clean is None or manifest.empty:
        return plan
    o, seed = config.score, config.seed
    estimates = registry.classifier_metrics()
    labelled = {d.name for d in config.datasets if d.has_labels}
    source = head_entries(manifest, config.source, clean) if config.source else {}
    for spec in config.datasets:
        ds = spec.name
        wanted = {m.model_id for m in models if wants(m, ds)}
        entries = {m: e for m, e in head_entries(manifest, ds, clean).items() if m in wanted}
        if not entries:
            continue
        plan.entries[ds] = entries
        zoo = sorted((m, e.fingerprint) for m, e in entries.items())
        for mid, entry in entries.items():
            common = (ds, clean, entry.fingerprint, o.max_samples, seed, HEADS_VERSION)
            for name, info in estimates.items():
                if info.notes.get("zoo"):
                    fp = fingerprint("head", name, ds, zoo, o.max_samples, seed, HEADS_VERSION,
                                     info.version)
                elif info.notes.get("source"):
                    src = source.get(mid)
                    if src is None or src.logit_dim != entry.logit_dim:
                        continue
                    plan.source[mid] = src
                    fp = fingerprint("head", name, *common, config.source, src.fingerprint,
                                     info.kwargs(o, seed), info.version)
                else:
                    fp = fingerprint("head", name, *common, info.kwargs(o, seed), info.version)
                plan.fingerprints[(mid, ds, name)] = fp
            if ds in labelled:
                oracle = registry.label_info(HEAD_ORACLE)
                plan.fingerprints[(mid, ds, HEAD_ORACLE)] = fingerprint(
                    "head", HEAD_ORACLE, *common, oracle.version)
    return plan
