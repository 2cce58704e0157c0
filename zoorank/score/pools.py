"""Pool-level SCORE rows: a pool metric (CLID = z(CL) + z(ID)) over the dataset's pool of models,
from the per-model rows of its terms (the registry's ``requires``).

A pool's members are stored once, in the ``pools`` table (:func:`pool_record`: ``pool_id``,
metric, dataset, members as JSON); each row of the pool names it by ``pool_id`` in its params, so
the metrics table grows O(n) in bytes with the pool, not O(n²).
"""

from __future__ import annotations

import hashlib
import json
import math
import warnings
from collections import defaultdict
from collections.abc import Iterable
from typing import Any

import numpy as np
import pandas as pd

from zoorank.catalog import (
    CLID_TERMS,
    ModelInfo,
    ScorePlan,
    clid_pools,
    crashed_mask,
    existing_fingerprints,
    pool_fingerprint,
)
from zoorank.config import RunConfig
from zoorank.metrics import registry
from zoorank.score.worker import metric_row

# -- pool-level scores -------------------------------------------------------------------------------


def _finite_terms(metrics: pd.DataFrame, dataset: str, model_ids: list[str],
                  needed: Iterable[str] = CLID_TERMS) -> dict[str, Any]:
    """model_id → {metric: (value, fingerprint, n, dim)} for a pool metric's terms. A term row a
    crashed task left is no term: the pool's fingerprint then differs from the catalog's, so its
    rows are not fresh and are recomputed once the term has its value."""
    sub = metrics[(metrics["dataset"] == dataset) & metrics["metric"].isin(list(needed))
                  & metrics["model_id"].isin(model_ids) & ~crashed_mask(metrics)]
    terms: dict[str, dict[str, tuple]] = defaultdict(dict)
    for r in sub.itertuples(index=False):
        terms[r.model_id][r.metric] = (float(r.value), r.fingerprint, int(r.n), int(r.dim))
    return terms


def pool_rows(
    metric: str, dataset: str, model_ids: list[str], metrics: pd.DataFrame, seed: int,
    extra: dict[str, Any] | None = None, records: list[dict[str, Any]] | None = None,
) -> list[dict[str, Any]]:
    """Rows of a pool metric (CLID: z(CL) + z(ID)) over the pool of ``model_ids`` whose terms
    (the registry's ``requires``) are all finite; its registered ``combine`` computes the values.

    Every candidate gets a row: the pool members a finite value, the others NaN with the reason;
    when the combination fails (CLID: fewer than 2 pool members) every row is NaN with the reason.
    The fingerprint hashes the candidates' term fingerprints, so any change in the pool recomputes it.
    The rows name the pool by ``pool_id``; ``records`` (when given) receives its
    :func:`pool_record`, the one place its members are written.
    """
    entry = registry.info(metric)
    needed = entry.requires
    terms = _finite_terms(metrics, dataset, model_ids, needed)
    fp = pool_fingerprint(
        metric, dataset,
        [(m, t, terms.get(m, {}).get(t, (None, None))[1]) for m in model_ids for t in needed],
        extra,
    )
    pool = [m for m in model_ids
            if all(t in terms[m] and math.isfinite(terms[m][t][0]) for t in needed)]
    base = {**entry.kwargs(), "terms": list(needed), "pool_id": pool_id(metric, dataset, pool, extra),
            "pool_size": len(pool), **(extra or {})}
    if records is not None:
        records.append(pool_record(metric, dataset, pool, extra))
    values: dict[str, float] = {}
    failure = None
    if pool:
        arrays = [np.array([terms[m][t][0] for m in pool]) for t in needed]
        with warnings.catch_warnings(record=True) as caught:
            warnings.simplefilter("always")
            try:
                values = dict(zip(pool, entry.combine(*arrays, **entry.kwargs())))
            except ValueError as err:
                failure = f"{metric} over {len(pool)} model(s): {err}"
        if caught:
            base["warnings"] = [str(w.message) for w in caught]
    else:
        failure = f"{metric} needs models with every term finite ({list(needed)}); got none"
    rows = []
    for m in model_ids:
        params = dict(base)
        _, _, n, dim = terms.get(m, {}).get(needed[0], (0, None, 0, 0))
        if m in values:
            params.update({t: terms[m][t][0] for t in needed})
            value = float(values[m])
        elif m not in pool:
            value = math.nan
            params["error"] = (f"a term of {metric} ({list(needed)}) is undefined for this model "
                               "(see its rows)")
        else:
            value = math.nan
            params["error"] = failure
        rows.append(metric_row(m, dataset, metric, value, params, n, dim, seed, fp))
    return rows


def pool_id(metric: str, dataset: str, pool: list[str], extra: dict[str, Any] | None) -> str:
    """A short, stable id of a pool: its metric, dataset, members (in order) and scope."""
    text = json.dumps([metric, dataset, list(pool), extra or {}], sort_keys=True)
    return hashlib.sha256(text.encode()).hexdigest()[:16]


def pool_record(metric: str, dataset: str, pool: list[str], extra: dict[str, Any] | None
                ) -> dict[str, Any]:
    """The ``pools`` table row of a pool: its id, metric, dataset, scope and members (JSON)."""
    return {"pool_id": pool_id(metric, dataset, pool, extra), "metric": metric,
            "dataset": dataset, "scope": json.dumps(extra or {}, sort_keys=True),
            "pool_size": len(pool), "members": json.dumps(list(pool))}


def plan_pool_rows(
    config: RunConfig, models: list[ModelInfo], plan: ScorePlan, metrics: pd.DataFrame
) -> tuple[list[dict[str, Any]], list[dict[str, Any]]]:
    """(the ``clid`` / ``clid_family`` rows whose fingerprint changed, the ``pools`` rows of their
    pools); both empty when up to date. Cost: O(n) per pool."""
    stored = existing_fingerprints(metrics)
    out, pools = [], []
    for metric, dataset, members, extra in clid_pools(config, models, plan):
        record: list[dict[str, Any]] = []
        rows = pool_rows(metric, dataset, members, metrics, config.seed, extra, record)
        if any(stored.get((r["model_id"], dataset, r["metric"])) != r["fingerprint"]
               for r in rows):
            out.extend(rows)
            pools.extend(record)
    return out, pools
