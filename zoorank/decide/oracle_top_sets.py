"""The label oracle's own top set per dataset and oracle metric, and its comparison with the
label-free top set: ``oracle_top_sets`` and the ``in_oracle_top_set`` column of the decision
(:mod:`zoorank.decide.decision`). Part of the RANK stage.

Conventions are those of the label-free top set (:mod:`zoorank.stats.uncertainty`): the same fold
bootstrap with the same seed, the same rank-consistent Model Confidence Set at the run's confidence.
Accuracies, regret and noise are fractions; the sentences say them in percentage points.
"""

from __future__ import annotations

import json
import math
from collections.abc import Sequence
from typing import Any

import numpy as np
import pandas as pd

from zoorank.config import RunConfig
from zoorank.metrics import registry
from zoorank.stats.uncertainty import fold_bootstrap, fold_scale, rank_uncertainty

#: oracle metrics with fold values, in the order that picks the ``in_oracle_top_set`` column's: a
#: classifier's own accuracy first (its oracle is its head, not kNN on its features; contract 8).
ORACLE_TOP_SET_METRICS = ("head_accuracy", *registry.oracles())


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
                sentence = (f"On {ds}, the label-free top set of {_models(len(top))} and the "
                            f"oracle's own {c:.0%} top set by {name}, {_models(len(members))}, "
                            f"share {len(shared)}: {shown}.")
            elif math.isfinite(regret):
                sentence = (f"On {ds}, the label-free top set of {_models(len(top))} and the "
                            f"oracle's own {c:.0%} top set by {name}, {_models(len(members))}, do "
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


def _models(n: int) -> str:
    return f"{n} model" + ("" if n == 1 else "s")
