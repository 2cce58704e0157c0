"""Per-zoo and per-unit regrets from a per-model table. Pure functions (numpy/pandas).

The per-model table (the units table: ``benchmarks/zoos/units.parquet``, or what ``zoorank
calibrate`` reads from labelled stores) has one row per (zoo, model) with ``unit`` (the
independent checkpoint set the zoo's models come from: the same networks on another domain are
the same unit), ``truth`` (the labels' accuracy, in [0, 1]) and one column per label-free metric
value; optional ``zoo`` (default: the unit), ``board`` (``embeddings``/``encoders`` or ``heads``),
``kind``, ``role`` (``calibration`` | ``held_out``), and the metadata the baselines read:
``epochs``, ``width``, ``n_params``, ``final_loss``.

Conventions: regrets are in percentage points (pp) of accuracy, ≥ 0: the best truth of the zoo
minus the truth of the pick; ties at the top of an ordering count as a uniformly random pick among
the tied models (their mean truth). A zoo counts when at least two of its models have a finite
truth; a unit's regret is the mean over its zoos, so each unit counts once.
"""

from __future__ import annotations

from collections.abc import Iterable, Sequence

import numpy as np
import pandas as pd

from zoorank.metrics import registry
from zoorank.stats.agreement import top1_regret

#: the board names a table may use, mapped to the record's board kinds.
BOARD_KINDS = {"embeddings": "encoders", "encoders": "encoders", "heads": "heads",
               "classifiers": "heads"}
#: the name/metadata heuristic's keys, in order: the longest-trained, then the widest, then the
#: most parameters.
HEURISTIC_KEYS = ("epochs", "width", "n_params")
#: the baselines every figure is shown beside (``loo_best_metric`` is chosen in the protocol).
BASELINES = ("random", "name_heuristic", "final_loss")
#: a model within this many pp of the zoo's best is a hit for the shortlist.
NEAR_BEST_PP = 0.5
REQUIRED = ("unit", "truth")


def check_table(models: pd.DataFrame) -> pd.DataFrame:
    """The table with its defaults filled in (``zoo``, ``board``, ``kind``, ``role``);
    ``ValueError`` naming a missing column or a bad value."""
    missing = [c for c in REQUIRED if c not in models]
    if missing:
        raise ValueError(f"units table: missing column(s) {missing}; it needs one row per model "
                         "with 'unit', 'truth' and one column per label-free metric")
    out = models.copy()
    out["unit"] = out["unit"].astype(str)
    if "zoo" not in out:
        out["zoo"] = out["unit"]
    out["board"] = (out["board"].astype(str) if "board" in out else "encoders")
    bad = sorted(set(out["board"]) - set(BOARD_KINDS))
    if bad:
        raise ValueError(f"units table: column 'board' has {bad}; expected {sorted(BOARD_KINDS)}")
    out["board_kind"] = out["board"].map(BOARD_KINDS)
    out["kind"] = out["kind"].fillna("unknown").astype(str) if "kind" in out else "unknown"
    out["role"] = out["role"].fillna("calibration").astype(str) if "role" in out else "calibration"
    roles = sorted(set(out["role"]) - {"calibration", "held_out"})
    if roles:
        raise ValueError(f"units table: column 'role' has {roles}; expected calibration/held_out")
    out["truth"] = pd.to_numeric(out["truth"], errors="coerce").astype(np.float64)
    return out


def metric_columns(models: pd.DataFrame) -> list[str]:
    """The table's label-free metric columns (registered, with a finite value), in table order."""
    out = []
    for c in models.columns:
        if c in registry.REGISTRY and registry.is_label_free(c):
            if np.isfinite(pd.to_numeric(models[c], errors="coerce").to_numpy(np.float64)).any():
                out.append(c)
    return out


def board_candidates(columns: Iterable[str], board_kind: str) -> list[str]:
    """The metrics that may order a board of this kind: on encoders, the registry's
    primary-eligible label-free metrics; on heads, the label-free classifier estimates."""
    allowed = (set(registry.classifier_metrics()) if board_kind == "heads" else
               {n for n, m in registry.REGISTRY.items() if m.primary})
    return [c for c in columns if c in allowed and registry.is_label_free(c)]


def _tied_top_regret(keys: Sequence[np.ndarray], truth: np.ndarray) -> float:
    """Regret (pp) of the lexicographic maximum of ``keys`` (NaN lowest), ties averaged."""
    top = np.ones(len(truth), dtype=bool)
    for k in keys:
        k = np.where(top, k, np.nan)
        if np.isfinite(k).any():
            top &= k == np.nanmax(k)
    return float(100.0 * (truth.max() - truth[top].mean()))


def metric_regret(values: np.ndarray, truth: np.ndarray, direction: int) -> float:
    """Regret (pp) of a metric's pick; NaN when the metric has no finite value on the zoo."""
    if not np.isfinite(values).any():
        return float("nan")
    return 100.0 * top1_regret(values, truth, direction)[0]


def first_near_best(values: np.ndarray, truth: np.ndarray, direction: int,
                    tolerance_pp: float = NEAR_BEST_PP) -> float:
    """The shortest head of the metric's ordering (a count of models) that holds a model within
    ``tolerance_pp`` of the best truth, keeping every model tied with the last (as the rank rules
    do): 1 + the number of models strictly better than the best-ordered near-best model. Inf when
    no near-best model has a finite value; NaN when the metric has none."""
    s = direction * values
    ok = np.isfinite(s)
    if not ok.any():
        return float("nan")
    near = ok & (100.0 * (truth.max() - truth) <= tolerance_pp + 1e-9)
    if not near.any():
        return float("inf")
    return float(1 + np.sum(s[ok] > s[near].max()))


def zoo_table(models: pd.DataFrame, metrics: Sequence[str] | None = None) -> pd.DataFrame:
    """One row per zoo: ``zoo, unit, board_kind, kind, role, n_models``, per metric its regret
    (column ``<metric>``) and its :func:`first_near_best` count (``first:<metric>``), and the
    baselines' regrets (``random``: the expected regret of a uniform pick, i.e. the mean gap to
    the best; ``name_heuristic``; ``final_loss``: the lowest final training loss; NaN where the
    zoo has no such column)."""
    table = check_table(models)
    metrics = metric_columns(table) if metrics is None else list(metrics)
    directions, targets = registry.directions(), registry.targets()
    rows = []
    for zoo, z in table.groupby("zoo", sort=False):
        z = z[np.isfinite(z["truth"].to_numpy(np.float64))]
        if len(z) < 2:
            continue
        truth = z["truth"].to_numpy(np.float64)
        row = {"zoo": zoo, "unit": z["unit"].iloc[0], "board_kind": z["board_kind"].iloc[0],
               "kind": z["kind"].iloc[0], "role": z["role"].iloc[0], "n_models": len(z),
               "random": float(100.0 * (truth.max() - truth.mean()))}
        keys = [pd.to_numeric(z[c], errors="coerce").to_numpy(np.float64)
                for c in HEURISTIC_KEYS if c in z]
        keys = [k for k in keys if np.isfinite(k).any()]
        row["name_heuristic"] = _tied_top_regret(keys, truth) if keys else float("nan")
        loss = (pd.to_numeric(z["final_loss"], errors="coerce").to_numpy(np.float64)
                if "final_loss" in z else np.full(len(z), np.nan))
        row["final_loss"] = (_tied_top_regret([-loss], truth) if np.isfinite(loss).any()
                             else float("nan"))
        for m in metrics:
            v = pd.to_numeric(z[m], errors="coerce").to_numpy(np.float64)
            if m in targets:  # ranked by the distance to its ideal value (alpha_req: |α − 1|)
                v, direction = -np.abs(v - targets[m]), 1
            else:
                direction = directions.get(m, 1)
            row[m] = metric_regret(v, truth, direction)
            row[f"first:{m}"] = first_near_best(v, truth, direction)
        rows.append(row)
    return pd.DataFrame(rows)


def unit_table(zoos: pd.DataFrame) -> pd.DataFrame:
    """One row per unit (index ``unit``): ``board_kind, kind, role, n_zoos, n_models`` and the
    mean over its zoos of every regret column of :func:`zoo_table` (NaN where no zoo has one)."""
    regret = [c for c in zoos.columns if c not in
              ("zoo", "unit", "board_kind", "kind", "role", "n_models")
              and not c.startswith("first:")]
    g = zoos.groupby("unit", sort=False)
    out = g[["board_kind", "kind", "role"]].first()
    out["n_zoos"] = g.size()
    out["n_models"] = g["n_models"].sum()
    return out.join(g[regret].mean())
