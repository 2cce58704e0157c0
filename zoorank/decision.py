"""The decision a leaderboard supports: rank intervals, the top set, health flags, the consensus of
the label-free metrics and the width confound (issue 17). Part of the RANK stage.

Orchestration over pure maths: :mod:`zoorank.metrics.uncertainty` (fold bootstrap → intervals,
p_best, top set), :mod:`zoorank.metrics.health` (flags), :func:`zoorank.metrics.consensus.kendall_w`
and :func:`~zoorank.metrics.consensus.rank_disagreement`. Inputs are the leaderboard frame of
:func:`zoorank.rank.board.build_leaderboard`, the fresh metric rows, the fresh fold rows and health rows
(:mod:`zoorank.resample`).

Outputs: leaderboard columns ``rank_low``, ``rank_high``, ``p_best``, ``in_top_set`` (of the
leaderboard's own order: the aggregate of the primary metric's ranks; the top set is a
rank-consistent Model Confidence Set, :func:`zoorank.metrics.uncertainty.top_set`),
``flags``, ``disagreement``, ``tied_with`` (the other models with the same leaderboard value: a
seed ensemble scored by one ensemble-level value) and, when the oracle ran with folds,
``in_oracle_top_set`` (the label oracle's own top set from the same fold bootstrap over its test
images, :func:`oracle_top_sets`); a long
table ``uncertainty`` (model_id, dataset, metric, rank, rank_low, rank_high, p_best, in_top_set)
for every resampled metric; and the ``decision`` settings (top set and its guarantee, the oracle's
top sets and their comparison with it, consensus sentence, Kendall's W per dataset, width warning,
and the confounds: metrics whose order a prior explains, :func:`confound_warnings`).
"""

from __future__ import annotations

import json
import math
from collections.abc import Mapping, Sequence
from typing import Any

import numpy as np
import pandas as pd

from zoorank.config import RunConfig
from zoorank.leaderboard import ranking_vector
from zoorank.metrics import registry
from zoorank.metrics.consensus import kendall_w, rank_disagreement
from zoorank.metrics.health import BLOCKING, health_flags
from zoorank.metrics.primary import WIDTH_SENSITIVE
from zoorank.metrics.priors import (
    CONFOUND_MIN_MODELS,
    CONFOUND_TAU,
    PARAMS,
    WIDTH,
    confounds,
    is_prior_column,
)
from zoorank.metrics.ranks import AGGREGATION_DIRECTIONS, aggregate_ranks
from zoorank.metrics.uncertainty import (
    TOP_SET_GUARANTEE,
    RankUncertainty,
    fold_bootstrap,
    fold_scale,
    rank_uncertainty,
    replicate_ranks,
)

UNCERTAINTY = "uncertainty"
UNCERTAINTY_COLUMNS = ["model_id", "dataset", "metric", "rank", "rank_low", "rank_high", "p_best",
                       "in_top_set"]
DECISION_COLUMNS = ["rank_low", "rank_high", "p_best", "in_top_set", "flags", "disagreement",
                    "tied_with", "in_oracle_top_set"]
#: oracle metrics with fold values, in the order that picks the ``in_oracle_top_set`` column's.
ORACLE_TOP_SET_METRICS = ("knn_accuracy", "linear_probe_accuracy")
#: at most this many model ids in a ``tied_with`` cell (then "+k more").
TIED_SHOWN = 5
#: a metric joins the consensus when it has a value for at least this share of the ranked models
#: (NC of a zoo with one small seed ensemble ranks only its members).
COVERAGE = 2 / 3
#: below this Kendall's W the label-free metrics are said to disagree even when their leaders agree.
WEAK_CONCORDANCE = 0.5


def _ranked_metrics(board: pd.DataFrame, dataset: str) -> list[str]:
    """The primary-eligible label-free metrics with a column for ``dataset`` on the board."""
    out = []
    for col in board.columns:
        ds, _, metric = col.partition("/")
        if ds != dataset or "/" in metric or not registry.is_label_free(metric):
            continue
        if registry.info(metric).primary and board[col].notna().sum() >= 1:
            out.append(metric)
    return out


def _fold_matrix(folds: pd.DataFrame, dataset: str, metric: str, model_ids: Sequence[str],
                 n_folds: int) -> np.ndarray | None:
    sub = folds[(folds["dataset"] == dataset) & (folds["metric"] == metric)]
    if sub.empty:
        return None
    table = sub.pivot_table(index="model_id", columns="fold", values="value", aggfunc="last")
    table = table.reindex(index=list(model_ids), columns=range(n_folds))
    return table.to_numpy(dtype=np.float64)


def model_flags(
    board: pd.DataFrame, metrics: pd.DataFrame, health: pd.DataFrame, datasets: Sequence[str]
) -> dict[str, dict[str, list[str]]]:
    """model_id → dataset → health flags (:func:`zoorank.metrics.health.health_flags`), with the
    configured label-free metrics that have no value as ``failed:<metric>``. O(rows + n · datasets)."""
    ids = list(board["model_id"])
    stats = {(r["model_id"], r["dataset"]): r for r in health.to_dict("records")} \
        if not health.empty else {}
    failed: dict[tuple[str, str], list[str]] = {}
    if not metrics.empty:
        nan = metrics[metrics["value"].isna() & metrics["model_id"].isin(ids)]
        for r in nan.itertuples(index=False):
            if registry.is_label_free(r.metric):
                failed.setdefault((r.model_id, r.dataset), []).append(r.metric)
    return {m: {ds: health_flags(stats.get((m, ds)), failed.get((m, ds), ())) for ds in datasets}
            for m in ids}


def _flags_text(flags: Mapping[str, list[str]]) -> str:
    if len(flags) == 1:
        return ",".join(next(iter(flags.values())))
    return ",".join(f"{ds}:{f}" for ds, fs in flags.items() for f in fs)


def metric_uncertainty(
    config: RunConfig, board: pd.DataFrame, folds: pd.DataFrame,
    blocked: Mapping[str, np.ndarray],
) -> tuple[pd.DataFrame, dict[tuple[str, str], tuple[np.ndarray, np.ndarray]]]:
    """Per (dataset, resampled metric): the uncertainty rows and (oriented point, replicates).

    Cost per metric: O(B · n log n) time (ranking each replicate) and O(B · n) memory for n
    models and B = ``rank.resamples``; no array has two model axes."""
    o, r = config.score, config.rank
    ids = list(board["model_id"])
    rows: list[dict[str, Any]] = []
    replicates: dict[tuple[str, str], tuple[np.ndarray, np.ndarray]] = {}
    if folds.empty or not o.resample_folds:
        return pd.DataFrame(columns=UNCERTAINTY_COLUMNS), replicates
    scale = fold_scale(o.resample_folds, o.resample_fraction)
    for ds in [d.name for d in config.datasets]:
        for metric in _ranked_metrics(board, ds):
            matrix = _fold_matrix(folds, ds, metric, ids, o.resample_folds)
            if matrix is None:
                continue
            raw = board[f"{ds}/{metric}"].to_numpy(dtype=np.float64)
            entry = registry.info(metric)
            point = np.asarray(entry.oriented(raw), dtype=np.float64)
            reps = np.asarray(entry.oriented(
                fold_bootstrap(raw, matrix, r.resamples, config.seed, scale)), dtype=np.float64)
            u = rank_uncertainty(point, reps, r.confidence, blocked.get(ds))
            replicates[(ds, metric)] = (point, reps)
            rank = replicate_ranks(point[None, :])[0]
            for i, m in enumerate(ids):
                rows.append({"model_id": m, "dataset": ds, "metric": metric, "rank": rank[i],
                             "rank_low": u.rank_low[i], "rank_high": u.rank_high[i],
                             "p_best": u.p_best[i], "in_top_set": bool(u.in_top_set[i])})
    return pd.DataFrame(rows, columns=UNCERTAINTY_COLUMNS), replicates


def aggregate_uncertainty(
    config: RunConfig, board: pd.DataFrame, primary: Mapping[str, str],
    replicates: Mapping[tuple[str, str], tuple[np.ndarray, np.ndarray]], blocked: np.ndarray,
) -> RankUncertainty | None:
    """Uncertainty of the leaderboard's own order: each replicate's primary-metric ranks per
    dataset aggregated as the leaderboard aggregates them; None without replicates.

    Cost O(B · n log n · datasets) time, O(B · n · datasets) memory."""
    keys = [(ds, m) for ds, m in primary.items() if (ds, m) in replicates]
    if not keys or len(keys) < len(primary):
        return None
    if len(keys) == 1:
        point, reps = replicates[keys[0]]
        return rank_uncertainty(point, reps, config.rank.confidence, blocked)
    method = config.rank.aggregation
    sign = AGGREGATION_DIRECTIONS[method]
    weights = {k: v for k, v in config.rank.dataset_weights.items() if k in primary}
    point = sign * board["aggregate"].to_numpy(dtype=np.float64)
    n_rep = replicates[keys[0]][1].shape[0]
    out = np.full((n_rep, len(board)), np.nan)
    # every replicate of a dataset ranked at once (NaN: no value, no rank)
    ranks = {ds: replicate_ranks(replicates[(ds, m)][1]) for ds, m in keys}
    for b in range(n_rep):
        frame = pd.DataFrame({ds: r[b] for ds, r in ranks.items()})
        has = frame.notna().any(axis=1).to_numpy()
        agg = np.full(len(board), np.nan)
        if has.any():
            agg[has] = aggregate_ranks(frame[has], method, weights).to_numpy()
        out[b] = sign * agg
    return rank_uncertainty(point, out, config.rank.confidence, blocked)


def consensus(
    board: pd.DataFrame, dataset: str, top_set: Sequence[str],
    per_metric: pd.DataFrame,
) -> dict[str, Any]:
    """Kendall's W of the dataset's ranked label-free metrics, each metric's best model and
    whether it lies in the leaderboard's top set, per-model disagreement, and a plain sentence.

    Metrics that rank fewer than :data:`COVERAGE` of the ranked models are left out (``partial``);
    W uses the models every included metric ranks (:func:`kendall_w`). Cost O(k · n log n) for k
    metrics and n models: (k, n) rank matrices, never a model pair."""
    ranked = board["rank"].notna().to_numpy() if "rank" in board else np.ones(len(board), bool)
    need = max(2, math.ceil(COVERAGE * int(ranked.sum())))
    candidates = _ranked_metrics(board, dataset)
    metrics = [m for m in candidates if board[f"{dataset}/{m}"].notna().sum() >= need]
    ids = list(board["model_id"])
    out: dict[str, Any] = {"metrics": metrics, "kendall_w": math.nan, "best": {},
                           "partial": [m for m in candidates if m not in metrics],
                           "disagreement": [math.nan] * len(ids), "agree": True}
    if len(metrics) < 2:
        out["sentence"] = (f"Only {len(metrics)} ranked label-free metric on {dataset}: "
                           "no consensus to measure.")
        return out
    ranks = []
    for m in metrics:
        oriented = np.asarray(registry.info(m).oriented(board[f"{dataset}/{m}"].to_numpy(float)))
        r = replicate_ranks(oriented[None, :])[0]
        ranks.append(r)
        finite = np.isfinite(oriented)
        out["best"][m] = ids[int(np.nanargmax(np.where(finite, oriented, -np.inf)))]
    ranks = np.vstack(ranks)
    w = kendall_w(ranks)
    out["kendall_w"] = w
    out["disagreement"] = rank_disagreement(ranks).tolist()
    top = set(top_set)
    outside = {m: b for m, b in out["best"].items() if b not in top}
    out["agree"] = not outside and (math.isnan(w) or w >= WEAK_CONCORDANCE)
    w_text = f"Kendall's W = {w:.2f} over {len(metrics)} metrics"
    if not outside and out["agree"]:
        out["sentence"] = (f"The label-free metrics agree on {dataset}: each one's best model is "
                           f"in the top set ({w_text}).")
    elif not outside:
        out["sentence"] = (f"The label-free metrics agree on {dataset} only about the leaders: "
                           f"each one's best model is in the top set, but they order the rest "
                           f"differently ({w_text}).")
    else:
        picks = "; ".join(f"{m} → {b}" for m, b in list(outside.items())[:4])
        more = f" (+{len(outside) - 4} more)" if len(outside) > 4 else ""
        out["sentence"] = (f"The label-free metrics disagree about the top set on {dataset} "
                           f"({w_text}): best outside it: {picks}{more}. Do not trust a single "
                           "metric here; check the models they pick.")
    return out


def width_warning(metrics: pd.DataFrame, model_ids: Sequence[str], primary: Mapping[str, str],
                  computed: Sequence[str]) -> str | None:
    """A warning when ranked models have different embedding widths and a width-sensitive metric
    (:data:`zoorank.metrics.primary.WIDTH_SENSITIVE`) orders the board or is computed."""
    if metrics.empty:
        return None
    sub = metrics[metrics["model_id"].isin(model_ids) & (metrics["dim"] > 0)]
    widths = sorted({int(d) for d in sub.groupby("model_id")["dim"].max()})
    if len(widths) < 2:
        return None
    sensitive = sorted({registry.split_view(m)[0] for m in computed}
                       & WIDTH_SENSITIVE)
    ordering = sorted({m for m in primary.values()
                       if registry.split_view(m)[0] in WIDTH_SENSITIVE})
    if not sensitive:
        return None
    shown = ", ".join(str(w) for w in widths[:6]) + (" ..." if len(widths) > 6 else "")
    lead = (f"the leaderboard is ordered by {', '.join(ordering)}, which grows with the width, "
            "so its order may reflect width rather than quality" if ordering else
            f"{', '.join(sensitive)} grow with the width: compare them only within one width")
    return (f"Width confound: the zoo mixes embedding widths ({shown}); {lead}. Width-normalised "
            "variants: rankme_norm (RankMe / width), rankme_proj (RankMe after one fixed random orthonormal "
            "projection to 64 dimensions).")


def tied_with(board: pd.DataFrame) -> list[str]:
    """Per model, the other models with the same leaderboard ``rank`` (ranks are tie-averaged, so
    equal values share one), comma-separated, at most :data:`TIED_SHOWN` then ``+k more``; ``""``
    for an untied or unranked model. A seed ensemble ranked by one ensemble-level value (NC) is
    one such tie. Cost O(n log n)."""
    if "rank" not in board or board.empty:
        return [""] * len(board)
    ids = board["model_id"].astype(str).to_numpy()
    rank = board["rank"].to_numpy(dtype=np.float64)
    out = [""] * len(ids)
    ranked = np.flatnonzero(np.isfinite(rank))
    for _, members in pd.Series(ranked).groupby(rank[ranked]):
        if len(members) < 2:
            continue
        idx = members.to_numpy()
        for i in idx:
            others = [ids[j] for j in idx if j != i]
            more = len(others) - TIED_SHOWN
            out[i] = ", ".join(others[:TIED_SHOWN]) + (f" (+{more} more)" if more > 0 else "")
    return out


def _oracle_folds(oracle: pd.DataFrame, dataset: str, metric: str, ids: Sequence[str]
                  ) -> tuple[np.ndarray, np.ndarray] | None:
    """(point (m,), fold values (m, F)) of one oracle metric from its rows' ``fold_values``
    params; None when no row of the board's models carries them (an oracle run before version 3)."""
    sub = oracle[(oracle["dataset"] == dataset) & (oracle["metric"] == metric)]
    point = np.full(len(ids), np.nan)
    rows: dict[str, list[float]] = {}
    where = {m: i for i, m in enumerate(ids)}
    for r in sub.itertuples(index=False):
        if r.model_id not in where:
            continue
        params = json.loads(r.params) if isinstance(r.params, str) else r.params
        params = params if isinstance(params, dict) else {}
        if params.get("fold_values"):
            rows[r.model_id] = [float(v) for v in params["fold_values"]]
            point[where[r.model_id]] = float(r.value)
    if not rows:
        return None
    n_folds = max(len(v) for v in rows.values())
    folds = np.full((len(ids), n_folds), np.nan)
    for m, v in rows.items():
        folds[where[m], :len(v)] = v
    return point, folds


def oracle_top_sets(config: RunConfig, board: pd.DataFrame, oracle: pd.DataFrame | None,
                    top: Sequence[str]) -> dict[str, dict[str, Any]]:
    """The label oracle's own top set per dataset and oracle metric, compared with the
    label-free top set ``top``.

    The oracle's accuracy on each fold of its test images (``fold_values``) goes through the same
    fold bootstrap as the label-free metrics (the same seed, so the same fold draws; all test
    images are in folds, scale ``fold_scale(F, 1)``) and the same rank-consistent MCS at the
    run's confidence. ``"dataset/metric"`` → {top_set, overlap, regret (the oracle's best
    accuracy minus the best inside the label-free top set), noise (the half-width of the normal
    interval at the run's confidence of that paired difference over the replicates), within_noise,
    sentence}. Cost O(B · n) per oracle metric plus the MCS."""
    from scipy import stats

    out: dict[str, dict[str, Any]] = {}
    if oracle is None or oracle.empty or "params" not in oracle:
        return out
    ids = [str(m) for m in board["model_id"]]
    c, B = config.rank.confidence, config.rank.resamples
    z = float(stats.norm.ppf((1 + c) / 2))
    in_top = np.array([m in set(top) for m in ids])
    for ds in [d.name for d in config.datasets]:
        for metric in ORACLE_TOP_SET_METRICS:
            got = _oracle_folds(oracle, ds, metric, ids)
            if got is None:
                continue
            point, folds = got
            reps = fold_bootstrap(point, folds, B, config.seed, fold_scale(folds.shape[1], 1.0))
            oracle_top = rank_uncertainty(point, reps, c).in_top_set
            members = [m for m, t in zip(ids, oracle_top) if t]
            shared = [m for m, t in zip(ids, oracle_top & in_top) if t]
            best = int(np.nanargmax(point))
            inside = in_top & np.isfinite(point)
            regret = noise = math.nan
            if inside.any():
                j = int(np.flatnonzero(inside)[np.nanargmax(point[inside])])
                regret = float(point[best] - point[j])
                noise = float(z * np.std(reps[:, best] - reps[:, j]))
            within = bool(shared) or (math.isfinite(regret) and regret <= noise + 1e-12)
            name = metric.replace("_", " ")
            if shared:
                shown = ", ".join(shared[:3]) + (f" (+{len(shared) - 3} more)"
                                                 if len(shared) > 3 else "")
                sentence = (f"On {ds}, the label-free top set of {len(top)} models and the "
                            f"oracle's own {c:.0%} top set by {name}, {len(members)} models, "
                            f"share {len(shared)}: {shown}.")
            elif math.isfinite(regret):
                sentence = (f"On {ds}, the label-free top set of {len(top)} models and the "
                            f"oracle's own {c:.0%} top set by {name}, {len(members)} models, do "
                            f"not overlap: the best {name} inside the label-free top set is "
                            f"{100 * regret:.1f} pp below the oracle's best, "
                            f"{'within' if within else 'beyond'} the oracle's noise "
                            f"({100 * noise:.1f} pp at {c:.0%}).")
            else:
                sentence = (f"On {ds}, no model of the label-free top set has a {name} value: "
                            "no comparison with the oracle's top set.")
            out[f"{ds}/{metric}"] = {
                "dataset": ds, "metric": metric, "top_set": members, "size": len(members),
                "n_folds": int(folds.shape[1]), "overlap": shared, "regret": regret,
                "noise": noise, "within_noise": within, "sentence": sentence}
    return out


def prior_columns(board: pd.DataFrame) -> list[str]:
    """The board's prior columns (``params``, ``width``, ``prior/<name>``) with at least one value."""
    return [c for c in board.columns if is_prior_column(c) and board[c].notna().any()]


def _prior_words(prior: str) -> str:
    return {PARAMS: "the parameter count", WIDTH: "the embedding width"}.get(
        prior, f"the prior {prior.split('/', 1)[-1]}")


def confound_warnings(board: pd.DataFrame, datasets: Sequence[str]) -> list[dict[str, Any]]:
    """Every (label-free metric or the leaderboard's rank, prior) whose order a prior explains.

    Per dataset, each label-free metric column on the board and the leaderboard rank
    (``leaderboard_rank``) against each prior column (:func:`prior_columns`), by the rule of
    :func:`zoorank.metrics.priors.confounds` (|τ-b| ≥ :data:`~zoorank.metrics.priors.CONFOUND_TAU`
    over ≥ :data:`~zoorank.metrics.priors.CONFOUND_MIN_MODELS` models). Returns
    ``{dataset, metric, prior, tau, n, sentence}`` dicts. Cost O(D · M · P · n log n).
    """
    priors = {c: board[c].to_numpy(dtype=np.float64) for c in prior_columns(board)}
    if not priors or board.empty:
        return []
    per_dataset: dict[str, dict[str, tuple[np.ndarray, int]]] = {}
    if "rank" in board and board["rank"].notna().any():
        # the leaderboard's order is one over all datasets (dataset "all")
        per_dataset["all"] = {"leaderboard_rank": (board["rank"].to_numpy(dtype=np.float64), -1)}
    for ds in datasets:
        per_dataset[ds] = {}
        for col in board.columns:
            d, _, metric = col.partition("/")
            if d != ds or "/" in metric or not registry.is_label_free(metric):
                continue
            oriented = ranking_vector(metric, board[col].to_numpy())
            if oriented is not None:
                per_dataset[ds][metric] = oriented
    out = []
    for ds, candidates in per_dataset.items():
        for hit in confounds(candidates, priors):
            what = ("the leaderboard's order" if hit["metric"] == "leaderboard_rank"
                    else f"{hit['metric']} on {ds}")
            way = "follows" if hit["tau"] > 0 else "runs against"
            hit["sentence"] = (
                f"Confound: {what} {way} {_prior_words(hit['prior'])} (Kendall τ {hit['tau']:+.2f} "
                f"over {hit['n']} models, |τ| ≥ {CONFOUND_TAU}): its order may reflect "
                f"{_prior_words(hit['prior'])} rather than transfer to this data; compare models "
                "of similar size, or check against labels.")
            out.append({"dataset": ds, **hit})
    return out


def decide(
    config: RunConfig, board: pd.DataFrame, settings: dict[str, Any], metrics: pd.DataFrame,
    folds: pd.DataFrame, health: pd.DataFrame, oracle: pd.DataFrame | None = None,
) -> tuple[pd.DataFrame, pd.DataFrame]:
    """Add the decision columns to ``board`` and ``settings["decision"]``; returns (board, the
    per-metric uncertainty table). ``oracle``: the fresh oracle rows (for the oracle's top set).
    Cost O(B · n log n) per resampled metric (n models, B resamples) plus the top set; memory
    O(B · n) per metric: nothing here pairs models."""
    datasets = [d.name for d in config.datasets]
    board = board.copy()
    ids = list(board["model_id"])
    flags = model_flags(board, metrics, health, datasets)
    blocked_ds = {ds: np.array([bool(set(flags[m][ds]) & BLOCKING) for m in ids])
                  for ds in datasets}
    blocked = np.any(np.vstack([blocked_ds[ds] for ds in datasets]), axis=0) if ids else \
        np.zeros(0, dtype=bool)
    per_metric, replicates = metric_uncertainty(config, board, folds, blocked_ds)
    primary = settings.get("primary_metric") or {}
    agg = aggregate_uncertainty(config, board, primary, replicates, blocked)
    if agg is not None:
        board["rank_low"], board["rank_high"] = agg.rank_low, agg.rank_high
        board["p_best"], board["in_top_set"] = agg.p_best, agg.in_top_set
        top_rule = "mcs"
    else:
        # no resampled rows: the top set is the rank-1 model(s) without a blocking flag
        rank = board["rank"].to_numpy(dtype=np.float64)
        board["rank_low"] = board["rank_high"] = rank
        board["p_best"] = np.nan
        ok = np.isfinite(rank) & ~blocked
        best = np.min(rank[ok]) if ok.any() else math.nan
        board["in_top_set"] = ok & (rank == best)
        top_rule = "point (no resampled rows: run `zoorank score` with score.resample_folds >= 2)"
    board["flags"] = [_flags_text(flags[m]) for m in ids]
    board["tied_with"] = tied_with(board)
    top = [m for m, t in zip(ids, board["in_top_set"]) if t]
    oracle_sets = oracle_top_sets(config, board, oracle, top)
    reference = next((v for k in ORACLE_TOP_SET_METRICS for v in oracle_sets.values()
                      if v["metric"] == k), None)
    if reference is not None:  # no column without an oracle top set (no oracle, or no folds)
        # a model in the reference oracle's top set on any labelled dataset
        chosen = {m for v in oracle_sets.values() if v["metric"] == reference["metric"]
                  for m in v["top_set"]}
        board["in_oracle_top_set"] = np.array([m in chosen for m in ids], dtype=bool)
    agreements = {ds: consensus(board, ds, top, per_metric) for ds in datasets}
    dis = np.vstack([np.asarray(a["disagreement"], dtype=np.float64) for a in agreements.values()])
    counts = np.isfinite(dis).sum(axis=0)
    board["disagreement"] = np.where(counts > 0, np.nansum(dis, axis=0) / np.maximum(counts, 1),
                                     np.nan)
    computed = sorted({c.split("/", 1)[1] for c in board.columns if "/" in c
                       and registry.is_label_free(c.split("/", 1)[1])})
    warning = width_warning(metrics, ids, primary, computed)
    flagged = [m for m, f in zip(ids, board["flags"]) if f]
    settings["decision"] = {
        "confidence": config.rank.confidence,
        "resamples": config.rank.resamples,
        "folds": config.score.resample_folds,
        "fold_fraction": config.score.resample_fraction,
        "top_set_rule": top_rule,
        "top_set": top,
        "top_set_guarantee": TOP_SET_GUARANTEE.format(confidence=config.rank.confidence)
        if agg is not None else None,
        "oracle_top_sets": oracle_sets,
        "oracle_top_set_metric": reference["metric"] if reference else None,
        "oracle_comparison": " ".join(v["sentence"] for v in oracle_sets.values()
                                      if reference and v["metric"] == reference["metric"]),
        "flagged": flagged,
        "blocking_flags": sorted(BLOCKING),
        "consensus": {ds: {k: v for k, v in a.items() if k != "disagreement"}
                      for ds, a in agreements.items()},
        "consensus_sentence": " ".join(a["sentence"] for a in agreements.values()),
        "metrics_agree": all(a["agree"] for a in agreements.values()),
        "width_warning": warning,
        "confounds": confound_warnings(board, datasets),
        "confound_rule": {"tau": CONFOUND_TAU, "min_models": CONFOUND_MIN_MODELS},
    }
    order = list(board.columns)
    head = order[:order.index("rank") + 1] if "rank" in order else []
    rest = [c for c in order if c not in head and c not in DECISION_COLUMNS]
    decision = [c for c in DECISION_COLUMNS if c in board]
    return board[head + decision + rest], per_metric


def prior_summary(board: pd.DataFrame, settings: Mapping[str, Any], agree: pd.DataFrame
                  ) -> dict[str, Any]:
    """What a report shows of the priors, as plain data: ``title``, ``sentences`` (one
    prior-agreement line per dataset and oracle metric, then the confound warnings) and ``rows``
    (per model: model_id, params, width, prior/<name>, in board order). Cost O(rows of ``agree``)."""
    cols = prior_columns(board) if not board.empty else []
    rows = board[["model_id", *cols]].to_dict("records") if cols else []
    sentences = []
    if not agree.empty and "kind" in agree:
        a = agree[(agree["family"] == "all")]
        if "labels_per_class" in a:
            a = a[a["labels_per_class"].isna()]
        for (ds, oracle), part in a.groupby(["dataset", "oracle_metric"], sort=True):
            priors = part[part["kind"] == "prior"]
            metrics = part[(part["kind"] == "metric") & (part["metric"] != "leaderboard_rank")]
            if priors.empty:
                continue
            shown = ", ".join(f"{r.metric} τ {r.kendall_tau:+.2f}" if np.isfinite(r.kendall_tau)
                              else f"{r.metric} τ n/a" for r in priors.itertuples())
            best = metrics[np.isfinite(metrics["kendall_tau"].to_numpy(np.float64))]
            tail = ""
            if not best.empty:
                top = best.loc[best["kendall_tau"].idxmax()]
                beat = priors["kendall_tau"].to_numpy(np.float64)
                beat = beat[np.isfinite(beat)]
                verdict = ("above every prior" if not len(beat) or top["kendall_tau"] > beat.max()
                           else "not above every prior")
                tail = (f"; the best label-free metric, {top['metric']}, τ "
                        f"{top['kendall_tau']:+.2f} ({verdict})")
            sentences.append(f"Priors against {oracle} on {ds}: {shown}{tail}.")
    decision = settings.get("decision") or {}
    sentences += [c["sentence"] for c in decision.get("confounds") or []]
    return {"title": "Priors and confounds", "sentences": sentences, "rows": rows}
