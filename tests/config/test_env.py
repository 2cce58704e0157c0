"""``${VAR}`` and ``${VAR:-default}`` in a config's string values."""

from __future__ import annotations

import pytest
import yaml

from zoorank.config.loading import expand_env, load_config, load_yaml
from zoorank.errors import ConfigError


def _write(tmp_path, text: str):
    path = tmp_path / "run.yaml"
    path.write_text(text)
    return path


CONFIG = """
store: ${ZR_TEST_ROOT}/store
seed: ${ZR_TEST_SEED:-7}
datasets:
  - name: d
    source: parquet
    path: "${ZR_TEST_DATA:-/data}/${ZR_TEST_SPLIT}.parquet"
models:
  - {id: m, source: timm, name: "${ZR_TEST_ARCH:-resnet18}", input_size: "${ZR_TEST_SIZE}"}
"""


def test_variables_and_defaults_are_substituted_and_validated(tmp_path, monkeypatch):
    monkeypatch.setenv("ZR_TEST_ROOT", "/runs/x")
    monkeypatch.setenv("ZR_TEST_SPLIT", "test")
    monkeypatch.setenv("ZR_TEST_SIZE", "32")
    monkeypatch.setenv("ZR_TEST_ARCH", "")  # empty: the default, as the shell's ${VAR:-default}
    monkeypatch.delenv("ZR_TEST_DATA", raising=False)
    monkeypatch.delenv("ZR_TEST_SEED", raising=False)
    config = load_config(_write(tmp_path, CONFIG))
    assert config.store == "/runs/x/store"
    assert config.seed == 7  # the default "7", validated into the integer field
    assert config.datasets[0].path == "/data/test.parquet"
    assert config.models[0].name == "resnet18" and config.models[0].input_size == 32
    monkeypatch.setenv("ZR_TEST_DATA", "/mnt/d")
    assert load_config(_write(tmp_path, CONFIG)).datasets[0].path == "/mnt/d/test.parquet"


def test_an_unset_variable_without_default_is_a_config_error_naming_it_and_the_field(
        tmp_path, monkeypatch):
    monkeypatch.setenv("ZR_TEST_ROOT", "/r")
    monkeypatch.setenv("ZR_TEST_SIZE", "32")
    monkeypatch.delenv("ZR_TEST_SPLIT", raising=False)
    path = _write(tmp_path, CONFIG)
    with pytest.raises(ConfigError) as err:
        load_config(path)
    assert str(err.value) == (
        f"{path}: datasets[0](d).path: environment variable ZR_TEST_SPLIT is not set and "
        "${ZR_TEST_SPLIT} has no default (set it, or write ${ZR_TEST_SPLIT:-default})")


def test_the_command_line_exits_2_naming_the_variable(tmp_path, monkeypatch, capsys):
    from zoorank.cli import main

    monkeypatch.delenv("ZR_TEST_ROOT", raising=False)
    path = _write(tmp_path, CONFIG)
    assert main(["config", "validate", str(path)]) == 2
    assert "store: environment variable ZR_TEST_ROOT is not set" in capsys.readouterr().err


@pytest.mark.parametrize(("text", "env", "expected"), [
    ("$${HOME}/x", {}, "${HOME}/x"),  # $${ is a literal ${
    ("a${A}b${B:-c}d", {"A": "1"}, "a1bcd"),
    ("${A:-}", {}, ""),  # an empty default is a default
    ("cost: $5", {}, "cost: $5"),  # a lone $ is text
    ("${A:-x:-y}", {}, "x:-y"),
])
def test_the_substitution_follows_the_shell_form(text, env, expected):
    assert expand_env({"k": [text]}, "c.yaml", env) == {"k": [expected]}


def test_keys_and_non_strings_are_left_alone():
    data = {"${A}": 3, "n": None, "b": True, "l": [1.5, {"x": "${A}"}]}
    assert expand_env(data, "c.yaml", {"A": "v"}) == {"${A}": 3, "n": None, "b": True,
                                                      "l": [1.5, {"x": "v"}]}


@pytest.mark.parametrize("text", ["${}", "${1A}", "${A-default}", "${A"])
def test_a_malformed_reference_is_a_config_error(text):
    with pytest.raises(ConfigError, match=r"c\.yaml: models\[0\]\.name: malformed"):
        expand_env({"models": [{"name": text}]}, "c.yaml", {"A": "1"})


def test_the_tune_config_is_substituted_too(tmp_path, monkeypatch):
    from zoorank.tune.config import load_tune_config

    monkeypatch.setenv("ZR_TEST_EPOCHS", "3")
    path = tmp_path / "tune.yaml"
    path.write_text(yaml.safe_dump({"dataset": {"name": "d", "source": "sklearn_digits"},
                                    "epochs": "${ZR_TEST_EPOCHS}"}))
    assert load_tune_config(path).epochs == 3
    assert load_yaml(path)["epochs"] == "3"
