"""What a finished search leaves: the results frame, the label oracle, the zoo file, the summary.

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
from zoorank.metrics import registry
from zoorank.metrics.agreement import agreement
from zoorank.tune.config import TrialParams, TuneConfig, gpus_per_trial
from zoorank.tune.trainers import BACKBONE_FILE

if TYPE_CHECKING:
    from zoorank.store import Store
    from zoorank.tune.setup import SearchSetup

__all__ = [
    "add_oracle",
    "add_selection",
    "oracle_summary",
    "print_summary",
    "results_frame",
    "trial_identity",
    "write_zoo",
]

ORACLE_COLUMNS = ("knn_accuracy", "linear_probe_accuracy")
ORACLE_TRIALS_PER_TASK = 8


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
        params = TrialParams.model_validate({**setup.base, **(result.config or {})})
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
# the label oracle


def _load_backbone(factory: str, model_kwargs: dict[str, Any], checkpoint: str):
    from safetensors.torch import load as load_safetensors

    from zoorank.tune.models import build_backbone
    from zoorank.uris import resolve

    model = build_backbone(factory, model_kwargs)
    fs, path = resolve(checkpoint)
    with fs.open_input_stream(path) as f:
        state = load_safetensors(f.read())
    model.load_state_dict(state)
    return model.eval()


def _oracle_scores(
    setup: SearchSetup,
    checkpoints: list[str],
    images: np.ndarray,
    labels: np.ndarray,
    train: np.ndarray,
    test: np.ndarray,
    oracle: Any,
    seed: int,
) -> list[dict[str, float]]:
    """kNN / linear-probe accuracy of each backbone checkpoint on the labelled clean images."""
    import torch
    from threadpoolctl import threadpool_limits

    from zoorank.metrics.oracle import knn_accuracy, linear_probe_accuracy
    from zoorank.tune.trainers import preprocess, resolve_device

    torch.set_num_threads(setup.num_threads)
    threadpool_limits(setup.num_threads)
    device, amp = resolve_device(setup.device, setup.precision)
    out = []
    for checkpoint in checkpoints:
        model = _load_backbone(setup.factory, setup.model_kwargs, checkpoint).to(device)
        feats = []
        with torch.inference_mode():
            for start in range(0, len(images), 512):
                x = preprocess(images[start : start + 512], setup.mean, setup.std, device)
                with torch.autocast(
                    device.type, dtype=amp or torch.float32, enabled=amp is not None
                ):
                    feats.append(model(x).float().cpu().numpy())
        Z = np.concatenate(feats)
        scores: dict[str, float] = {}
        if not np.all(np.isfinite(Z)):
            out.append({c: math.nan for c in ORACLE_COLUMNS})
            continue
        if oracle.knn:
            k = min(oracle.knn_k, len(train))
            scores["knn_accuracy"] = knn_accuracy(
                Z[train],
                labels[train],
                Z[test],
                labels[test],
                k=k,
                temperature=oracle.knn_temperature,
            )
        if oracle.linear_probe:
            scores["linear_probe_accuracy"] = linear_probe_accuracy(
                Z[train], labels[train], Z[test], labels[test], seed=seed
            )
        out.append(scores)
    return out


def oracle_data(
    config: TuneConfig, setup: SearchSetup
) -> tuple[np.ndarray, np.ndarray, np.ndarray, np.ndarray]:
    """(clean uint8 images, labels, train positions, test positions) of the labelled dataset.

    The split is stratified and seeded (``oracle.test_fraction``, ``probe_seed``).
    """
    from zoorank.data import load_samples
    from zoorank.images import decode_image
    from zoorank.metrics.oracle import oracle_split
    from zoorank.views import clean_view

    spec = config.labelled_dataset
    table = load_samples(spec, config.probe_seed)
    if table.label is None:
        from zoorank.errors import ConfigError

        raise ConfigError(f"oracle_dataset: dataset {spec.name!r} has no labels")
    keep = np.flatnonzero(table.label.notna().to_numpy())
    labels = table.label.to_numpy()[keep].astype(np.int64)
    images = np.stack(
        [clean_view(decode_image(table.images[i], table.source_name(table.sample_id[i])),
                    setup.geometry) for i in keep]
    )
    train, test, _ = oracle_split(
        np.arange(len(keep)), labels, config.oracle.test_fraction, config.probe_seed
    )
    return images, labels, train, test


def add_oracle(config: TuneConfig, setup: SearchSetup, frame: pd.DataFrame) -> pd.DataFrame:
    """Score every trial's final backbone with labels (Ray tasks of a few trials each, on
    :func:`zoorank.runner.run_tasks`).

    A task that raises, or whose worker dies, leaves its trials' oracle columns NaN with the
    reason in ``oracle_error``; a dead worker's trials are first retried one per task, so one bad
    checkpoint does not take its neighbours with it.
    """
    import contextlib

    import ray

    from zoorank.runner import Task, run_tasks
    from zoorank.runtime import cluster_gpus

    images, labels, train, test = oracle_data(config, setup)
    refs = {k: ray.put(v) for k, v in (("images", images), ("labels", labels))}
    options = {"num_cpus": config.search.cpus_per_trial,
               "num_gpus": gpus_per_trial(config, cluster_gpus()) if setup.device == "cuda"
               else 0}
    rows = [i for i, row in frame.iterrows() if row.checkpoint]

    def oracle_task(trials: list[Any]) -> Task:
        args = (setup, [frame.loc[i, "checkpoint"] for i in trials], refs["images"],
                refs["labels"], train, test, config.oracle, config.probe_seed)
        split = (lambda: [oracle_task([i]) for i in trials]) if len(trials) > 1 else None
        return Task(tuple(trials), args, split=split)

    # a few trials per task: each task pays for importing torch and the metric libraries once
    tasks = [oracle_task(rows[i : i + ORACLE_TRIALS_PER_TASK])
             for i in range(0, len(rows), ORACLE_TRIALS_PER_TASK)]
    frame = frame.copy()
    for col, wanted in zip(ORACLE_COLUMNS, (config.oracle.knn, config.oracle.linear_probe)):
        if wanted:
            frame[col] = np.nan
    errors: dict[Any, str] = {}
    results = run_tasks(_oracle_scores, tasks, options=options, retries=1,
                        label="tune: oracle of the trials")
    with contextlib.closing(results):
        for outcome in results:
            for leaf in outcome.leaves():
                if not leaf.ok:
                    errors.update({i: str(leaf.error) for i in leaf.task.key})
                    continue
                for i, scores in zip(leaf.task.key, leaf.value):
                    for col, value in scores.items():
                        frame.loc[i, col] = value
    if errors:
        frame["oracle_error"] = pd.Series(errors, dtype=object).reindex(frame.index)
    return frame


def oracle_summary(
    frame: pd.DataFrame, score: str = "score", oracle: str = "knn_accuracy", mode: str = "max"
) -> dict[str, Any]:
    """Regret of the label-free pick and Kendall τ-b between ``score`` and ``oracle`` over trials.

    Uses :func:`zoorank.metrics.agreement.agreement` (no bootstrap); trials without an oracle value
    are left out. ``winner`` is the model_id the score picks.
    """
    ok = frame[oracle].notna() if oracle in frame else pd.Series(False, index=frame.index)
    sub = frame[ok]
    if len(sub) < 2:
        return {"n_models": int(len(sub)), "kendall_tau": math.nan, "top1_regret": math.nan}
    direction = 1 if mode == "max" else -1
    out = agreement(
        sub[score].to_numpy(float), sub[oracle].to_numpy(float), direction=direction, bootstrap=0
    )
    s = direction * sub[score].to_numpy(float)
    out["winner"] = (
        str(sub["model_id"].iloc[int(np.nanargmax(s))]) if np.isfinite(s).any() else None
    )
    out["oracle_winner"] = str(sub["model_id"].iloc[int(np.argmax(sub[oracle].to_numpy(float)))])
    return out


# ------------------------------------------------------------------------------------------------
# outputs


def to_parquet_frame(frame: pd.DataFrame) -> pd.DataFrame:
    """The frame with object columns Parquet can store as they are (lists stay lists)."""
    return frame.reset_index(drop=True)


def _spec(setup: SearchSetup, model_id: str, group: str, family: str, checkpoint: str) -> ModelSpec:
    return ModelSpec(
        id=model_id,
        source="python",
        name=f"zoorank.tune.models:{setup.factory}",
        model_kwargs=setup.model_kwargs,
        checkpoint=checkpoint,
        group=group,
        family=family,
        input_size=setup.input_size,
        mean=setup.mean,
        std=setup.std,
        interpolation=setup.interpolation,
        crop_pct=1.0,
    )


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
    """``<experiment>/zoo.yaml`` for ``models: {from_tune: <experiment dir>}``."""
    specs = zoo_specs(config, setup, frame)
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
    from rich.console import Console
    from rich.table import Table

    console = Console(width=None if Console().is_terminal else 140)
    key = config.objective.key
    table = Table(
        title=f"zoorank tune: {len(frame)} trials, objective {key} ({config.objective.mode})"
    )
    oracle_cols = [c for c in ORACLE_COLUMNS if c in frame]
    for col in ["model", "status", "reports", key, "score", *oracle_cols, "overhead"]:
        table.add_column(col, justify="left" if col in ("model", "status") else "right")
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
