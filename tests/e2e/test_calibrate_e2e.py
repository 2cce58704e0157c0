"""``zoorank calibrate`` on the labelled stores of two real runs, then a run whose config names the
record: it orders the board by the record's metric and prints the record's held-out units.

Two tiny zoos on a local Ray (the TorchScript CNNs of ``tests/e2e_models.py`` on 200 digits, three
models each, the kNN label oracle on): each store is one unit."""

from __future__ import annotations

import json
from pathlib import Path

import pytest
import yaml

pytestmark = [pytest.mark.slow, pytest.mark.timeout(600)]

METRICS = ["rankme", "twonn_id", "uniformity"]


def _config(store: Path, files: dict[str, str], models: list[str], **extra) -> dict:
    import e2e_models as zoo

    return {
        "store": str(store), "seed": 0,
        "datasets": [{"name": "digits", "source": "sklearn_digits", "limit": 200}],
        "models": [{"id": m, "source": "torchscript", "name": files[m], "trust_checkpoint": True,
                    "input_size": zoo.INPUT_SIZE, "interpolation": "bilinear", "crop_pct": 1.0}
                   for m in models],
        "metrics": METRICS, "oracle": {"knn": True}, "rank": {"bootstrap": 0},
        **extra,
    }


@pytest.fixture(scope="module")
def calibrated(tmp_path_factory, ray_session, e2e_zoo):
    from zoorank.cli import main

    root = tmp_path_factory.mktemp("calibrate-e2e")
    stores = []
    for name, models in (("zoo-a", ["random", "trained", "pixels"]),
                         ("zoo-b", ["collapsed", "rot-0", "pixels"])):
        path = root / f"{name}.yaml"
        path.write_text(yaml.safe_dump(_config(root / name, e2e_zoo, models)))
        assert main(["-q", "run", str(path)]) == 0
        stores.append(str(root / name))
    record = root / "team-record.json"
    assert main(["calibrate", *stores, "--out", str(record)]) == 0
    return root, stores, record


def test_the_record_counts_one_unit_per_store(calibrated):
    from zoorank.evaluation import load_record

    _, stores, path = calibrated
    record = load_record(path)
    entry = record["boards"]["encoders"]
    assert entry["units"] == {"n": 2, "names": ["zoo-a", "zoo-b"]}
    assert entry["held_out_units"]["n"] == 2
    assert entry["held_out_units"]["protocol"] == "leave-one-unit-out"
    assert entry["metric"] in METRICS and entry["candidates"][0] == entry["metric"]
    assert record["inputs"] == stores
    # the random pick's regret is the mean gap to the best, per store (the oracle's own rows)
    from zoorank.decide.leaderboard import read_leaderboard
    from zoorank.store import Store

    gaps = []
    for s in stores:
        board, _ = read_leaderboard(Store(s))
        t = board["digits/knn_accuracy"].to_numpy()
        gaps.append(100 * (t.max() - t.mean()))
    assert entry["baselines"]["random"]["mean"] == pytest.approx(sum(gaps) / 2)


def test_a_run_naming_the_record_uses_its_metric_and_prints_its_units(calibrated, e2e_zoo,
                                                                      capsys):
    from zoorank.cli import main
    from zoorank.decide.leaderboard import read_leaderboard
    from zoorank.store import Store

    root, _, record = calibrated
    metric = json.loads(record.read_text())["boards"]["encoders"]["metric"]
    path = root / "team.yaml"
    store = root / "team-store"
    path.write_text(yaml.safe_dump(_config(store, e2e_zoo, ["random", "trained", "rot-1"],
                                           record="team-record.json")))
    capsys.readouterr()
    assert main(["run", str(path)]) == 0
    out = capsys.readouterr().out
    _, settings = read_leaderboard(Store(str(store)))
    assert settings["primary_metric"] == {"digits": metric}
    assert settings["record"] == str(record)
    # the shortlist line carries the record's held-out units: LOUO over the two stores
    held = json.loads(record.read_text())["boards"]["encoders"]["held_out_units"]
    assert f"{held['hits']}/{held['n']} held-out" in out, out
