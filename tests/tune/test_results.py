"""What a finished search leaves for a run: the zoo entries of its trials (one mapping of a trial
onto a model spec) and the order of the zoo's board (the search's objective unless the run config
names another metric), through the RANK stage's own leaderboard code."""

from __future__ import annotations

import json

import pandas as pd
import pytest
from safetensors.torch import save_file

from zoorank.config.loading import parse_config
from zoorank.integrations.ray_tune import trial_spec
from zoorank.rank.board import build_leaderboard
from zoorank.store.schema import METRICS_COLUMNS
from zoorank.tune.models import small_cnn
from zoorank.zoo import resolve_models, write_zoo_file, write_zoo_objective
from zoorank.zoo.zoofile import OBJECTIVE_FILE_NAME, read_zoo_objective

# lidar orders the trials a > b > c, rankme the reverse: the board's first model says which
# metric ordered it
VALUES = {"a": {"lidar": 9.0, "rankme": 1.0}, "b": {"lidar": 5.0, "rankme": 2.0},
          "c": {"lidar": 1.0, "rankme": 3.0}}
ENTRY = {"source": "python", "name": "zoorank.tune.models:small_cnn",
         "model_kwargs": {"width": 4, "depth": 1}}


def _exported_zoo(folder, objective: str | None):
    """Three trials' real backbones exported as a search exports them."""
    specs = []
    for i, trial in enumerate(VALUES):
        path = folder / f"trial{i}" / "backbone.safetensors"
        path.parent.mkdir(parents=True)
        save_file(small_cnn(width=4, depth=1).state_dict(), str(path))
        specs.append(trial_spec(ENTRY, trial, str(path), input_size=8, interpolation="bilinear",
                                mean=(0.5, 0.5, 0.5), std=(0.25, 0.25, 0.25),
                                group=trial, family="simclr"))
    write_zoo_file(folder, specs)
    if objective is not None:
        write_zoo_objective(folder, objective, "max")
    return specs


def _board(tmp_path, folder, **rank):
    config = parse_config({
        "store": str(tmp_path / "store"),
        "datasets": [{"name": "digits", "source": "sklearn_digits", "limit": 50}],
        "models": [{"from_tune": str(folder)}],
        "views": [{"name": "clean"}, {"name": "aug", "samples": 10, "per_sample": 2}],
        "metrics": ["rankme", "lidar"], **({"rank": rank} if rank else {})})
    rows = [{"model_id": m, "dataset": "digits", "metric": k, "value": v,
             "params": json.dumps({}), "n": 50, "dim": 4, "seed": 0,
             "zoorank_version": "test", "fingerprint": f"{m}-{k}"}
            for m, values in VALUES.items() for k, v in values.items()]
    board, settings = build_leaderboard(config, resolve_models(config),
                                        pd.DataFrame(rows, columns=METRICS_COLUMNS),
                                        pd.DataFrame())
    return list(board["model_id"]), settings


def test_a_trial_spec_carries_the_search_preprocessing_and_the_entry_wins():
    spec = trial_spec({**ENTRY, "input_size": 16}, "t0", "/x/backbone.safetensors",
                      input_size=8, interpolation="bicubic", mean=(0.1, 0.2, 0.3),
                      std=(0.4, 0.5, 0.6), group="g", family="byol")
    assert (spec.id, spec.checkpoint, spec.group, spec.family) == (
        "t0", "/x/backbone.safetensors", "g", "byol")
    assert spec.input_size == 16  # the user's own entry overrides the search's preprocessing
    assert spec.interpolation == "bicubic" and list(spec.mean) == [0.1, 0.2, 0.3]
    assert spec.model_kwargs == {"width": 4, "depth": 1}


@pytest.mark.timeout(120)
def test_a_zoo_exported_by_a_search_is_ordered_by_its_objective(tmp_path):
    folder = tmp_path / "tune" / "exp"
    _exported_zoo(folder, "lidar")
    assert read_zoo_objective(folder) == "lidar"
    order, settings = _board(tmp_path, folder)
    assert order == ["a", "b", "c"] and settings["ordered_by"] == "lidar"
    # the config says otherwise: its metric orders the board
    order, settings = _board(tmp_path, folder, primary_metric="rankme")
    assert order == ["c", "b", "a"] and settings["ordered_by"] == "rankme"
    # a zoo without a recorded objective keeps the default order (rankme first here)
    (folder / OBJECTIVE_FILE_NAME).unlink()
    assert read_zoo_objective(folder) is None
    order, settings = _board(tmp_path, folder)
    assert order == ["c", "b", "a"] and settings["ordered_by"] == "rankme"


def test_an_objective_the_run_does_not_compute_leaves_the_default_order(tmp_path):
    folder = tmp_path / "exp"
    _exported_zoo(folder, "twonn_id")  # a Tune objective this run config does not score
    order, settings = _board(tmp_path, folder)
    assert order == ["c", "b", "a"] and settings["ordered_by"] == "rankme"
