"""Config (contract 4): the documented example validates; errors name the file and the field."""

from __future__ import annotations

import subprocess
import sys
import textwrap

import pytest

from zoorank.config.digests import fingerprint
from zoorank.config.loading import load_config, parse_config
from zoorank.errors import ConfigError

EXAMPLE = """
store: ./zoorank-store
seed: 0
datasets:
  - name: cifar10
    source: parquet
    path: ../shared/data/cifar10/test.parquet
    image_column: image
    label_column: label
    limit: 2000
models:
  - id: r18-lr0.3-s0
    source: timm
    name: resnet18
    checkpoint: runs/lr0.3-s0/last.safetensors
    group: r18-lr0.3
    family: simclr
views:
  - name: clean
  - name: simclr
    samples: 500
    per_sample: 10
metrics: [rankme, lidar, alpha_req, twonn_id, mle_id, cluster_learnability, clid, nc]
oracle:
  knn: true
  linear_probe: true
"""


def test_contract_example_validates(tmp_path):
    path = tmp_path / "run.yaml"
    path.write_text(EXAMPLE)
    config = load_config(path)
    assert config.datasets[0].limit == 2000
    assert config.models[0].group == "r18-lr0.3"
    assert [v.name for v in config.augmented_views] == ["simclr"]
    assert config.clean_view.name == "clean"
    assert config.oracle.knn and config.oracle.linear_probe


def test_store_override_replaces_the_configs_store(tmp_path):
    path = tmp_path / "run.yaml"
    path.write_text(EXAMPLE)
    assert load_config(path, store="s3://bucket/x").store == "s3://bucket/x"


@pytest.mark.parametrize(
    ("patch", "expected"),
    [
        ({"models": [{"id": "m", "source": "timm", "name": "resnet18", "colour": 1}]},
         "models[0](m).colour: unknown key"),
        ({"datasets": [{"name": "d", "source": "parquet"}]}, "datasets[0](d): source 'parquet' needs"),
        ({"metrics": ["rankme", "bogus"]}, "metrics: unknown metric(s) ['bogus']"),
        ({"views": [{"name": "simclr", "per_sample": 1}]}, "views[0](simclr): augmented views need"),
        ({"seed": "abc"}, "seed: Input should be a valid integer"),
        ({"surprise": True}, "surprise: unknown key"),
    ],
)
def test_errors_name_the_file_and_field(patch, expected):
    data = {"datasets": [{"name": "digits", "source": "sklearn_digits"}],
            "models": [{"id": "m", "source": "timm", "name": "resnet18"}]}
    data.update(patch)
    with pytest.raises(ConfigError) as err:
        parse_config(data, "run.yaml")
    assert f"run.yaml: {expected}" in str(err.value)


def test_models_accept_a_single_from_tune_mapping():
    config = parse_config({"datasets": [{"name": "d", "source": "sklearn_digits"}],
                           "models": {"from_tune": "store/tune/zoo.yaml"}})
    assert config.models[0].from_tune == "store/tune/zoo.yaml"


def test_fingerprint_is_stable_and_sensitive():
    a = fingerprint({"x": 1, "y": [1, 2]}, "v")
    assert a == fingerprint({"y": [1, 2], "x": 1}, "v")
    assert a != fingerprint({"x": 2, "y": [1, 2]}, "v")


def test_cli_exits_2_with_the_field_named(tmp_path):
    path = tmp_path / "bad.yaml"
    path.write_text(textwrap.dedent("""
        datasets: [{name: digits, source: sklearn_digits, limit: -3}]
        models: [{id: m, source: timm, name: resnet18}]
    """))
    proc = subprocess.run([sys.executable, "-m", "zoorank", "embed", str(path)],
                          capture_output=True, text=True, timeout=120)
    assert proc.returncode == 2
    assert "bad.yaml: datasets[0](digits).limit" in proc.stderr
    assert "Traceback" not in proc.stderr


def test_cli_missing_config_exits_2(tmp_path):
    proc = subprocess.run([sys.executable, "-m", "zoorank", "run", str(tmp_path / "nope.yaml")],
                          capture_output=True, text=True, timeout=120)
    assert proc.returncode == 2 and "config file not found" in proc.stderr


def test_cli_version_is_the_installed_distributions():
    from importlib.metadata import version

    proc = subprocess.run([sys.executable, "-m", "zoorank", "--version"],
                          capture_output=True, text=True, timeout=120)
    assert proc.returncode == 0 and proc.stdout.strip() == f"zoorank {version('zoorank')}"



@pytest.mark.parametrize("field, first, second", [("datasets", "cifar", "CIFAR"),
                                                  ("models", "r18", "R18")])
def test_names_that_differ_only_in_case_are_a_config_error_naming_both(field, first, second):
    data = {"datasets": [{"name": "cifar", "source": "sklearn_digits"}],
            "models": [{"id": "r18", "source": "timm", "name": "resnet18"}]}
    data[field].append({"datasets": {"name": second, "source": "sklearn_digits"},
                        "models": {"id": second, "source": "timm", "name": "resnet18"}}[field])
    with pytest.raises(ConfigError, match=f"{field}.*'{first}' and '{second}' differ only in case"):
        parse_config(data)


_SOURCE_BASE = {
    "datasets": [{"name": "target", "source": "parquet", "path": "t.parquet"},
                 {"name": "cifar_val", "source": "parquet", "path": "v.parquet",
                  "label_column": "label"}],
    "models": [{"source": "timm", "name": "resnet18"}],
}


def test_source_names_a_labelled_dataset_of_the_run():
    config = parse_config({**_SOURCE_BASE, "source": "cifar_val",
                           "rank": {"classifier_metric": "atc_accuracy"}})
    assert config.source == "cifar_val" and config.classifier_metric == "atc_accuracy"
    # unset: the shift benchmark's choices, COT with a source set, the nuclear norm without
    assert parse_config(_SOURCE_BASE).classifier_metric == "nuclear_norm_accuracy"
    assert parse_config({**_SOURCE_BASE, "source": "cifar_val"}).classifier_metric == "cot_accuracy"


@pytest.mark.parametrize("patch, expected", [
    ({"source": "missing"}, "source: 'missing' is not a dataset"),
    ({"source": "target"}, "source: dataset 'target' has no labels"),
    ({"rank": {"classifier_metric": "cot_accuracy"}}, "rank.classifier_metric: 'cot_accuracy' needs"),
    ({"rank": {"classifier_metric": "rankme"}}, "rank.classifier_metric: unknown estimate"),
])
def test_a_bad_source_or_classifier_metric_is_a_config_error_naming_the_field(patch, expected):
    with pytest.raises(ConfigError, match=expected):
        parse_config({**_SOURCE_BASE, **patch})
