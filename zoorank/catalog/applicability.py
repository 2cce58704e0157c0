"""Which configured metrics a run can compute (pure): a metric the config's views, or the zoo's
seed ensembles or families, make impossible is skipped with one line (:func:`skipped_line`), never
flagged as failed on every model. What each metric needs is read from
:mod:`zoorank.metrics.registry`.
"""

from __future__ import annotations

from collections import defaultdict
from collections.abc import Iterable
from typing import Any

from zoorank.config import RunConfig
from zoorank.metrics import registry


def wants(model: Any, dataset: str) -> bool:
    """Whether ``model`` is ranked on ``dataset`` (a model entry's ``datasets:``; default all)."""
    wanted = getattr(model, "wants", None)
    return True if wanted is None else bool(wanted(dataset))


def view_reason(config: RunConfig, metric: str) -> str | None:
    """Why the config's views make ``metric`` impossible (the registry's inputs, through a pool
    metric's terms): it reads an augmented view and none is configured, or the clean view and it
    is not configured; None when it can run."""
    views = ", ".join(v.name for v in config.views)
    needs = registry.needs(metric)
    if "augmented" in needs and not config.augmented_views:
        return f"an augmented view (views: {views})"
    if "clean" in needs and config.clean_view is None:
        return f"the clean view (views: {views})"
    return None


def inapplicable_metrics(config: RunConfig, models: Iterable[Any] = ()) -> dict[str, str]:
    """Configured metric (stored name) → what it needs that the config does not give: a view
    (:func:`view_reason`), a seed ensemble (an ensemble metric where no two of ``models``, the
    resolved zoo, share a ``group`` and a dataset), a family (a pool metric drawn per family
    where no model has one). SCORE skips them: no rows, no failure flags. O(models · datasets)."""
    models = list(models)
    datasets = [d.name for d in config.datasets]
    out: dict[str, str] = {}
    for metric in registry.expand(config.metrics):
        why = view_reason(config, metric)
        entry = registry.info(metric)
        if why is None and entry.inputs == "ensemble" and not _any_ensemble(models, datasets):
            why = "a seed ensemble (two or more models with one group)"
        if why is None and entry.inputs == "pool" and pool_key(metric) is not None and not any(
                getattr(m, str(pool_key(metric)), None) for m in models):
            why = f"models with a {pool_key(metric)}"
        if why is not None:
            out[metric] = why
    return out


def skipped_line(config: RunConfig, models: Iterable[Any] = ()) -> str | None:
    """The one line that says which configured metrics are skipped and why
    (:func:`inapplicable_metrics`), or None: ``skipped lidar, alignment, rankme_aug: they need an
    augmented view (views: clean)``."""
    by_reason: dict[str, list[str]] = defaultdict(list)
    for metric, why in inapplicable_metrics(config, models).items():
        by_reason[why].append(metric)
    if not by_reason:
        return None
    parts = [f"{', '.join(names)}: {'they need' if len(names) > 1 else 'it needs'} {why}"
             for why, names in by_reason.items()]
    return "skipped " + "; ".join(parts)


def _any_ensemble(models: list[Any], datasets: list[str]) -> bool:
    for dataset in datasets:
        groups = [getattr(m, "group", None) for m in models if wants(m, dataset)]
        named = [g for g in groups if g]
        if len(named) != len(set(named)):
            return True
    return False


def pool_key(metric: str) -> str | None:
    """What a pool metric's pools are drawn by: None (every eligible model of the dataset) or a
    model attribute (``family``). Read from the registry entry's ``scope`` (``"dataset"`` or
    ``"family"``) when it declares one."""
    scope = getattr(registry.info(metric), "scope", None)
    if scope is not None:
        return None if scope == "dataset" else str(scope)
    return "family" if metric.endswith("_family") else None
