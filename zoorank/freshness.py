"""The one freshness check every reader calls: which stored rows describe what the current config
would compute.

A stored row is *fresh* when its fingerprint equals the fingerprint the current config gives it:

* an embedding entry (a manifest row): status ``done`` and the fingerprint EMBED would compute
  (:func:`zoorank.embed.expected_fingerprints`: model weights digest, preprocessing, dataset
  content and sample selection, view recipe and seed, precision, embed implementation version);
* a per-model metric row: :func:`zoorank.score.metric_fingerprint` over its fresh entry;
* an ensemble's ``nc`` rows: :func:`zoorank.score.group_fingerprint` over its members' fresh entries;
* a pool row (``clid``, ``clid_family``): :func:`zoorank.score.pool_fingerprint` over the expected
  fingerprints of its candidates' CL and ID rows.

Everything else is *stale*: rows of metrics no longer configured, of models or datasets no longer in
the config, of other settings or implementation versions, or over embeddings that are pending,
failed or stale. SCORE recomputes what is stale, RANK and REPORT read fresh rows only, and
``zoorank gc CONFIG`` deletes stale rows and orphaned shards.
"""

from __future__ import annotations

from collections.abc import Sequence
from typing import Any

import pandas as pd

from zoorank.config import RunConfig
from zoorank.store import Store

Key = tuple[str, str, str]


def fresh_manifest(
    config: RunConfig, store: Store, models: Sequence[Any], manifest: pd.DataFrame | None = None
) -> pd.DataFrame:
    """The manifest with every ``done`` row whose fingerprint is not the expected one marked
    ``stale`` (and rows of entries the config does not have dropped)."""
    from zoorank.embed import expected_fingerprints

    manifest = store.read_manifest() if manifest is None else manifest
    if manifest.empty:
        return manifest
    expected = expected_fingerprints(config, list(models))
    keys = list(zip(manifest["dataset"], manifest["view"], manifest["model_id"]))
    wanted = [k in expected for k in keys]
    out = manifest[wanted].copy()
    keys = [k for k, w in zip(keys, wanted) if w]
    stale = [(s == "done") and (fp not in expected[k])
             for k, s, fp in zip(keys, out["status"], out["fingerprint"])]
    out.loc[stale, "status"] = "stale"
    out.loc[stale, "error"] = "made under another config or version; run `zoorank embed`"
    return out.reset_index(drop=True)


def fresh_entries(manifest: pd.DataFrame) -> dict[Key, str]:
    """(dataset, view, model_id) → fingerprint of the ``done`` rows of a :func:`fresh_manifest`."""
    done = manifest[manifest["status"] == "done"]
    return {(r.dataset, r.view, r.model_id): str(r.fingerprint)
            for r in done.itertuples(index=False)}


def expected_metric_fingerprints(
    config: RunConfig, models: Sequence[Any], manifest: pd.DataFrame
) -> dict[Key, str]:
    """(model_id, dataset, metric) → the fingerprint SCORE gives that row under ``config``, for
    every row SCORE would write from the fresh entries of ``manifest`` (a fresh manifest)."""
    from zoorank.score import CLID_TERMS, clid_pools, plan_score, pool_fingerprint

    plan = plan_score(config, list(models), manifest, pd.DataFrame(columns=["model_id"]),
                      lambda dataset, group: False)
    out: dict[Key, str] = {}
    for task in plan.model_tasks:
        for metric, fp in task.fingerprints:
            out[(task.model_id, task.dataset, metric)] = fp
    for group in plan.group_tasks:
        for member in group.members:
            out[(member, group.dataset, "nc")] = group.fingerprint
    for metric, dataset, members, extra in clid_pools(config, list(models), plan):
        terms = [(m, t, out.get((m, dataset, t))) for m in members for t in CLID_TERMS]
        fp = pool_fingerprint(metric, dataset, terms, extra)
        for m in members:
            out[(m, dataset, metric)] = fp
    return out


def select_fresh(metrics: pd.DataFrame, expected: dict[Key, str]) -> pd.DataFrame:
    """The rows of a long metrics table whose fingerprint is the expected one."""
    if metrics.empty:
        return metrics
    keys = zip(metrics["model_id"], metrics["dataset"], metrics["metric"], metrics["fingerprint"])
    keep = [expected.get((m, d, k)) == fp for m, d, k, fp in keys]
    return metrics[keep].reset_index(drop=True)


def fresh_metrics(
    config: RunConfig, store: Store, models: Sequence[Any] | None = None,
    manifest: pd.DataFrame | None = None,
) -> pd.DataFrame:
    """``metrics.parquet`` restricted to the rows that are fresh for ``config``."""
    if models is None:
        from zoorank.zoo import resolve_models

        models = resolve_models(config)
    manifest = fresh_manifest(config, store, models) if manifest is None else manifest
    expected = expected_metric_fingerprints(config, models, manifest)
    return select_fresh(store.read_metrics(), expected)
