"""examples/: every config is valid, its header says how to run it, the README lists it, and the
ones that run on scikit-learn's digits or ``../shared`` data run here at a tiny size.

The examples' relative paths are read from the examples folder (the documented rule); the tests
run with that folder as the working directory and hand zoorank the paths resolved against it, so
they hold whether zoorank resolves relative paths against the config's folder or the working
directory. A run is shrunk (fewer images, smaller views) but keeps the example's models, metrics
and options.
"""

from __future__ import annotations

import re
from pathlib import Path

import pytest
import yaml

import zoorank

REPO = Path(__file__).resolve().parents[1]
EXAMPLES = REPO / "examples"
FILES = sorted(EXAMPLES.glob("*.yaml"))
#: configs of ``zoorank tune`` (the others are run configs)
TUNE = {"tune_search.yaml"}
#: what the examples read from the environment, set to loopback dummies (nothing is contacted)
DUMMY_ENV = {"ZOORANK_BUCKET": "zoorank-examples", "AWS_ENDPOINT_URL": "http://127.0.0.1:9",
             "AWS_ACCESS_KEY_ID": "testing", "AWS_SECRET_ACCESS_KEY": "testing",
             "AWS_DEFAULT_REGION": "us-east-1"}


@pytest.fixture
def in_examples(monkeypatch):
    monkeypatch.chdir(EXAMPLES)
    for key, value in DUMMY_ENV.items():
        monkeypatch.setenv(key, value)
    return EXAMPLES


def _example(name: str) -> dict:
    return yaml.safe_load((EXAMPLES / name).read_text())


def _resolved(data: dict) -> dict:
    """The config with its relative local dataset paths resolved against the examples folder."""
    for spec in data.get("datasets") or []:
        path = spec.get("path")
        if path and "://" not in path and not Path(path).is_absolute():
            spec["path"] = str((EXAMPLES / path).resolve())
    return data


def test_there_are_at_least_six_examples_and_the_readme_lists_each_one():
    readme = (EXAMPLES / "README.md").read_text()
    assert len(FILES) >= 6
    listed = set(re.findall(r"\(([\w.-]+\.yaml)\)", readme))
    assert listed == {p.name for p in FILES}


@pytest.mark.parametrize("path", FILES, ids=lambda p: p.name)
def test_every_example_opens_with_a_header_that_says_how_to_run_it(path):
    header = []
    for line in path.read_text().splitlines():
        if not line.startswith("#"):
            break
        header.append(line)
    command = "zoorank tune" if path.name in TUNE else "zoorank run"
    assert len(header) >= 3
    assert any(f"{command} examples/{path.name}" in line for line in header)


@pytest.mark.parametrize("path", FILES, ids=lambda p: p.name)
def test_every_example_is_a_valid_config(path, in_examples):
    from zoorank.config.loading import load_config, load_yaml
    from zoorank.tune.config import parse_tune_config

    if path.name in TUNE:
        config = parse_tune_config(load_yaml(path), str(path))
        assert config.search.name
    else:
        config = load_config(path)
        assert config.datasets and config.models
        assert zoorank.api.validate(path) == config
    # the data an example reads beside the checkout is where its relative path says
    shared = [d["path"] for d in _example(path.name).get("datasets") or []
              if str(d.get("path", "")).startswith("../../shared/")]
    for rel in shared:
        if not (REPO.parent / "shared").is_dir():
            pytest.skip("../shared is not beside the checkout")
        assert (EXAMPLES / rel).exists(), rel


def test_the_minimal_example_has_two_keys():
    assert set(_example("minimal.yaml")) == {"datasets", "models"}


# -- examples that run here ------------------------------------------------------------------------
@pytest.mark.slow
@pytest.mark.timeout(900)
def test_the_minimal_example_runs_and_ranks_its_two_timm_models(in_examples, tmp_path):
    data = _resolved(_example("minimal.yaml"))
    data["datasets"][0]["limit"] = 64
    for model in data["models"]:
        model["input_size"] = 32  # timm's 224 px is what a laptop runs; 32 px here
    result = zoorank.run(data, store=str(tmp_path / "store"))
    # the ids default to the timm names
    assert set(result.leaderboard["model_id"]) == {"resnet18", "mobilenetv3_small_100"}
    assert result.pick.model_id in {"resnet18", "mobilenetv3_small_100"}
    assert Path(result.report_path).is_file()


def _lightning_checkpoint(path: Path, collapsed: bool, seed: int) -> None:
    """A PyTorch Lightning checkpoint of a SimCLR module on timm's resnet18: the backbone under
    ``model.backbone.``, a projector beside it, and Lightning's own keys. ``collapsed``: every
    BatchNorm scale is zero, so every layer's output (and the embedding) is the same for any
    image."""
    import timm
    import torch

    torch.manual_seed(seed)
    backbone = timm.create_model("resnet18", pretrained=False, num_classes=0)
    if collapsed:
        for module in backbone.modules():
            if isinstance(module, torch.nn.BatchNorm2d):
                torch.nn.init.zeros_(module.weight)
    projector = torch.nn.Sequential(torch.nn.Linear(512, 512), torch.nn.ReLU(),
                                    torch.nn.Linear(512, 128))
    state = {f"model.backbone.{k}": v for k, v in backbone.state_dict().items()}
    state.update({f"model.projector.{k}": v for k, v in projector.state_dict().items()})
    path.parent.mkdir(parents=True)
    torch.save({"epoch": 99, "global_step": 3900, "pytorch-lightning_version": "2.4.0",
                "state_dict": state, "hyper_parameters": {"lr": 0.3, "temperature": 0.2}}, path)


@pytest.mark.slow
@pytest.mark.timeout(900)
def test_the_checkpoint_folder_example_ranks_each_lightning_checkpoint_of_its_glob(
        in_examples, tmp_path, shared_data):
    from zoorank.metrics import registry

    glob = _example("checkpoint_folder.yaml")["models"][0]["checkpoint"]
    runs = tmp_path / "sweep"
    healthy = runs / glob.replace("*", "lr0.3-s0")
    _lightning_checkpoint(healthy, collapsed=False, seed=0)
    _lightning_checkpoint(runs / glob.replace("*", "lr3.0-s0"), collapsed=True, seed=1)
    data = _resolved(_example("checkpoint_folder.yaml"))
    data["models"][0]["checkpoint"] = str(runs / glob)
    data["datasets"][0]["limit"] = 64
    data["views"][1].update(samples=32, per_sample=4)
    result = zoorank.run(data, store=str(tmp_path / "store"))
    # one model per file, its id the path below the glob's fixed part
    ids = {"lr0.3-s0-checkpoints-last", "lr3.0-s0-checkpoints-last"}
    assert set(result.leaderboard["model_id"]) == ids
    # the weights were read: the collapsed backbone embeds every image to one vector, whose
    # RankMe is 1 (one non-zero singular value), and the healthy one is picked
    long = result.metrics().set_index(["model_id", "metric"])["value"]
    assert long[("lr3.0-s0-checkpoints-last", "rankme")] == pytest.approx(1.0, abs=1e-3)
    assert long[("lr0.3-s0-checkpoints-last", "rankme")] > 2
    assert result.pick.model_id == "lr0.3-s0-checkpoints-last"
    assert registry.is_label_free("rankme") and "cifar10/knn_accuracy" in result.leaderboard


@pytest.mark.slow
@pytest.mark.timeout(900)
def test_the_s3_store_example_writes_its_store_to_s3_and_opens_from_there(
        in_examples, tmp_path, s3_server):
    data = _resolved(_example("s3_store.yaml"))
    data["datasets"][0]["limit"] = 64
    # the store of the example, on the loopback S3 server (its endpoint and dummy keys ride in
    # the URI, for a Ray that started before this test set the environment)
    store = s3_server("zoorank-examples/zoorank/digits")
    result = zoorank.run(data, store=store)
    assert set(result.leaderboard["model_id"]) == {"cnn-w16", "cnn-w32"}
    keys = [o["Key"] for o in s3_server.client.list_objects_v2(
        Bucket="zoorank-examples", Prefix="zoorank/digits/")["Contents"]]
    assert "zoorank/digits/report/index.html" in keys
    assert result.report_path.startswith("s3://") and "testing" not in result.report_path
    again = zoorank.open(store)
    assert (again.pick, again.shortlist) == (result.pick, result.shortlist)
    assert "testing:testing" not in again.store + repr(again)
