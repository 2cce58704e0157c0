"""Pool-level SCORE rows: a pool metric (CLID = z(CL) + z(ID)) over the dataset's pool of models,
from the per-model rows of its terms (the registry's ``requires``)."""

from __future__ import annotations

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
    extra: dict[str, Any] | None = None,
) -> list[dict[str, Any]]:
    """Rows of a pool metric (CLID: z(CL) + z(ID)) over the pool of ``model_ids`` whose terms
    (the registry's ``requires``) are all finite; its registered ``combine`` computes the values.

    Every candidate gets a row: the pool members a finite value, the others NaN with the reason;
    when the combination fails (CLID: fewer than 2 pool members) every row is NaN with the reason.
    The fingerprint hashes the candidates' term fingerprints, so any change in the pool recomputes it.
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
    base = {**entry.kwargs(), "terms": list(needed), "pool": pool, "pool_size": len(pool),
            **(extra or {})}
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


def plan_pool_rows(
    config: RunConfig, models: list[ModelInfo], plan: ScorePlan, metrics: pd.DataFrame
) -> list[dict[str, Any]]:
    """The ``clid`` / ``clid_family`` rows whose fingerprint changed (empty when up to date)."""
    stored = existing_fingerprints(metrics)
    out = []
    for metric, dataset, members, extra in clid_pools(config, models, plan):
        rows = pool_rows(metric, dataset, members, metrics, config.seed, extra=extra)
        if any(stored.get((r["model_id"], dataset, r["metric"])) != r["fingerprint"]
               for r in rows):
            out.extend(rows)
    return out
