"""The label oracle of a search (``oracle:``): every trial's final backbone scored with labels (kNN /
linear probe accuracy, in Ray tasks), and the label-free choice compared with the labelled one
(regret of the pick, Kendall τ-b over the trials).
"""

from __future__ import annotations

import contextlib
import math
from typing import TYPE_CHECKING, Any

import numpy as np
import pandas as pd

from zoorank.metrics import registry
from zoorank.stats.agreement import agreement
from zoorank.tune.config import TuneConfig, gpus_per_trial

if TYPE_CHECKING:
    from zoorank.tune.setup import SearchSetup

__all__ = ["add_oracle", "oracle_data", "oracle_summary"]

ORACLE_COLUMNS = registry.oracles()

ORACLE_TRIALS_PER_TASK = 8


def _load_backbone(factory: str, model_kwargs: dict[str, Any], checkpoint: str):
    from safetensors.torch import load as load_safetensors

    from zoorank.store.uris import resolve
    from zoorank.tune.models import build_backbone

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

    from zoorank.metrics.few_label.oracle_metrics import knn_accuracy, linear_probe_accuracy
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
    from zoorank.data.images import decode_image
    from zoorank.data.views import clean_view
    from zoorank.metrics.few_label.oracle_metrics import oracle_split

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
    :func:`zoorank.tasks.runner.run_tasks`).

    A task that raises, or whose worker dies, leaves its trials' oracle columns NaN with the
    reason in ``oracle_error``; a dead worker's trials are first retried one per task, so one bad
    checkpoint does not take its neighbours with it.
    """

    import ray

    from zoorank.runtime import cluster_gpus
    from zoorank.tasks.runner import Task, run_tasks

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
    results = run_tasks(_oracle_scores, tasks, options=options, reruns=1,
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

    Uses :func:`zoorank.stats.agreement.agreement` (no bootstrap); trials without an oracle value
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
