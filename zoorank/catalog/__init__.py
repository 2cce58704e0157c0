"""The catalog: every artifact the current config should have in the store, with its fingerprint.

Built once per command (:func:`build_catalog`) from the config, the resolved zoo and the sample
indexes; every stage and reader compares it with the store instead of asking another stage.

==========================  ==================================  ====================================
artifact                    key                                 expected fingerprint
==========================  ==================================  ====================================
embedding entry (manifest)  (dataset, view, model_id)           :func:`entries.entry_fingerprint`
per-model metric row        (model_id, dataset, metric)         :func:`scoring.metric_fingerprint`
ensemble row (NC)           (model_id, dataset, metric)         :func:`scoring.group_fingerprint`
pool row (CLID)             (model_id, dataset, metric)         :func:`scoring.pool_fingerprint`
reliability table           (dataset, group)                    the group's fingerprint
sample and label table      dataset                             :meth:`Catalog.labels_fingerprint`
oracle / few-label rows     (model_id, dataset)                 :meth:`Catalog.oracle_fingerprints`
RANK's outputs              the leaderboard commit              :mod:`zoorank.catalog.stage_inputs` (of the
                                                                fresh rows above, the labels, the
                                                                settings and the code)
REPORT's page               ``report/inputs.json``              :mod:`zoorank.catalog.stage_inputs` (idem)
==========================  ==================================  ====================================

Rows derived from embeddings (metrics, ensembles, pools, reliability, oracle) are expected only
over the entries that are ``done`` with their expected fingerprint (a *fresh manifest*): what the
catalog expects of them depends on which embeddings the store holds, so those methods take the
store's manifest (and metrics). *Fresh* = stored fingerprint equals the catalog's; every stage runs
"catalog minus store", every reader reads the fresh rows only, and ``zoorank gc`` deletes what the
store has and the catalog does not.
"""

from __future__ import annotations

from collections import defaultdict
from collections.abc import Sequence
from dataclasses import dataclass, field
from typing import Any

import pandas as pd

from zoorank.catalog.entries import (
    EMBED_VERSION,
    Entry,
    class_names,
    dataset_selection,
    entry_fingerprint,
    plan_entries,
    planned_precision,
)
from zoorank.catalog.head_entries import HeadPlan, plan_heads
from zoorank.catalog.sample_labels import labels_fingerprint, samples_path, with_given_labels
from zoorank.catalog.scoring import (
    CLID_TERMS,
    METRICS_KEY,
    SCORE_VERSION,
    GroupTask,
    ModelInfo,
    ModelTask,
    ScorePlan,
    clid_pools,
    crashed_mask,
    ensemble_metrics,
    entry_fingerprints,
    entry_shards,
    existing_fingerprints,
    expected_pool_fingerprint,
    group_fingerprint,
    metric_fingerprint,
    plan_score,
    pool_fingerprint,
    pool_metrics,
    reliability_path,
    remaining_plan,
)
from zoorank.config import RunConfig
from zoorank.config.digests import fingerprint
from zoorank.data.sources import SampleIndex, index_samples
from zoorank.metrics import registry
from zoorank.store import Store, uris

__all__ = [
    "CLID_TERMS", "EMBED_VERSION", "METRICS_KEY", "ORACLE_VERSION", "SCORE_VERSION", "Catalog",
    "Entry", "GroupTask", "class_names", "ModelInfo", "ModelTask", "ScorePlan", "build_catalog", "clid_pools",
    "crashed_mask",
    "dataset_selection", "ensemble_metrics", "entry_fingerprint", "entry_fingerprints", "entry_shards",
    "existing_fingerprints",
    "expected_fingerprints", "group_fingerprint", "metric_fingerprint", "plan_entries",
    "plan_score", "planned_precision", "pool_fingerprint", "pool_metrics", "reliability_path",
    "remaining_plan",
    "samples_path", "select_fresh", "with_given_labels",
]

Key = tuple[str, str, str]

#: version of the oracle's protocol (split, probes, stored rows): bump it when that changes.
# 2: few-label cells are named <score>:k<k>s<seed> (@ means a view only); 3: kNN and probe rows
# carry their accuracy per test fold (params["fold_values"]: the oracle's own top set)
ORACLE_VERSION = 3
#: the oracle needs at least this many labelled samples and two classes on a dataset.
ORACLE_MIN_LABELLED = 10
#: the reason a stale manifest row carries.
STALE_REASON = "made under another config or version; run `zoorank embed`"


def select_fresh(rows: pd.DataFrame, expected: dict[Key, str]) -> pd.DataFrame:
    """The rows of a long metrics table whose fingerprint is the expected one."""
    if rows.empty:
        return rows
    keys = zip(rows["model_id"], rows["dataset"], rows["metric"], rows["fingerprint"])
    keep = [expected.get((m, d, k)) == fp for m, d, k, fp in keys]
    return rows[keep].reset_index(drop=True)


@dataclass
class Catalog:
    """What ``config`` should have in its store (see the module docstring)."""

    config: RunConfig
    models: list[Any]
    indexes: dict[str, SampleIndex]
    #: (dataset, view, model_id) → the fingerprints EMBED may give it (one, or one per precision
    #: while ``embed.device`` and ``embed.precision`` are both ``auto``).
    entries: dict[Key, tuple[str, ...]]
    digests: uris.DigestCache | None = field(default=None, repr=False)
    _labels: dict[str, str] = field(default_factory=dict, repr=False)
    #: SCORE's whole plan (every expected task, nothing stored) per manifest snapshot, keyed by
    #: the snapshot's done and failed entries (and the registry's metric versions); computed once
    #: and reused by every reader.
    _score_plans: dict[Any, ScorePlan] = field(default_factory=dict, repr=False)
    #: how many SCORE plans this catalog computed (one per manifest snapshot it was asked about).
    score_plans_computed: int = 0

    # -- embeddings ---------------------------------------------------------------------------

    def reindexed(self, indexes: dict[str, SampleIndex]) -> None:
        """Take ``indexes`` (EMBED found undecodable samples this run: they are part of each
        dataset's identity) and recompute the expected entry fingerprints from them."""
        self.indexes.update(indexes)
        self.entries = expected_fingerprints(self.config, self.models, self.indexes)

    def plan_entries(self, precision: str) -> list[Entry]:
        """Every (dataset, view, model) entry with its fingerprint under ``precision``."""
        return plan_entries(self.config, self.models, self.indexes, precision)

    def fresh_manifest(self, manifest: pd.DataFrame) -> pd.DataFrame:
        """``manifest`` without rows the catalog does not have, every ``done`` row whose
        fingerprint is not the expected one marked ``stale``, and every row of a model whose
        checkpoint cannot be read right now marked ``failed`` with that reason
        (:attr:`zoorank.zoo.ResolvedModel.unreadable`: readers name it, not "stale")."""
        if manifest.empty:
            return manifest
        keys = list(zip(manifest["dataset"], manifest["view"], manifest["model_id"]))
        wanted = [k in self.entries for k in keys]
        out = manifest[wanted].copy()
        keys = [k for k, w in zip(keys, wanted) if w]
        stale = [(s == "done") and (fp not in self.entries[k])
                 for k, s, fp in zip(keys, out["status"], out["fingerprint"])]
        out.loc[stale, "status"] = "stale"
        out.loc[stale, "error"] = STALE_REASON
        unreadable = {m.model_id: m.unreadable for m in self.models
                      if getattr(m, "unreadable", None)}
        if unreadable:
            hit = out["model_id"].isin(list(unreadable)).to_numpy()
            out.loc[hit, "status"] = "failed"
            out.loc[hit, "error"] = out.loc[hit, "model_id"].map(unreadable)
        return out.reset_index(drop=True)

    @staticmethod
    def fresh_entries(manifest: pd.DataFrame) -> dict[Key, str]:
        """(dataset, view, model_id) → fingerprint of the ``done`` rows of a fresh manifest."""
        if manifest.empty:
            return {}
        done = manifest[manifest["status"] == "done"]
        return {(r.dataset, r.view, r.model_id): str(r.fingerprint)
                for r in done.itertuples(index=False)}

    # -- metrics, ensembles, pools, reliability -----------------------------------------------

    def expected_score_plan(self, manifest: pd.DataFrame) -> ScorePlan:
        """SCORE's plan over a fresh manifest with nothing stored: every task it would run, with
        the fingerprints of every row it writes. Computed once per manifest snapshot (its done and
        failed entries) and shared; callers must not modify it."""
        done, failed = entry_fingerprints(manifest)
        # the metrics' implementation versions are in every row's fingerprint: a registration
        # made (or bumped) after the plan was computed gives a new plan; the tasks carry the
        # entries' shard lists, so a re-embed under the same fingerprint gives a new plan too
        versions = tuple(sorted((name, e.version) for name, e in registry.REGISTRY.items()))
        key = (frozenset(done.items()), frozenset(failed), versions,
               frozenset(entry_shards(manifest).items()))
        plan = self._score_plans.get(key)
        if plan is None:
            plan = plan_score(self.config, self.models, manifest, pd.DataFrame(columns=["model_id"]),
                              lambda dataset, group: False)
            self._score_plans[key] = plan
            self.score_plans_computed += 1
        return plan

    def plan_score(self, manifest: pd.DataFrame, metrics: pd.DataFrame | None = None,
                   reliability_exists: Any = lambda dataset, group: False) -> ScorePlan:
        """SCORE's plan over a fresh manifest: everything expected, minus what ``metrics`` holds
        (and ensembles whose rows are current and whose reliability table exists)."""
        expected = self.expected_score_plan(manifest)
        if metrics is None or metrics.empty:
            stored: dict[Key, str] = {}
        else:
            stored = existing_fingerprints(metrics)
        return remaining_plan(expected, stored, reliability_exists)

    def metric_fingerprints(self, manifest: pd.DataFrame) -> dict[Key, str]:
        """(model_id, dataset, metric) → the fingerprint of every metric row SCORE writes from
        the fresh entries of ``manifest`` (a fresh manifest): per-model, ensemble and pool rows."""
        plan = self.expected_score_plan(manifest)
        out: dict[Key, str] = {}
        for task in plan.model_tasks:
            for metric, fp in task.fingerprints:
                out[(task.model_id, task.dataset, metric)] = fp
        for group in plan.group_tasks:
            for metric in ensemble_metrics(self.config):
                for member in group.members:
                    out[(member, group.dataset, metric)] = group.fingerprint
        for metric, dataset, members, extra in clid_pools(self.config, self.models, plan):
            fp = expected_pool_fingerprint(metric, dataset, members, extra, out)
            for m in members:
                out[(m, dataset, metric)] = fp
        out.update(self.plan_heads(manifest).fingerprints)
        return out

    def plan_heads(self, manifest: pd.DataFrame) -> HeadPlan:
        """The head rows SCORE should hold over a fresh manifest (:mod:`.heads`)."""
        return plan_heads(self.config, self.models, manifest)

    def reliability_tables(self, manifest: pd.DataFrame) -> dict[tuple[str, str], tuple[str, ...]]:
        """(dataset, group) → members of every seed ensemble whose reliability table is expected
        (an ensemble metric is configured and the group has ≥ 2 fresh members)."""
        plan = self.expected_score_plan(manifest)
        return {(g.dataset, g.group): g.members for g in plan.group_tasks}

    def fresh_reliability(self, manifest: pd.DataFrame, metrics: pd.DataFrame
                          ) -> dict[tuple[str, str], str]:
        """(dataset, group) → fingerprint of the reliability tables that are fresh: expected, and
        written with the ensemble rows that are stored with the expected fingerprint (a table is
        written by the same task as its members' ensemble rows)."""
        plan = self.expected_score_plan(manifest)
        stored = existing_fingerprints(metrics)
        out = {}
        for g in plan.group_tasks:
            if all(stored.get((m, g.dataset, metric)) == g.fingerprint
                   for metric in ensemble_metrics(self.config) for m in g.members):
                out[(g.dataset, g.group)] = g.fingerprint
        return out

    # -- samples and labels -------------------------------------------------------------------

    def samples_frame(self, dataset: str) -> pd.DataFrame:
        """The sample and label table of ``dataset`` as the store keeps it (with ``fingerprint``)."""
        frame = self.indexes[dataset].frame()
        frame["fingerprint"] = self.labels_fingerprint(dataset)
        return frame

    def unlabelled(self) -> dict[str, int]:
        """dataset → its selected images without a label (its own label column, or labels given
        back by ``zoorank label``): what ``zoorank ask`` could still ask for. O(samples)."""
        return {name: len(index) if index.label is None else int(index.label.isna().sum())
                for name, index in self.indexes.items()}

    def labels_fingerprint(self, dataset: str) -> str:
        """Fingerprint of a dataset's sample list and labels (ids, label values, label names):
        changing ``label_column`` (or the labels) changes it; the image bytes do not enter."""
        if dataset not in self._labels:
            self._labels[dataset] = labels_fingerprint(self.indexes[dataset])
        return self._labels[dataset]

    def relabel(self, store: Store) -> None:
        """Take the labels given back since the catalog was built (``zoorank label`` merged some):
        each index gets them where it has none (:func:`with_given_labels`), and the labels
        fingerprints, hence the oracle's and the sample tables', follow. The labels table only
        grows (insert-only, keyed on the sample), so this is what a catalog built now would hold."""
        self.reindexed(with_given_labels(self.config, self.indexes, store))
        self._labels.clear()

    def stale_samples(self, store: Store) -> list[str]:
        """Datasets whose stored sample and label table is missing or not the expected one."""
        out = []
        for name in self.indexes:
            path = samples_path(name)
            try:
                stored = (store.read_frame(path, ["fingerprint"]) if store.table_exists(path)
                          else None)
            except Exception:  # an older table without the column: stale
                stored = None
            if (stored is None or stored.empty or "fingerprint" not in stored.columns
                    or set(stored["fingerprint"]) != {self.labels_fingerprint(name)}):
                out.append(name)
        return out

    def has_oracle_labels(self, dataset: str) -> bool:
        """Whether a dataset has enough labels for the oracle (≥ 10 labelled, ≥ 2 classes)."""
        label = self.indexes[dataset].label
        if label is None:
            return False
        known = label.dropna()
        return len(known) >= ORACLE_MIN_LABELLED and known.nunique() >= 2

    # -- oracle -------------------------------------------------------------------------------

    def oracle_wanted(self) -> bool:
        spec = self.config.oracle
        return bool(spec is not None and self.config.clean_view is not None and any(
            (spec.knn, spec.linear_probe, spec.recall_at_1, spec.r_auroc, spec.loss_data_curve)))

    def oracle_fingerprints(self, manifest: pd.DataFrame, metrics: pd.DataFrame
                            ) -> dict[tuple[str, str], tuple[str, str | None]]:
        """(model_id, dataset) → (fingerprint, reliability group or None) of the oracle and
        few-label rows: one per model with fresh clean embeddings on a labelled dataset. The
        fingerprint hashes the entry, the oracle settings, the seed, the labels (hence the split)
        and, with ``r_auroc``, the fresh reliability table of the model's seed ensemble."""
        if not self.oracle_wanted():
            return {}
        spec, clean = self.config.oracle, self.config.clean_view.name
        done = self.fresh_entries(manifest)
        rel = self.fresh_reliability(manifest, metrics) if spec.r_auroc else {}
        out: dict[tuple[str, str], tuple[str, str | None]] = {}
        for ds in self.config.datasets:
            if not self.has_oracle_labels(ds.name):
                continue
            labels = self.labels_fingerprint(ds.name)
            for m in self.models:
                key = (ds.name, clean, m.model_id)
                if key not in done:
                    continue
                group = getattr(m, "group", None)
                rel_fp = rel.get((ds.name, group)) if group else None
                fp = fingerprint("oracle", done[key], spec, self.config.seed, labels, rel_fp,
                                 self.config.score.resample_folds, ORACLE_VERSION)
                out[(m.model_id, ds.name)] = (fp, group if rel_fp else None)
        return out

    # -- readers --------------------------------------------------------------------------------

    def fresh_metrics(self, store: Store, manifest: pd.DataFrame | None = None) -> pd.DataFrame:
        """The stored metric rows that are fresh."""
        manifest = self.fresh_manifest(store.read_manifest()) if manifest is None else manifest
        return select_fresh(store.read_metrics(), self.metric_fingerprints(manifest))


def expected_fingerprints(config: RunConfig, models: list[Any], indexes: dict[str, SampleIndex]
                          ) -> dict[Key, tuple[str, ...]]:
    """(dataset, view, model_id) → the fingerprints EMBED may give that entry under ``config``.

    One per entry, except when ``embed.device`` and ``embed.precision`` are both ``auto``: then
    the cluster that embeds decides the precision, and each of fp32/bf16/fp16 is accepted (the
    precision is still in the fingerprint, so one store never mixes two for an entry).
    """
    precision = planned_precision(config.embed)
    out: dict[Key, tuple[str, ...]] = defaultdict(tuple)
    for p in [precision] if precision else ["fp32", "bf16", "fp16"]:
        for e in plan_entries(config, models, indexes, p):
            out[e.key] += (e.fingerprint,)
    return dict(out)


def build_catalog(config: RunConfig, models: Sequence[Any] | None = None,
                  store: Store | None = None) -> Catalog:
    """The catalog of ``config``: resolves the zoo (unless ``models`` is given) and indexes every
    dataset once; ``store``: the config's store, when the caller holds it already."""
    from zoorank.zoo import resolve_models

    store = Store(config.store) if store is None else store
    digests = uris.DigestCache(store)
    models = resolve_models(config, digests) if models is None else list(models)
    indexes = {spec.name: index_samples(spec, config.seed, digests) for spec in config.datasets}
    indexes = with_given_labels(config, indexes, store)
    return Catalog(config, list(models), indexes, expected_fingerprints(config, models, indexes),
                   digests)
