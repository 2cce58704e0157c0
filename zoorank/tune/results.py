"""What a finished search leaves: the results frame, the zoo file, the summary (the label oracle's
columns are :mod:`zoorank.tune.trial_oracle`'s).

``tune_results.parquet`` has one row per trial:

* ``trial_id``, ``model_id`` (``<method>-<searched values>-s<seed>``), ``group`` (the same
  hyperparameters but the seed: a seed ensemble), ``family`` (the SSL method), ``status``
  (``completed`` | ``stopped`` by ASHA | ``diverged`` | ``error``), ``error``;
* ``config`` (JSON of every hyperparameter) and ``param_<name>`` for each searched one;
* ``metric`` (the objective's name), ``trajectory`` / ``epochs`` (its value and the epoch at every
  report), ``final`` (the last value), ``reports``, ``final_<key>`` for every reported metric;
* ``checkpoint`` (the last report's ``backbone.safetensors``), ``checkpoints`` (every kept one);
* ``train_seconds`` / ``objective_seconds`` (mean per report) and ``overhead`` (their ratio);
* ``score`` (what selects the winner: ``final``, or for CLID the z-scored CLID over the trials)
  and ``selected``; with the oracle ``knn_accuracy`` / ``linear_probe_accuracy``.
"""

from __future__ import annotations

import contextlib
import json
import math
from typing import TYPE_CHECKING, Any

import numpy as np
import pandas as pd

from zoorank.config import ModelSpec
from zoorank.config.digests import fingerprint
from zoorank.integrations.ray_tune import trial_spec
from zoorank.metrics import registry
from zoorank.tune.config import TrialParams, TuneConfig
from zoorank.tune.trainers import BACKBONE_FILE
from zoorank.tune.trial_oracle import ORACLE_COLUMNS, oracle_summary

if TYPE_CHECKING:
    from zoorank.store import Store
    from zoorank.tune.setup import SearchSetup

__all__ = [
    "add_selection",
    "print_summary",
    "results_frame",
    "trial_identity",
    "write_zoo",
]


def _fmt(value: Any) -> str:
    if isinstance(value, float):
        return f"{value:g}"
    return str(value)


def trial_identity(params: TrialParams, searched: list[str]) -> tuple[str, str]:
    """(model_id, group): readable names from the method and the searched values.

    The group leaves out the seed, so trials that differ only by seed form a seed ensemble.
    """
    parts = [params.method] + [
        f"{k}{_fmt(getattr(params, k))}" for k in sorted(searched) if k not in ("method", "seed")
    ]
    group = "-".join(parts)
    if len(group) > 120:
        without_seed = params.model_dump(exclude={"seed"})
        group = f"{params.method}-{fingerprint(without_seed)[:10]}"
    return f"{group}-s{params.seed}", group


def _status(result: Any, history: pd.DataFrame, max_reports: int) -> str:
    if result.error is not None:
        return "error"
    if len(history) and float(history["diverged"].iloc[-1]) > 0:
        return "diverged"
    return "completed" if len(history) >= max_reports else "stopped"


def results_frame(config: TuneConfig, setup: SearchSetup, grid: Any) -> pd.DataFrame:
    """One row per trial of a Tune ``ResultGrid`` (columns in the module docstring)."""
    key = config.objective.key
    searched = sorted(config.space)
    rows = []
    seen: dict[str, int] = {}
    for result in grid:
        params = setup.params(result.config)
        model_id, group = trial_identity(params, searched)
        if model_id in seen:  # a repeated grid point (num_samples > 1)
            seen[model_id] += 1
            model_id = f"{model_id}-r{seen[model_id]}"
        else:
            seen[model_id] = 0
        history = result.metrics_dataframe
        if history is None or key not in getattr(history, "columns", ()):
            history = pd.DataFrame(columns=[key, "epoch", "diverged", "training_iteration"])
        history = history.sort_values("training_iteration") if len(history) else history
        kept = sorted(
            ((m.get("training_iteration", 0), c.path) for c, m in (result.best_checkpoints or [])),
        )
        last = result.checkpoint.path if result.checkpoint is not None else None
        row: dict[str, Any] = {
            "trial_id": (result.metrics or {}).get("trial_id") or result.path.rsplit("/", 1)[-1],
            "model_id": model_id,
            "group": group,
            "family": params.method,
            "status": _status(result, history, setup.n_reports(params.batch_size)),
            "error": None if result.error is None else str(result.error).splitlines()[0][:500],
            "config": json.dumps(params.model_dump(mode="json"), sort_keys=True),
            **{f"param_{k}": getattr(params, k) for k in searched},
            "metric": key,
            "trajectory": [float(v) for v in history[key]] if len(history) else [],
            "epochs": [float(v) for v in history["epoch"]] if len(history) else [],
            "final": float(history[key].iloc[-1]) if len(history) else math.nan,
            "reports": int(len(history)),
            "checkpoint": f"{last}/{BACKBONE_FILE}" if last else None,
            "checkpoints": [f"{p}/{BACKBONE_FILE}" for _, p in kept],
            "checkpoint_iterations": [int(i) for i, _ in kept],
            "trial_dir": result.path,
        }
        for col in ("train_seconds", "objective_seconds"):
            row[col] = float(history[col].mean()) if len(history) and col in history else math.nan
        row["overhead"] = (
            row["objective_seconds"] / row["train_seconds"]
            if row["train_seconds"] and row["train_seconds"] > 0
            else math.nan
        )
        for col in history.columns:
            if col in _report_keys(config):
                row[f"final_{col}"] = float(history[col].iloc[-1]) if len(history) else math.nan
        rows.append(row)
    frame = pd.DataFrame(rows)
    if frame.empty:
        raise RuntimeError("the search produced no trials")
    return frame.sort_values("model_id", kind="stable").reset_index(drop=True)


def _report_keys(config: TuneConfig) -> set[str]:
    names = list(config.objective.metrics)
    names += [t for n in config.objective.metrics for t in registry.info(n).requires]
    keys = set(names) | {f"projector_{n}" for n in names}
    return keys | {"degenerate", "train_loss"}


def add_selection(config: TuneConfig, frame: pd.DataFrame) -> pd.DataFrame:
    """``score`` (what picks the winner) and ``selected`` (the label-free winner).

    The score is the final objective value; for a pool metric (CLID) it is the metric over the
    pool of trials that reported every term (CLID: the paper's z(CL) + z(ID), ``clid_zscore``), by
    the registry's ``combine``. Errored trials have no score.
    """
    frame = frame.copy()
    score = frame["final"].astype(float)
    prefix = "projector_" if config.objective.features == "projector" else ""
    entry = registry.info(config.objective.metric)
    if entry.inputs == "pool" and entry.combine is not None:
        cols = [f"final_{prefix}{t}" for t in entry.requires]
        zs = pd.Series(np.nan, index=frame.index)
        if all(c in frame for c in cols):
            ok = np.logical_and.reduce([frame[c].notna().to_numpy() for c in cols])
            if ok.sum() >= 1:
                with contextlib.suppress(ValueError):  # CLID: fewer than 2 trials
                    zs[ok] = entry.combine(*[frame.loc[ok, c].to_numpy() for c in cols],
                                           **entry.kwargs())
        frame[f"{entry.name}_zscore"] = zs
        score = zs if zs.notna().any() else score
    score = score.where(frame["status"] != "error")
    frame["score"] = score
    sign = 1.0 if config.objective.mode == "max" else -1.0
    frame["selected"] = False
    if score.notna().any():
        frame.loc[(sign * score).idxmax(), "selected"] = True
    return frame



# ------------------------------------------------------------------------------------------------
# outputs


def to_parquet_frame(frame: pd.DataFrame) -> pd.DataFrame:
    """The frame with object columns Parquet can store as they are (lists stay lists)."""
    return frame.reset_index(drop=True)


def _spec(setup: SearchSetup, model_id: str, group: str, family: str, checkpoint: str) -> ModelSpec:
    return trial_spec(setup.model_entry, model_id, checkpoint, input_size=setup.input_size,
                      interpolation=setup.interpolation, mean=setup.mean, std=setup.std,
                      group=group, family=family)


def zoo_specs(config: TuneConfig, setup: SearchSetup, frame: pd.DataFrame) -> list[ModelSpec]:
    """Every trial's final backbone (and with ``export_epochs`` every kept report) as a spec."""
    specs = []
    for row in frame.itertuples():
        if not row.checkpoint:
            continue
        specs.append(_spec(setup, row.model_id, row.group, row.family, row.checkpoint))
        if config.export_epochs:
            for it, path in zip(row.checkpoint_iterations, row.checkpoints):
                if path != row.checkpoint:
                    specs.append(
                        _spec(
                            setup,
                            f"{row.model_id}-r{it:03d}",
                            f"{row.group}-r{it:03d}",
                            row.family,
                            path,
                        )
                    )
    return specs


def write_zoo(
    config: TuneConfig, setup: SearchSetup, frame: pd.DataFrame, store: Store, rel: str
) -> None:
    """``<experiment>/zoo.yaml`` for ``models: {from_tune: <experiment dir>}``, and beside it the
    search's objective (``zoo_objective.json``: it orders the zoo's board unless the run config
    names another metric; not for a projector objective, which a zoo of backbones cannot
    compute)."""
    from zoorank.zoo.zoofile import OBJECTIVE_FILE_NAME

    specs = zoo_specs(config, setup, frame)
    objective = config.objective
    if objective.features != "projector":
        store.write_json(f"{rel}/{OBJECTIVE_FILE_NAME}",
                         {"metric": objective.metric, "mode": objective.mode})
    if store.is_local:
        from zoorank.zoo import write_zoo_file

        write_zoo_file(store.local_path(rel, "zoo.yaml"), specs)
    else:
        import yaml

        entries = [
            s.model_dump(mode="json", exclude_defaults=True) | {"source": s.source, "name": s.name}
            for s in specs
        ]
        store.write_text(f"{rel}/zoo.yaml", yaml.safe_dump(entries, sort_keys=False))


def print_summary(config: TuneConfig, frame: pd.DataFrame, location: str) -> None:
    """The trials table, the winner, and with the oracle its regret and Kendall τ."""
    from rich.table import Table

    from zoorank.console import output_console, table_box

    console = output_console()
    key = config.objective.key
    table = Table(
        title=f"zoorank tune: {len(frame)} trials, objective {key} ({config.objective.mode})",
        box=table_box(console),
    )
    oracle_cols = [c for c in ORACLE_COLUMNS if c in frame]
    # short headers for the oracle columns keep the table within 100 columns off a terminal
    headers = {"knn_accuracy": "knn acc", "linear_probe_accuracy": "probe acc"}
    for col in ["model", "status", "reports", key, "score", *oracle_cols, "overhead"]:
        table.add_column(headers.get(col, col), no_wrap=col == "model",
                         justify="left" if col in ("model", "status") else "right")
    sign = 1.0 if config.objective.mode == "max" else -1.0
    order = frame.assign(_s=sign * frame["score"].fillna(-np.inf)).sort_values(
        "_s", ascending=False
    )
    for row in order.itertuples():
        cells = [
            ("* " if row.selected else "") + row.model_id,
            row.status,
            str(row.reports),
            f"{row.final:.3f}",
            f"{row.score:.3f}",
        ]
        cells += [f"{getattr(row, c):.3f}" for c in oracle_cols]
        cells.append(f"{row.overhead:.1%}" if np.isfinite(row.overhead) else "-")
        table.add_row(*cells)
    console.print(table)
    winner = frame[frame["selected"]]
    if len(winner):
        w = winner.iloc[0]
        console.print(f"winner: {w.model_id}  {key} {w.final:.4f}  checkpoint {w.checkpoint}")
    for col in oracle_cols:
        s = oracle_summary(frame, "score", col, config.objective.mode)
        if s.get("n_models", 0) >= 2:
            console.print(
                f"oracle {col}: label-free pick {s['top1_oracle']:.4f} vs oracle-best "
                f"{s['oracle_best']:.4f} ({s['oracle_winner']}), regret {s['top1_regret']:.4f}; "
                f"Kendall τ({key}, {col}) = {s['kendall_tau']:.3f} over {s['n_models']} trials"
            )
    console.print(f"results: {location}/tune_results.parquet  zoo: {location}/zoo.yaml")
