"""What one label-oracle task measures, on arrays: the oracle suite of one model on one dataset's
labelled split (kNN and linear-probe accuracy, R@1, R-AUROC, the loss-data costs, the few-label
cells of :mod:`zoorank.oracle.budget`), as rows ``{metric, value, params, n, dim}``. Reads and
writes nothing; the maths is :mod:`zoorank.metrics.few_label.oracle_metrics`, the fan-out over models and
datasets
and the commits :mod:`zoorank.oracle.label_oracle`.
"""

from __future__ import annotations

import math
import time
import warnings
from collections.abc import Mapping
from typing import Any

import numpy as np

from zoorank.config import OracleSpec
from zoorank.metrics import registry


def oracle_direction(metric: str) -> int:
    """+1 for accuracies, R@1, R-AUROC and few-label scores; −1 for the loss-data costs (SDL, εSC,
    MDL): the metric registry's direction (KeyError for an unknown oracle metric)."""
    return registry.label_info(metric).direction


def loss_data_sizes(n_train: int, points: int = 8) -> list[int]:
    """Log-uniform grid of subset sizes from 10 (or n_train) to n_train (reprieve's logspace)."""
    low = min(10, n_train)
    grid = np.ceil(np.logspace(np.log10(low), np.log10(n_train), points)).astype(int)
    return sorted({int(min(max(g, 1), n_train)) for g in grid})


def _eps_name(eps: float) -> str:
    return f"{float(eps):g}"


def _measure(name: str, fn, params: dict[str, Any]) -> tuple[float, dict[str, Any]]:
    """Run one oracle metric: ValueError → NaN with params['error']; warnings recorded."""
    start = time.perf_counter()
    with warnings.catch_warnings(record=True) as caught:
        warnings.simplefilter("always")
        try:
            value = float(fn())
        except ValueError as err:
            value, params = math.nan, {**params, "error": str(err)}
    messages = list(dict.fromkeys(str(w.message) for w in caught))
    if messages:
        params = {**params, "warnings": messages}
    return value, {**params, "seconds": round(time.perf_counter() - start, 4)}


def oracle_suite(
    train_Z: np.ndarray,
    train_y: np.ndarray,
    test_Z: np.ndarray,
    test_y: np.ndarray,
    spec: OracleSpec,
    seed: int = 0,
    uncertainties: Mapping[str, np.ndarray] | None = None,
    uncertainty_index: np.ndarray | None = None,
    test_folds: np.ndarray | None = None,
) -> list[dict[str, Any]]:
    """The label oracle of one model on one dataset: rows ``{metric, value, params, n, dim}``.

    ``uncertainties`` maps a reliability name (``nc``, ``mean_knn_distance``, ...) to per-sample
    uncertainties (larger = less reliable) of the test points at positions ``uncertainty_index``
    of ``test_Z``; R@1 correctness is computed on the whole test split (cosine, self excluded) and
    R-AUROC on the points with an uncertainty. The loss-data curve trains on subsets of the train
    split and measures the loss on the test split.

    ``test_folds`` (fold index per test point, :func:`zoorank.stats.uncertainty.fold_assignment`
    over the test ids; −1 left out): the kNN and linear-probe rows then carry their accuracy on each
    fold in ``params["fold_values"]`` (with ``params["n_folds"]``), the input of the oracle's own
    top set (:func:`zoorank.decide.oracle_top_sets.oracle_top_sets`). Rows without them (older runs) have no
    oracle top set.
    """
    from zoorank.metrics.few_label import loss_data_costs as costs
    from zoorank.metrics.few_label import oracle_metrics as om
    from zoorank.metrics.few_label.loss_data import loss_data_curve
    from zoorank.stats.uncertainty import fold_means

    dim = int(train_Z.shape[1])
    n_tr, n_te = len(train_y), len(test_y)
    rows: list[dict[str, Any]] = []

    def add(metric: str, value: float, params: dict[str, Any], n: int) -> None:
        rows.append({"metric": metric, "value": value, "params": params, "n": n, "dim": dim})

    def with_folds(fn) -> Any:
        """fn(return_correct) → accuracy; with ``test_folds``, the fold accuracies go to params."""
        holder: dict[str, Any] = {}

        def run() -> float:
            if test_folds is None:
                return fn(False)
            value, correct = fn(True)
            folds = int(test_folds.max()) + 1
            holder.update(n_folds=folds, fold_values=[
                round(float(v), 8) for v in fold_means(correct, test_folds, folds)])
            return value
        return run, holder

    if spec.knn:
        k = min(spec.knn_k, n_tr)
        p = {"k": k, "temperature": spec.knn_temperature, "n_train": n_tr}
        run, extra = with_folds(lambda rc: om.knn_accuracy(
            train_Z, train_y, test_Z, test_y, k=k, temperature=spec.knn_temperature,
            return_correct=rc))
        value, p = _measure("knn_accuracy", run, p)
        add("knn_accuracy", value, {**p, **extra}, n_te)
    if spec.linear_probe:
        p = {"n_train": n_tr, "seed": seed}
        run, extra = with_folds(lambda rc: om.linear_probe_accuracy(
            train_Z, train_y, test_Z, test_y, seed=seed, return_correct=rc))
        value, p = _measure("linear_probe_accuracy", run, p)
        add("linear_probe_accuracy", value, {**p, **extra}, n_te)
    correct: np.ndarray | None = None
    if spec.recall_at_1 or spec.r_auroc:
        holder: dict[str, Any] = {}

        def r1() -> float:
            value, holder["correct"] = om.recall_at_1(test_Z, test_y, return_correct=True)
            return value

        value, p = _measure("recall_at_1", r1, {"metric": "cosine"})
        correct = holder.get("correct")
        if spec.recall_at_1:
            add("recall_at_1", value, p, n_te)
    if spec.r_auroc and uncertainties:
        for name, u in uncertainties.items():
            p = {"uncertainty": name, "positive": "R@1 wrong"}
            if correct is None:
                add(f"r_auroc_{name}", math.nan, {**p, "error": "R@1 correctness unavailable"}, 0)
                continue
            c = correct[uncertainty_index]
            add(f"r_auroc_{name}", *_measure(f"r_auroc_{name}", lambda u=u, c=c: om.r_auroc(u, c),
                                             p), len(c))
    if spec.loss_data_curve:
        sizes = loss_data_sizes(n_tr, spec.loss_data_points)
        seeds = [seed + s for s in range(spec.loss_data_seeds)]
        base = {"sizes": sizes, "seeds": seeds, "probe": "linear", "val": "oracle test split",
                "train_steps": spec.loss_data_steps}
        curve: dict[str, Any] = {}

        def run_curve() -> float:
            curve["ns"], curve["losses"] = loss_data_curve(
                train_Z, train_y, test_Z, test_y, sizes, seeds, train_steps=spec.loss_data_steps)
            return float(curve["losses"][-1])

        _, cp = _measure("loss_data_curve", run_curve, base)
        base["curve_seconds"] = cp["seconds"]
        if "ns" not in curve:
            for name in [*(f"sdl_eps{_eps_name(e)}" for e in spec.sdl_eps),
                         *(f"esc_eps{_eps_name(e)}" for e in spec.sdl_eps), "mdl"]:
                add(name, math.nan, cp, n_tr)
        else:
            ns, losses = curve["ns"], curve["losses"]
            base = {**base, "losses": [round(float(v), 6) for v in losses]}
            for eps in spec.sdl_eps:
                bound: dict[str, Any] = {}

                def sdl_value(eps=eps, bound=bound) -> float:
                    value, bound["lower_bound"] = costs.sdl(ns, losses, eps, return_bound=True)
                    return value

                v, p = _measure("sdl", sdl_value, {**base, "eps": eps})
                add(f"sdl_eps{_eps_name(eps)}", v, {**p, **bound}, n_tr)
                # A curve that never reaches ε has εSC > max n: stored as +inf (ranks last).
                v, p = _measure("esc", lambda eps=eps: costs.esc(ns, losses, eps), {**base, "eps": eps})
                add(f"esc_eps{_eps_name(eps)}", v, p, n_tr)
            v, p = _measure("mdl", lambda: costs.mdl(ns, losses), base)
            add("mdl", v, p, n_tr)
    if spec.transferability:
        from zoorank.oracle.budget import transferability_rows

        rows += transferability_rows(train_Z, train_y, spec.transferability,
                                     spec.labels_per_class, spec.label_budget_seeds, seed)
    return rows
