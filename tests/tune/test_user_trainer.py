"""``zoorank tune`` with ``trainer: {source: python, name: "module:function"}``: the user's own
plain PyTorch loop (``tests/integrations/ssl_digits.py``) searched with ASHA from a config file."""

from __future__ import annotations

import sys
from pathlib import Path

import pandas as pd
import pytest
import yaml

from zoorank.errors import ConfigError
from zoorank.tune.config import load_tune_config, parse_tune_config

USER_CODE = str(Path(__file__).resolve().parents[1] / "integrations")
MEAN = [0.485, 0.456, 0.406]
STD = [0.229, 0.224, 0.225]


def _config(tmp_path: Path, **trainer) -> dict:
    return {
        "store": str(tmp_path / "store"),
        "dataset": {"name": "digits", "source": "sklearn_digits", "limit": 600},
        "backbone": {"input_size": 8, "mean": MEAN, "std": STD},
        "epochs": 2,  # max_t 2, grace 1: one rung, at epoch 1
        "probe": {"samples": 128, "per_sample": 4},
        "objective": {"metric": "rankme", "report": ["lidar"]},
        "search": {"name": "user", "grace_period": 1, "reduction_factor": 2,
                   "max_concurrent_trials": 1, "cpus_per_trial": 1.0},
        "trainer": {"name": "ssl_digits:train",
                    "model": {"source": "python", "name": "zoorank.tune.models:small_cnn",
                              "model_kwargs": {"width": 16, "depth": 2}},
                    "params": {"negatives": True, "limit": 600, "batch_size": 64},
                    "space": {"lr": {"grid": [0.05, 8.0]}}, **trainer},
    }


def test_trainer_name_must_be_module_colon_function(tmp_path):
    data = _config(tmp_path)
    data["trainer"]["name"] = "ssl_digits.train"
    with pytest.raises(ConfigError, match="trainer.name"):
        parse_tune_config(data, "t.yaml")


@pytest.mark.slow
@pytest.mark.timeout(600)
def test_zoorank_tune_runs_a_user_training_function_with_asha(ray_session, tmp_path,
                                                              monkeypatch):
    from zoorank.tune.search import run_tune
    from zoorank.zoo import read_zoo_file

    monkeypatch.syspath_prepend(USER_CODE)
    sys.modules.pop("ssl_digits", None)
    path = tmp_path / "tune.yaml"
    path.write_text(yaml.safe_dump(_config(tmp_path)))
    frame = run_tune(str(path))
    config = load_tune_config(path)
    written = pd.read_parquet(Path(config.store) / "tune" / "user" / "tune_results.parquet")
    assert len(written) == 2 and set(written.status) <= {"completed", "stopped"}
    lr = frame.config.map(lambda c: yaml.safe_load(c)["lr"])
    healthy, collapsing = frame[lr == 0.05].iloc[0], frame[lr == 8.0].iloc[0]
    assert healthy.status == "completed" and healthy.reports == 2
    assert collapsing.status == "stopped" and collapsing.reports < 2
    assert collapsing.final < healthy.final
    zoo = read_zoo_file(Path(config.store) / "tune" / "user")
    assert sorted(s.id for s in zoo) == sorted(frame.model_id)
    assert all(s.input_size == 8 and list(s.mean) == MEAN for s in zoo)
