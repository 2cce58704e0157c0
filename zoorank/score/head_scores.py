"""SCORE for classifier heads: the label-free accuracy estimates of every model whose clean shards
carry ``logits`` (manifest ``logit_dim > 0``), their fold rows, and the heads' own accuracy on
labelled datasets (the classifier oracle, which RANK moves to the oracle).

Orchestration on the driver: a head's logits are n × K floats (K classes, not the embedding
width), so one dataset's zoo is read and scored in one process, in O(models · n · K) memory.
Which rows are due and their fingerprints: :mod:`zoorank.catalog.head_entries`; the maths:
:mod:`zoorank.metrics.heads.classifier`. A dataset is recomputed whole when any of its head rows is
missing or stale (the zoo estimates read every model). An estimate that raises is a NaN row with
the reason, as every SCORE row.

Images. A model's estimates read its clean logits capped to ``score.max_samples`` exactly as the
embedding metrics (:func:`zoorank.metrics.suite.select_samples`); the zoo estimates read the
images every headed model has. Source-calibrated estimates (DoC, ATC, COT) read the model's clean
logits on the ``source:`` dataset and that dataset's labels (unlabelled images left out). Fold rows
recompute every estimate on each fold of the target images (the source set stays whole), so RANK's
fold bootstrap gives the classifier board its intervals like any ranked metric (the nuclear norm,
not a mean over images, is computed per fold).
"""

from __future__ import annotations

import math
import time
from collections.abc import Callable
from typing import Any

import numpy as np
import pandas as pd

from zoorank.catalog.head_entries import HEAD_ORACLE, HeadPlan
from zoorank.catalog.scoring import existing_fingerprints
from zoorank.config import RunConfig
from zoorank.errors import InputError
from zoorank.metrics import registry
from zoorank.metrics.suite import select_samples
from zoorank.oracle import resample
from zoorank.score import fold_rows
from zoorank.score.worker import metric_row
from zoorank.stats.uncertainty import fold_assignment
from zoorank.store import METRICS, Store
from zoorank.store.schema import METRICS_KEY


def load_logits(store: Store, dataset: str, view: str, model_id: str,
                shards: tuple[str, ...] | None, max_samples: int | None, seed: int
                ) -> tuple[np.ndarray, np.ndarray]:
    """(sample_ids, n × K float32 logits) of a model's first view on ``dataset`` (only the id and
    logits columns are read: :meth:`zoorank.store.Store.read_logits`), capped to ``max_samples``
    exactly as the embedding metrics (:func:`zoorank.metrics.suite.select_samples`)."""
    rows = store.read_logits(dataset, view, model_id, None if shards is None else list(shards))
    first = rows.view_index == (rows.view_index.min() if len(rows.view_index) else 0)
    ids, z = rows.sample_id[first], rows.logits[first]
    keep = select_samples(ids, max_samples, seed)
    return ids[keep], z[keep]


def _labels(store: Store, dataset: str) -> pd.Series:
    from zoorank.data import read_samples

    samples = read_samples(store, dataset)
    samples = samples[samples["label"].notna()]
    return pd.Series(samples["label"].to_numpy(dtype=np.int64),
                     index=samples["sample_id"].to_numpy(dtype=np.int64))


def _estimate(fn: Callable[[np.ndarray], Any], n: int, folds: np.ndarray | None, n_folds: int
              ) -> tuple[Any, str | None, list[Any]]:
    """(value on all n rows, error, value on each fold: None where it fails) of ``fn(rows)``."""
    try:
        value = fn(np.arange(n))
    except ValueError as err:
        return None, str(err), []
    per_fold: list[Any] = []
    for k in range(n_folds if folds is not None else 0):
        rows = np.flatnonzero(folds == k)
        try:
            per_fold.append(fn(rows) if rows.size else None)
        except ValueError:
            per_fold.append(None)
    return value, None, per_fold


def _target(fn: Callable[..., Any], z: np.ndarray, *args: Any, **kwargs: Any
            ) -> Callable[[np.ndarray], Any]:
    """``rows → fn(z[rows], *args, **kwargs)``: an estimate on a subset of the target images."""
    return lambda rows: fn(z[rows], *args, **kwargs)


def _labelled(fn: Callable[..., Any], z: np.ndarray, y: np.ndarray) -> Callable[[np.ndarray], Any]:
    return lambda rows: fn(z[rows], y[rows])


def _zoo(fn: Callable[..., Any], preds: np.ndarray, **kwargs: Any) -> Callable[[np.ndarray], Any]:
    return lambda rows: fn(preds[:, rows], **kwargs)


def _fold_values(values: list[Any], j: int | None = None) -> list[float]:
    return [math.nan if v is None else float(v if j is None else v[j]) for v in values]


class _Rows:
    """The rows of one dataset's head step: metric rows and fold rows, for the expected keys."""

    def __init__(self, config: RunConfig, dataset: str, wanted: dict[tuple[str, str, str], str]):
        self.config, self.dataset, self.wanted = config, dataset, wanted
        self.rows: list[dict[str, Any]] = []
        self.folds: list[dict[str, Any]] = []

    def emit(self, mid: str, name: str, value: Any, error: str | None, fold_values: list[float],
             n: int, dim: int, params: dict[str, Any]) -> None:
        fp = self.wanted.get((mid, self.dataset, name))
        if fp is None:
            return
        params = {"view": "logits", **params}
        if error:
            params["error"] = error
        v = math.nan if value is None else float(value)
        if name == HEAD_ORACLE:
            if fold_values:  # the oracle's folds ride on its row (zoorank.decide.oracle_top_sets)
                params["fold_values"] = fold_values
        elif fold_values and math.isfinite(v):
            self.folds.extend(fold_rows.fold_rows(mid, self.dataset, name, fold_values,
                                                 resample.fold_fingerprint(fp, self.config.score)))
        self.rows.append(metric_row(mid, self.dataset, name, v, params, n, dim, self.config.seed,
                                    fp))


def _dataset_rows(config: RunConfig, store: Store, plan: HeadPlan, ds: str, clean: str
                  ) -> tuple[list[dict[str, Any]], list[dict[str, Any]]]:
    """(metric rows, fold rows) of every head row of dataset ``ds``."""
    o, seed = config.score, config.seed
    wanted = plan.rows_of(ds)
    out = _Rows(config, ds, wanted)
    estimates = registry.classifier_metrics()
    n_folds = o.resample_folds if resample.enabled(o) else 0
    logits = {m: load_logits(store, ds, clean, m, e.shards, o.max_samples, seed)
              for m, e in plan.entries[ds].items()}
    source_labels = _labels(store, config.source) if config.source and plan.source else None
    target_labels = _labels(store, ds) if any(k[2] == HEAD_ORACLE for k in wanted) else None
    for mid, (ids, z) in logits.items():
        folds = fold_assignment(ids, n_folds, o.resample_fraction, seed) if n_folds else None
        src = None
        if mid in plan.source and source_labels is not None:
            s_ids, s_z = load_logits(store, config.source, clean, mid, plan.source[mid].shards,
                                     o.max_samples, seed)
            has = np.isin(s_ids, source_labels.index.to_numpy())
            src = (s_z[has], source_labels.loc[s_ids[has]].to_numpy(dtype=np.int64))
        for name, info in estimates.items():
            if info.notes.get("zoo") or (mid, ds, name) not in wanted:
                continue
            kwargs = info.kwargs(o, seed)
            params = {**kwargs, **info.notes}
            if not info.notes.get("source"):
                fn = _target(info.function, z, **kwargs)
            elif src is None:
                continue
            else:
                params.update(source=config.source, source_n=int(len(src[1])))
                # COT reads the source labels only (their class distribution)
                fn = (_target(info.function, z, src[1], seed=seed, **kwargs)
                      if name == "cot_accuracy" else _target(info.function, z, *src, **kwargs))
            start = time.perf_counter()
            value, error, per_fold = _estimate(fn, len(ids), folds, n_folds)
            params["seconds"] = round(time.perf_counter() - start, 4)
            out.emit(mid, name, value, error, _fold_values(per_fold), len(ids), z.shape[1], params)
        if target_labels is not None and (mid, ds, HEAD_ORACLE) in wanted:
            has = np.isin(ids, target_labels.index.to_numpy())
            y = target_labels.loc[ids[has]].to_numpy(dtype=np.int64)
            o_folds = fold_assignment(ids[has], n_folds, 1.0, seed) if n_folds else None
            value, error, per_fold = _estimate(
                _labelled(registry.label_info(HEAD_ORACLE).function, z[has], y), int(has.sum()),
                o_folds, n_folds)
            out.emit(mid, HEAD_ORACLE, value, error, _fold_values(per_fold), int(has.sum()),
                     z.shape[1], {"labelled": int(has.sum())})
    # zoo estimates: the images every headed model has, the models in a fixed order
    zoo_ids = sorted(logits)
    common = logits[zoo_ids[0]][0]
    for mid in zoo_ids[1:]:
        common = np.intersect1d(common, logits[mid][0])
    widths = sorted({logits[m][1].shape[1] for m in zoo_ids})
    preds = None
    if len(widths) == 1 and common.size:
        preds = np.vstack([logits[m][1][np.searchsorted(logits[m][0], common)].argmax(axis=1)
                           for m in zoo_ids])
    folds = fold_assignment(common, n_folds, o.resample_fraction, seed) \
        if n_folds and common.size else None
    for name, info in estimates.items():
        if not info.notes.get("zoo"):
            continue
        kwargs = info.kwargs(o, seed)
        if preds is None:
            values, per_fold = None, []
            error = (f"the zoo's heads have different numbers of classes ({widths})"
                     if len(widths) > 1 else "no image common to the zoo")
        else:
            values, error, per_fold = _estimate(
                _zoo(info.function, preds, n_classes=widths[0], **kwargs), common.size, folds,
                n_folds)
        for j, mid in enumerate(zoo_ids):
            out.emit(mid, name, None if values is None else values[j], error,
                     _fold_values(per_fold, j), int(common.size), widths[-1],
                     {**kwargs, **info.notes, "zoo_models": len(zoo_ids)})
    return out.rows, out.folds


def score_heads(config: RunConfig, store: Store, plan: HeadPlan, metrics: pd.DataFrame
                ) -> tuple[int, list[str]]:
    """Compute and upsert the head rows ``plan`` expects and ``metrics`` lacks (whole datasets);
    (datasets scored, errors)."""
    clean = config.clean_view.name if config.clean_view else None
    stored = existing_fingerprints(metrics)
    scored, errors = 0, []
    for ds in plan.entries:
        due = {k: fp for k, fp in plan.rows_of(ds).items() if stored.get(k) != fp}
        if not due or clean is None:
            continue
        try:
            rows, folds = _dataset_rows(config, store, plan, ds, clean)
        except (OSError, ValueError, KeyError, InputError) as err:
            errors.append(f"{ds}/heads: {type(err).__name__}: {err}")
            continue
        if folds:
            store.upsert_rows(resample.RESAMPLES, pd.DataFrame(folds), key=resample.RESAMPLES_KEY)
        if rows:
            store.upsert_rows(METRICS, pd.DataFrame(rows), key=METRICS_KEY)
        scored += 1
    return scored, errors
