"""The tune config: bad spaces and unknown methods are ConfigErrors naming the field (exit 2)."""

from __future__ import annotations

from pathlib import Path

import pytest
import yaml

from zoorank.cli import main
from zoorank.errors import ConfigError
from zoorank.tune.config import SEARCHABLE, TuneConfig, load_tune_config, parse_tune_config

REPO = Path(__file__).resolve().parents[2]

BASE = {"dataset": {"name": "digits", "source": "sklearn_digits"}}


@pytest.mark.parametrize(
    ("extra", "expected"),
    [
        ({"space": {"momentum": {"grid": [0.9]}}}, ["space", "momentum"]),
        ({"space": {"method": {"grid": ["simclr", "moco"]}}}, ["space", "method", "moco"]),
        ({"space": {"method": {"choice": ["dino"]}}}, ["space", "unknown method", "dino"]),
        ({"method": "moco"}, ["method", "simclr"]),
        ({"space": {"lr": {"grid": []}}}, ["space.lr", "empty"]),
        ({"space": {"lr": {"uniform": [0.1, 0.01]}}, "search": {"algorithm": "random"}},
         ["space.lr", "low must be < high"]),
        ({"space": {"lr": {"loguniform": [0.0, 0.1]}}, "search": {"algorithm": "random"}},
         ["space.lr", "> 0"]),
        ({"space": {"seed": {"uniform": [0, 3]}}, "search": {"algorithm": "random"}},
         ["space", "seed", "grid or choice"]),
        ({"space": {"lr": {"uniform": [0.01, 0.1]}}}, ["algorithm 'grid'", "lr"]),
        ({"space": {"temperature": {"grid": [0.1, -1.0]}}}, ["space", "temperature", "-1"]),
        ({"space": {"lr": {"grid": [0.1], "choice": [0.2]}}}, ["space.lr", "exactly one"]),
        ({"objective": {"metric": "accuracy"}}, ["objective.metric"]),
        ({"search": {"scheduler": "hyperband"}}, ["search.scheduler"]),
        ({"search": {"cpus_per_trial": 0}}, ["search.cpus_per_trial"]),
        ({"epochs": 3, "epoch": 4}, ["epoch", "unknown key"]),
    ],
)
def test_bad_configs_raise_config_errors_naming_the_field(extra, expected):
    with pytest.raises(ConfigError) as info:
        parse_tune_config({**BASE, **extra}, "tune.yaml")
    message = str(info.value)
    assert message.startswith("tune.yaml: ")
    for part in expected:
        assert part in message


def test_an_oracle_without_labels_is_a_config_error():
    data = {"dataset": {"name": "x", "source": "image_folder", "path": "imgs"},
            "oracle": {"knn": True}}
    with pytest.raises(ConfigError, match="oracle.*labels"):
        parse_tune_config(data, "tune.yaml")


def test_every_trial_parameter_is_searchable_and_space_values_override_defaults():
    config = parse_tune_config({**BASE, "lr": 0.01, "space": {"seed": {"grid": [0, 1]}}})
    assert set(SEARCHABLE) >= {"method", "lr", "temperature", "var_weight", "inv_weight",
                               "cov_weight", "ema", "weight_decay", "seed", "batch_size"}
    params = config.trial_params({"seed": 1, "method": "byol"})
    assert (params.lr, params.seed, params.method) == (0.01, 1, "byol")


def test_the_experiment_name_follows_the_config_but_not_where_it_runs():
    a = parse_tune_config({**BASE, "store": "/a"})
    b = parse_tune_config({**BASE, "store": "/b", "search": {"cpus_per_trial": 0.25}})
    c = parse_tune_config({**BASE, "lr": 0.5})
    assert a.experiment_name == b.experiment_name != c.experiment_name


def test_the_example_config_is_valid():
    config = load_tune_config("pipelines/configs/tune_digits.yaml")
    assert isinstance(config, TuneConfig)
    assert config.oracle is not None and config.labelled_dataset == config.dataset


@pytest.mark.parametrize(
    ("extra", "expected"),
    [
        ({"space": {"method": {"grid": ["simclr", "swav"]}}}, "swav"),
        ({"recipe": "autoaugment"}, "recipe"),
        ({"probe": {"samples": 5000}}, "probe.samples"),
        ({"backbone": {"name": "no_such_net"}}, "backbone"),
    ],
)
def test_the_cli_exits_2_with_a_message_for_bad_configs(tmp_path, capsys, extra, expected):
    path = tmp_path / "tune.yaml"
    path.write_text(yaml.safe_dump({**BASE, "store": str(tmp_path / "store"), **extra}))
    assert main(["tune", str(path)]) == 2
    err = capsys.readouterr().err
    assert err.startswith("zoorank: error: ") and expected in err


def test_a_named_experiment_of_another_config_is_neither_resumed_nor_exported(tmp_path):
    from zoorank.store import Store
    from zoorank.tune.config import experiment_location
    from zoorank.tune.search import check_experiment_matches

    first = parse_tune_config({**BASE, "store": str(tmp_path), "search": {"name": "sweep"}})
    store, _, rel = experiment_location(first)
    check_experiment_matches(first, store, rel)  # nothing there yet
    store.write_json(f"{rel}/tune_fingerprint.json", {"fingerprint": first.fingerprint()})
    check_experiment_matches(first, store, rel)  # its own experiment: resumed
    changed = parse_tune_config({**BASE, "store": str(tmp_path), "lr": 0.5,
                                 "search": {"name": "sweep"}})
    with pytest.raises(ConfigError, match="search.name"):
        check_experiment_matches(changed, Store(str(tmp_path)), rel)


def test_the_trials_summary_piped_is_plain_text_within_100_columns(capsys):
    """Off a terminal (a pipe, ``ray job logs``) the trials table has no border to cut and no line
    over 100 columns, with long trial ids and both oracle columns."""
    import numpy as np
    import pandas as pd

    from zoorank.console import PLAIN_WIDTH
    from zoorank.tune.results import print_summary

    config = load_tune_config(REPO / "pipelines" / "configs" / "tune_digits.yaml", store="/tmp/s")
    ids = [f"vicreg-lr0.003-wd0.0001-s{i}" for i in range(3)]
    frame = pd.DataFrame({
        "model_id": ids, "status": ["completed", "stopped", "error"], "reports": [6, 2, 0],
        "final": [41.5, 12.25, np.nan], "score": [41.5, 12.25, np.nan],
        "selected": [True, False, False], "checkpoint": ["/runs/a/backbone.safetensors"] * 3,
        "overhead": [0.031, 0.05, np.nan], "knn_accuracy": [0.93, 0.71, np.nan],
        "linear_probe_accuracy": [0.95, 0.8, np.nan],
    })
    print_summary(config, frame, "/tmp/s/tune/tune-digits")
    out = capsys.readouterr().out
    lines = out.splitlines()
    assert max(len(line) for line in lines) <= PLAIN_WIDTH, out
    assert not set(out) & set("─│┌┐└┘├┤┬┴┼━┃┏┓┗┛┡┩╇"), out
    for i, status in zip(ids, frame["status"]):  # a row per trial, its id never wrapped
        assert any(line.lstrip(" *").startswith(i) and status in line for line in lines), out
    assert "knn acc" in out and "probe acc" in out and "winner: " + ids[0] in out
