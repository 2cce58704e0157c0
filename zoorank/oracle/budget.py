"""The label-budget curve: how many labels per class a few-label score needs to beat label-free ranking.

For each dataset with a label oracle and each configured transferability score
(``oracle.transferability``: ``logme``, ``h_score``, ``nleep``, ``gbc``), each labels-per-class k
(``oracle.labels_per_class``) and each seed (``oracle.label_budget_seeds``):

1. a seeded stratified subset of the oracle's **train** split with k labels per class (nested: the
   first k of one seeded permutation per class, so a larger budget adds labels to a smaller one);
2. the score of every model on its features of that subset (:func:`transferability_rows`, run
   inside the oracle's per-model task and stored in ``oracle.parquet`` under the metric name
   ``<score>:k<k>s<seed>``, e.g. ``logme:k5s0``: ``@`` is reserved for views);
3. the Kendall τ-b of the resulting model ranking against the full oracle (kNN accuracy, linear
   probe accuracy) over all models (:func:`budget_agreement`), per seed (with the bootstrap
   interval of :func:`zoorank.stats.agreement.agreement`) and as the mean over seeds (its
   interval from the same model resamples applied to every seed).

The label-free metrics' τ in ``agreement.parquet`` are the zero-label reference; the crossover of a
score is the smallest k at which its mean τ exceeds the best label-free metric's τ
(:func:`crossovers`). Budget rows go in ``agreement.parquet`` beside the label-free rows, told apart
by ``labels_per_class`` (NaN on label-free rows) and ``budget_seed`` (the seed, or ``"mean"``).

Pure functions; the RANK stage calls :func:`split_oracle` and :func:`with_budget_rows`, the REPORT
stage :func:`split_agreement`, :func:`crossovers` and :func:`crossover_lines`.
"""

from __future__ import annotations

import json
import math
import re
import time
import warnings
from collections.abc import Mapping, Sequence
from typing import Any

import numpy as np
import pandas as pd

from zoorank.metrics.registry import BUDGET_SEPARATOR, oracles
from zoorank.stats.agreement import (
    ResampledKendall,
    agreement,
    draw_counts,
    kendall_tau_b_rows,
    model_bootstrap,
    percentile_interval,
)
from zoorank.stats.ranks import rank_within

__all__ = [
    "BUDGET_COLUMNS",
    "REFERENCE_ORACLES",
    "budget_agreement",
    "crossover_lines",
    "crossovers",
    "split_agreement",
    "split_oracle",
    "stratified_subset",
    "transferability_rows",
    "with_budget_rows",
    "zoo_relative_cells",
]

#: oracle metrics the curve is measured against, in order of preference (the first is the headline).
REFERENCE_ORACLES = oracles()
#: columns the budget rows add to ``agreement.parquet``.
BUDGET_COLUMNS = ["labels_per_class", "budget_seed"]
#: label-free rows of ``agreement.parquet`` that are not a metric of their own.
_NOT_A_METRIC = ("leaderboard_rank",)
#: a cell's score is ``<score>`` or, for a zoo-relative score's raw term, ``<score>.<term>``.
_NAME = re.compile(
    r"^(?P<score>[a-z_]+(?:\.[a-z_]+)?)" + re.escape(BUDGET_SEPARATOR)
    + r"k(?P<k>\d+)s(?P<seed>\d+)$"
)


def _score_functions() -> dict[str, Any]:
    """The registry's few-label scores (``zoorank.metrics.few_label.logme`` registers them)."""
    from zoorank.metrics import registry

    return registry.few_label_scores()


def budget_metric_name(score: str, labels_per_class: int, seed: int) -> str:
    """``<score>:k<k>s<seed>``: the metric name of one budget cell in ``oracle.parquet``."""
    return f"{score}{BUDGET_SEPARATOR}k{int(labels_per_class)}s{int(seed)}"


def stratified_subset(labels: np.ndarray, labels_per_class: int, seed: int) -> np.ndarray:
    """Sorted positions of ``min(k, n_c)`` samples of every class c, seeded and nested in k.

    Class c's samples are permuted once by ``numpy.random.default_rng([seed, c])``; the subset
    takes the first k of that permutation, so the subset for k ⊂ the subset for k' > k.
    """
    labels = np.asarray(labels)
    if labels_per_class < 1:
        raise ValueError(f"labels_per_class must be >= 1, got {labels_per_class}")
    picked = []
    for code, value in enumerate(np.unique(labels)):
        where = np.flatnonzero(labels == value)
        order = np.random.default_rng([int(seed), code]).permutation(len(where))
        picked.append(where[order[:labels_per_class]])
    return np.sort(np.concatenate(picked))


def _score_terms(score: str) -> tuple[str, ...]:
    """The raw terms of a zoo-relative few-label score (ETran, NCTI); () for the others."""
    from zoorank.metrics import registry

    entry = registry.REGISTRY.get(score)
    return entry.terms if entry is not None else ()


def transferability_rows(train_Z: np.ndarray, train_y: np.ndarray, scores: Sequence[str],
                         labels_per_class: Sequence[int], seeds: int,
                         base_seed: int = 0) -> list[dict[str, Any]]:
    """Every (score, k, seed) cell of one model: rows ``{metric, value, params, n, dim}``.

    A k above the smallest class size is still run (every class gives what it has; ``params``
    records ``n``); a score that fails on the subset (ValueError, e.g. GBC with one sample per
    class) gives NaN with ``params['error']``; a :class:`DegenerateInputWarning` (SFDA's
    saturation) is kept in ``params['warning']``. A zoo-relative score (registered with
    ``terms``: ETran, NCTI) gives one row per raw term, ``<score>.<term>:k<k>s<seed>``, which
    :func:`zoo_relative_cells` combines over the models in RANK.
    """
    from zoorank.metrics import DegenerateInputWarning

    functions = _score_functions()
    rows: list[dict[str, Any]] = []
    dim = int(train_Z.shape[1])
    for s in range(seeds):
        seed = base_seed + s
        for k in labels_per_class:
            idx = stratified_subset(train_y, k, seed)
            Zs, ys = train_Z[idx], train_y[idx]
            for score in scores:
                terms = _score_terms(score)
                params: dict[str, Any] = {"score": score, "labels_per_class": int(k),
                                          "seed": seed, "subset": "oracle train split"}
                start = time.perf_counter()
                with warnings.catch_warnings(record=True) as caught:
                    warnings.simplefilter("always", DegenerateInputWarning)
                    try:
                        out = functions[score](Zs, ys)
                        values = ([float(v) for v in np.asarray(out, dtype=np.float64)]
                                  if terms else [float(out)])
                    except ValueError as err:
                        values = [math.nan] * max(1, len(terms))
                        params = {**params, "error": str(err)}
                flagged = [str(w.message) for w in caught
                           if issubclass(w.category, DegenerateInputWarning)]
                if flagged:
                    params["warning"] = "; ".join(flagged)
                params["seconds"] = round(time.perf_counter() - start, 4)
                names = [f"{score}.{t}" for t in terms] if terms else [score]
                for name, value in zip(names, values, strict=True):
                    rows.append({"metric": budget_metric_name(name, k, seed), "value": value,
                                 "params": params, "n": len(idx), "dim": dim})
    return rows


def zoo_relative_cells(cells: pd.DataFrame) -> pd.DataFrame:
    """Budget cells with every zoo-relative score's raw terms combined into its own cells.

    For each score registered with ``terms`` (ETran, NCTI) and each (dataset, k, seed), the term
    cells ``<score>.<term>`` of all models are combined by the registration's function
    (``etran_combine``, ``ncti_combine``: min–max over the models that have every term finite) into
    cells ``<score>`` (``params`` names the terms); the term cells are dropped. Other cells pass
    unchanged. Cost O(m) per (dataset, k, seed) for m models.
    """
    from zoorank.metrics import registry

    if cells.empty:
        return cells
    zoo_relative = {n: m for n, m in registry.REGISTRY.items() if m.terms and m.combine}
    parts = cells["score"].astype(str).str.partition(".")
    is_term = parts[0].isin(list(zoo_relative)).to_numpy() & (parts[2] != "").to_numpy()
    if not is_term.any():
        return cells
    terms_cells = cells[is_term].assign(_base=parts[0][is_term], _term=parts[2][is_term])
    out = [cells[~is_term]]
    keys = ["dataset", "_base", "labels_per_class", "budget_seed"]
    for (_dataset, base, k, seed), group in terms_cells.groupby(keys, sort=True):
        entry = zoo_relative[base]
        wide = group.pivot_table(index="model_id", columns="_term", values="value",
                                 aggfunc="last", dropna=False).reindex(columns=list(entry.terms))
        arrays = [wide[t].to_numpy(np.float64) for t in entry.terms]
        ok = np.logical_and.reduce([np.isfinite(a) for a in arrays])
        value = np.full(len(wide), np.nan)
        if ok.any():
            value[ok] = entry.combine(*[a[ok] for a in arrays])
        first = group.drop_duplicates("model_id").set_index("model_id").reindex(wide.index)
        combined = first.drop(columns=["_base", "_term"]).reset_index()
        combined["score"] = base
        combined["metric"] = budget_metric_name(base, int(k), int(seed))
        combined["value"] = value
        combined["params"] = json.dumps({"score": base, "terms": list(entry.terms),
                                         "zoo_relative": entry.combine.__name__,
                                         "models": int(ok.sum())})
        out.append(combined[cells.columns])
    return pd.concat(out, ignore_index=True)


def split_oracle(oracle: pd.DataFrame) -> tuple[pd.DataFrame, pd.DataFrame]:
    """(oracle rows, budget cells) of the oracle table; cells get ``score``, ``labels_per_class``,
    ``budget_seed`` columns parsed from their metric names."""
    if oracle.empty:
        return oracle, pd.DataFrame(columns=[*oracle.columns, "score", *BUDGET_COLUMNS])
    parsed = oracle["metric"].astype(str).str.extract(_NAME)
    is_cell = parsed["score"].notna().to_numpy()
    cells = oracle[is_cell].copy()
    cells["score"] = parsed.loc[is_cell, "score"].to_numpy()
    cells["labels_per_class"] = parsed.loc[is_cell, "k"].astype(int).to_numpy()
    cells["budget_seed"] = parsed.loc[is_cell, "seed"].astype(int).to_numpy()
    return oracle[~is_cell].reset_index(drop=True), cells.reset_index(drop=True)


def split_agreement(agree: pd.DataFrame) -> tuple[pd.DataFrame, pd.DataFrame]:
    """(label-free agreement rows, budget rows) of ``agreement.parquet``."""
    if agree.empty or "labels_per_class" not in agree:
        return agree, agree.iloc[0:0]
    budget = agree["labels_per_class"].notna().to_numpy()
    return agree[~budget].reset_index(drop=True), agree[budget].reset_index(drop=True)


def _seed_mean(values: np.ndarray, oracle: np.ndarray, oracle_dir: int, bootstrap: int,
               seed: int, confidence: float) -> tuple[float, float, float]:
    """(mean τ over seeds, CI low, CI high): values (seeds × models), one resample for all seeds.

    Cost O(S · B · n log n) for S seeds, B resamples and n models; memory bounded by
    :data:`~zoorank.stats.agreement.BOOTSTRAP_MEMORY`.
    """
    so = -rank_within(oracle, oracle_dir)
    sm = np.stack([-rank_within(v, +1) for v in values])
    mean = _mean_tau(sm, np.broadcast_to(so, sm.shape))
    if bootstrap <= 0:
        return mean, math.nan, math.nan
    dist = model_bootstrap(len(so), _seed_mean_statistic(sm, so), bootstrap, seed,
                           rows=len(sm))
    low, high = percentile_interval(dist, confidence)[0]
    return mean, float(low), float(high)


def _mean_tau(sm: np.ndarray, so: np.ndarray) -> float:
    taus = kendall_tau_b_rows(sm, so)
    return float(np.nanmean(taus)) if np.isfinite(taus).any() else math.nan


def _seed_mean_statistic(sm: np.ndarray, so: np.ndarray) -> Any:
    """Model indices (batch, n) → per replicate the mean τ over the seeds whose τ is defined in it
    (a resample of tied models has none); NaN when no seed's is. ``sm``: (seeds, n)."""
    per_seed = [ResampledKendall(row, so) for row in sm]

    def statistic(idx: np.ndarray, axis: int = -1) -> np.ndarray:
        counts = draw_counts(idx, len(so))
        taus = np.stack([kendall(counts) for kendall in per_seed])
        ok = np.isfinite(taus)
        n_ok = ok.sum(axis=0)
        with np.errstate(invalid="ignore", divide="ignore"):
            return np.where(n_ok > 0, np.where(ok, taus, 0.0).sum(axis=0) / n_ok, np.nan)

    return statistic


def budget_agreement(cells: pd.DataFrame, oracle_values: Mapping[str, pd.Series],
                     oracle_directions: Mapping[str, int], dataset: str, bootstrap: int = 1000,
                     seed: int = 0, confidence: float = 0.95) -> list[dict[str, Any]]:
    """Agreement rows of the budget cells of one dataset against each oracle metric.

    ``cells``: rows of :func:`split_oracle` (model_id, score, labels_per_class, budget_seed,
    value); ``oracle_values[o]``: the oracle metric o per model_id (NaN dropped). One row per
    (score, oracle, k, seed) from :func:`~zoorank.stats.agreement.agreement`, plus one with
    ``budget_seed = "mean"``: the mean τ over seeds with a bootstrap interval over models.
    Cost O(S · B · n log n) per (score, oracle, k) for S seeds, B resamples and n models.
    """
    rows: list[dict[str, Any]] = []
    for o_name, o_series in oracle_values.items():
        o_series = o_series.dropna()
        o_dir = oracle_directions[o_name]
        for (score, k), group in cells.groupby(["score", "labels_per_class"], sort=True):
            wide = group.pivot_table(index="model_id", columns="budget_seed", values="value",
                                     aggfunc="last", dropna=False)
            ids = [m for m in o_series.index if m in wide.index]
            if len(ids) < 3:
                continue
            wide, o = wide.reindex(ids), o_series.loc[ids].to_numpy(np.float64)
            base = {"metric": score, "oracle_metric": o_name, "dataset": dataset,
                    "family": "all", "labels_per_class": float(k)}
            for s in wide.columns:
                res = agreement(wide[s].to_numpy(np.float64), o, +1, o_dir, bootstrap=bootstrap,
                                seed=seed, confidence=confidence)
                rows.append({**base, **res, "budget_seed": str(int(s))})
            tau, low, high = _seed_mean(wide.to_numpy(np.float64).T, o, o_dir, bootstrap, seed,
                                        confidence)
            rows.append({**base, "n_models": len(ids), "kendall_tau": tau, "kendall_ci_low": low,
                         "kendall_ci_high": high, "budget_seed": "mean"})
    return rows


def with_budget_rows(agree: pd.DataFrame, board: pd.DataFrame, cells: pd.DataFrame,
                     oracle_directions: Mapping[str, int], bootstrap: int, seed: int
                     ) -> pd.DataFrame:
    """``agree`` with the budget rows of every dataset appended (no-op without budget cells).

    ``board`` is the leaderboard (``model_id`` and ``<dataset>/<oracle metric>`` columns).
    """
    if cells.empty or board.empty:
        return agree
    board = board.set_index("model_id")
    rows = []
    for ds, ds_cells in cells.groupby("dataset", sort=False):
        oracle_values = {o: board[f"{ds}/{o}"] for o in REFERENCE_ORACLES if f"{ds}/{o}" in board}
        rows += budget_agreement(ds_cells, oracle_values, oracle_directions, str(ds), bootstrap,
                                 seed)
    if not rows:
        return agree
    extra = pd.DataFrame(rows)
    out = pd.concat([agree.assign(labels_per_class=np.nan, budget_seed=None), extra],
                    ignore_index=True)
    return out[[*agree.columns, *BUDGET_COLUMNS]] if len(agree.columns) else out


def best_label_free(label_free: pd.DataFrame, dataset: str, oracle_metric: str
                    ) -> tuple[str, float] | None:
    """(metric, τ) of the label-free metric with the highest τ against one oracle over all models."""
    a = label_free[(label_free["dataset"] == dataset) & (label_free["oracle_metric"] == oracle_metric)
                   & (label_free["family"] == "all") & ~label_free["metric"].isin(_NOT_A_METRIC)]
    if "kind" in a:  # the priors' rows (zoorank.stats.priors) are baselines, not metrics
        a = a[a["kind"] != "prior"]
    a = a[np.isfinite(a["kendall_tau"].to_numpy(np.float64))]
    if a.empty:
        return None
    best = a.loc[a["kendall_tau"].idxmax()]
    return str(best["metric"]), float(best["kendall_tau"])


def crossovers(agree: pd.DataFrame) -> pd.DataFrame:
    """One row per (dataset, oracle, score): the smallest k whose mean τ beats the best label-free τ
    (strictly, at the two decimals the verdicts print, so a tie is not called an overtake).

    Columns ``dataset, oracle_metric, score, best_label_free, best_label_free_tau,
    crossover_labels_per_class`` (NaN: never within the budget), ``tau_at_crossover``,
    ``max_labels_per_class``, ``tau_at_max``.
    """
    label_free, budget = split_agreement(agree)
    columns = ["dataset", "oracle_metric", "score", "best_label_free", "best_label_free_tau",
               "crossover_labels_per_class", "tau_at_crossover", "max_labels_per_class",
               "tau_at_max"]
    if budget.empty:
        return pd.DataFrame(columns=columns)
    means = budget[budget["budget_seed"] == "mean"]
    rows = []
    for (ds, o_name, score), curve in means.groupby(["dataset", "oracle_metric", "metric"],
                                                    sort=False):
        curve = curve.sort_values("labels_per_class")
        ref = best_label_free(label_free, str(ds), str(o_name))
        name, ref_tau = ref if ref else ("", math.nan)
        # strictly above at the printed precision (2 decimals): a tie is never an overtake
        above = curve[curve["kendall_tau"].round(2) > round(ref_tau, 2)] if ref else curve.iloc[0:0]
        first = above.iloc[0] if len(above) else None
        rows.append({"dataset": ds, "oracle_metric": o_name, "score": score,
                     "best_label_free": name, "best_label_free_tau": ref_tau,
                     "crossover_labels_per_class": (float(first["labels_per_class"])
                                                    if first is not None else math.nan),
                     "tau_at_crossover": (float(first["kendall_tau"]) if first is not None
                                          else math.nan),
                     "max_labels_per_class": float(curve["labels_per_class"].iloc[-1]),
                     "tau_at_max": float(curve["kendall_tau"].iloc[-1])})
    return pd.DataFrame(rows, columns=columns)


def crossover_lines(table: pd.DataFrame) -> list[str]:
    """The printed verdicts: one line per (dataset, oracle, score) of :func:`crossovers`."""
    lines = []
    for r in table.itertuples(index=False):
        head = f"{r.dataset} vs {r.oracle_metric}: {r.score}"
        if not r.best_label_free:
            lines.append(f"{head}: no label-free metric to compare with")
        elif math.isnan(r.crossover_labels_per_class):
            lines.append(f"{head} does not overtake {r.best_label_free} "
                         f"(τ={r.best_label_free_tau:+.2f}) within "
                         f"{r.max_labels_per_class:.0f} labels/class "
                         f"(τ={r.tau_at_max:+.2f} there)")
        else:
            lines.append(f"{head} overtakes {r.best_label_free} (τ={r.best_label_free_tau:+.2f}) "
                         f"at {r.crossover_labels_per_class:.0f} labels/class "
                         f"(τ={r.tau_at_crossover:+.2f})")
    return lines
