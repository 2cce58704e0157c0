"""The TUNE stage end to end on a local Ray (loopback, 2 CPUs) with real digits.

* a 4-trial search reports the label-free metric every epoch and writes its results, zoo and oracle;
* an exported trial loads through the embed stage and reproduces the trainer's embeddings, and the
  trial's reported LiDAR is recomputed from them.
"""

from __future__ import annotations

import json
import math
from pathlib import Path

import numpy as np
import pandas as pd
import pytest
import torch
from scipy import stats

from zoorank.store import Store
from zoorank.tune.config import TrialParams, parse_tune_config
from zoorank.tune.search import prepare_search, run_search
from zoorank.tune.trial import make_trainer
from zoorank.tune.trial_oracle import oracle_summary
from zoorank.zoo import read_zoo_file

EPOCHS = 2
PROBE = {"samples": 64, "per_sample": 4}


def _config(tmp, **extra):
    data = {
        "store": str(tmp / "store"),
        "dataset": {"name": "digits", "source": "sklearn_digits", "limit": 300},
        "backbone": {"name": "small_cnn", "width": 8, "depth": 2},
        "epochs": EPOCHS,
        "batch_size": 64,
        "proj_hidden": 32,
        "proj_dim": 16,
        "probe": PROBE,
        "objective": {"metric": "lidar", "report": ["rankme"], "features": "both"},
        "space": {"method": {"grid": ["simclr", "vicreg"]}, "seed": {"grid": [0, 1]}},
        "search": {"name": "digits4", "scheduler": "fifo"},
        "oracle": {"knn": True, "knn_k": 10},
        "export_epochs": True,
    }
    data.update(extra)
    return parse_tune_config(data, "test")


@pytest.fixture(scope="module")
def digits_search(ray_session, tmp_path_factory):
    config = _config(tmp_path_factory.mktemp("tune"))
    frame = run_search(config, verbose=False)
    return config, frame


@pytest.mark.timeout(240)
def test_a_small_search_reports_the_metric_every_epoch(digits_search):
    config, frame = digits_search
    assert len(frame) == 4
    assert set(frame["status"]) == {"completed"}
    assert (frame["reports"] == EPOCHS).all()
    for row in frame.itertuples():
        assert row.epochs == pytest.approx([1.0, 2.0])
        assert len(row.trajectory) == EPOCHS and all(math.isfinite(v) for v in row.trajectory)
        assert row.final == row.trajectory[-1] == row.final_lidar
        assert 1.0 <= row.final_projector_lidar and 1.0 <= row.final_rankme
        assert json.loads(row.config)["method"] == row.family
    # seed ensembles: the two seeds of a method share a group
    assert frame.groupby("group")["param_seed"].apply(sorted).tolist() == [[0, 1], [0, 1]]
    # the winner is the highest final LiDAR
    assert frame.loc[frame["selected"], "final"].item() == frame["final"].max()

    store = Store(config.store)
    written = store.read_frame(f"tune/{config.experiment_name}/tune_results.parquet")
    pd.testing.assert_series_equal(written["final"], frame["final"])
    specs = read_zoo_file(store.local_path("tune", config.experiment_name))
    finals = [s for s in specs if not s.id.endswith("-r001")]
    assert sorted(s.id for s in finals) == sorted(frame["model_id"])
    assert all(s.source == "python" and s.family in ("simclr", "vicreg") for s in specs)
    # export_epochs: each trial's first report too, in a group of its own (not a seed ensemble
    # with the final checkpoints)
    firsts = [s for s in specs if s.id.endswith("-r001")]
    assert sorted(s.id for s in firsts) == sorted(f"{m}-r001" for m in frame["model_id"])
    assert {s.group for s in firsts}.isdisjoint({s.group for s in finals})
    assert all(Path(s.checkpoint).is_file() for s in specs)


@pytest.mark.timeout(60)
def test_the_oracle_regret_and_tau_follow_from_the_trials(digits_search):
    _, frame = digits_search
    knn = frame["knn_accuracy"].to_numpy()
    assert np.all((knn > 0.1) & (knn <= 1.0))  # ten classes: chance is 0.1
    summary = oracle_summary(frame, "score", "knn_accuracy")
    picked = frame.loc[frame["selected"], "knn_accuracy"].item()
    assert summary["top1_regret"] == pytest.approx(knn.max() - picked)
    tau = stats.kendalltau(frame["score"], frame["knn_accuracy"]).statistic
    assert summary["kendall_tau"] == pytest.approx(tau, nan_ok=True)


@pytest.mark.timeout(180)
def test_an_exported_trial_reproduces_the_trainer_through_the_embed_stage(digits_search, tmp_path):
    from zoorank.config.loading import parse_config
    from zoorank.embed import run_embed
    from zoorank.metrics.label_free.lidar import lidar

    config, frame = digits_search
    row = frame[frame["model_id"].str.startswith("vicreg")].iloc[0]
    run_config = parse_config({
        "store": str(tmp_path / "run"),
        "seed": config.probe_seed,
        "datasets": [config.dataset.model_dump(exclude_none=True)],
        "models": [{"from_tune": str(Store(config.store).local_path("tune",
                                                                      config.experiment_name))}],
        "views": [{"name": "probe", "recipe": "simclr", **PROBE}],
        "embed": {"batch_size": 128, "device": "cpu", "num_cpus_per_actor": 0.5},
    })
    run_embed(run_config)
    sample_id, stored = Store(run_config.store).read_embeddings(
        "digits", "probe", row.model_id).grouped()

    setup = prepare_search(config)
    np.testing.assert_array_equal(sample_id, setup.probe.sample_id)
    trainer = make_trainer(setup, TrialParams.model_validate(json.loads(row.config)))
    trainer.load(row.checkpoint.rsplit("/", 1)[0])
    torch.set_num_threads(1)
    ours, _ = trainer.embed(setup.probe.views.reshape(-1, *setup.probe.views.shape[2:]))
    np.testing.assert_allclose(stored.reshape(len(ours), -1), ours, rtol=1e-5, atol=1e-5)
    assert lidar(stored) == pytest.approx(row.final_lidar, rel=1e-4)
