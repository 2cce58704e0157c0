"""The per-model table of a labelled store, and a run naming a calibration record (no Ray: RANK's
outputs written from a store made by ``rank_fixtures``)."""

from __future__ import annotations

import json

import numpy as np
import pytest
from evaluation_tables import sweep_table

from zoorank.config.loading import parse_config
from zoorank.decide.calibrate import parse_store_argument, store_rows
from zoorank.errors import ConfigError, InputError
from zoorank.evaluation import build_record, write_record
from zoorank.store import Store


def _rank(root, **config_extra):
    from rank_fixtures import config_dict, oracle_rows, stamp_fingerprints, write_store

    from zoorank.decide.leaderboard import read_leaderboard
    from zoorank.rank import write_rank_outputs
    from zoorank.zoo import resolve_models

    models = write_store(str(root))
    raw = config_dict(str(root), oracle={"knn": True})
    raw["rank"].pop("primary_metric")
    raw.update(config_extra)
    config = parse_config(raw)
    store = Store(config.store)
    stamp_fingerprints(config, store)
    store.write_parquet("oracle", oracle_rows(models))
    write_rank_outputs(config, store, resolve_models(config), store.read_metrics(),
                       store.read_frame("oracle"), show=False)
    return read_leaderboard(store)


@pytest.fixture
def record_on(tmp_path):
    """A record file whose encoder metric is ``metric`` (a real record of a constructed table,
    its metric column renamed so the protocol picks that metric)."""
    def write(metric: str):
        table = sweep_table(5).drop(columns="rankme").rename(columns={"rankme_proj": metric})
        path = tmp_path / f"{metric}.json"
        write_record(build_record(table), path)
        return path
    return write


def test_store_rows_carry_the_oracle_truth_and_the_metrics(tmp_path):
    from rank_fixtures import ORACLE_ACCURACY

    _rank(tmp_path / "zoo")
    rows = store_rows(str(tmp_path / "zoo"), "team-a").set_index("model_id")
    truth = rows["truth"].dropna()
    assert truth.to_dict() == pytest.approx({m: ORACLE_ACCURACY[m] for m in truth.index})
    assert set(truth.index) == set(ORACLE_ACCURACY)
    assert {"rankme", "uniformity"} <= set(rows.columns)
    assert (rows["unit"] == "team-a").all() and (rows["board"] == "embeddings").all()


def test_store_arguments_and_unlabelled_stores(tmp_path):
    assert parse_store_argument("/x/runs/sweep-1/") == ("sweep-1", "/x/runs/sweep-1/")
    assert parse_store_argument("cifar=/x/a") == ("cifar", "/x/a")
    assert parse_store_argument("s3://b/store") == ("store", "s3://b/store")
    with pytest.raises(InputError, match="no leaderboard"):
        store_rows(str(tmp_path / "empty"), "u")


@pytest.mark.parametrize("metric", ["uniformity", "rankme"])
def test_rank_orders_by_the_records_metric(tmp_path, record_on, metric):
    path = record_on(metric)
    board, settings = _rank(tmp_path / "zoo", record=str(path))
    assert settings["primary_metric"] == {"digits": metric}
    assert settings["record"] == str(path)
    # the shortlist takes the record's fraction and its held-out units
    doc = json.loads((tmp_path / "zoo" / "decision.json").read_text())
    entry = json.loads(path.read_text())["boards"]["encoders"]
    assert doc["shortlist"]["rule"]["fraction"] == entry["shortlist_fraction"]
    assert doc["shortlist"]["zoos"] == entry["held_out_units"]["n"] == 5
    # the board's first model is the best by that metric (uniformity: lower is better)
    values = board.set_index("model_id")[f"digits/{metric}"].dropna()
    best = values.idxmin() if metric == "uniformity" else values.idxmax()
    ranked = board[board["rank"].notna()].sort_values("rank")
    assert ranked["model_id"].iloc[0] == best or np.isclose(values[ranked["model_id"].iloc[0]],
                                                            values[best])


def test_primary_metric_overrides_the_record(tmp_path, record_on):
    path = record_on("uniformity")
    _, settings = _rank(tmp_path / "zoo", record=str(path),
                        rank={"primary_metric": "rankme", "bootstrap": 0})
    assert settings["primary_metric"] == {"digits": "rankme"}


def test_a_bad_record_is_a_config_error_naming_the_field(tmp_path):
    from rank_fixtures import config_dict

    raw = config_dict(str(tmp_path / "s"))
    with pytest.raises(ConfigError, match="record:.*missing.json"):
        parse_config({**raw, "record": str(tmp_path / "missing.json")})
    bad = tmp_path / "bad.json"
    bad.write_text(json.dumps({"schema_version": 3}))
    with pytest.raises(ConfigError, match="record:.*schema_version"):
        parse_config({**raw, "record": str(bad)})
