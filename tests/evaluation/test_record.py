"""The record file: written, read back, and the block a decision carries."""

import json

import pandas as pd
import pytest
from evaluation_tables import sweep_table

from zoorank.evaluation import build_record, load_record, record_block, write_record

KEYS = {"metric", "candidates", "shortlist_fraction", "units", "held_out_units", "regret_pp",
        "baselines", "paired", "guaranteed", "statement"}


def test_round_trip_and_block(tmp_path):
    t = sweep_table(5)
    heads = sweep_table(3).assign(board="heads", unit=lambda d: "h" + d["unit"],
                                  zoo=lambda d: "h" + d["zoo"])
    heads = heads.rename(columns={"rankme": "nuclear_norm_accuracy"}).drop(columns="rankme_proj")
    record = build_record(pd.concat([t, heads], ignore_index=True))
    path = write_record(record, tmp_path / "sub" / "record.json")
    back = load_record(path)
    assert back["source"] == str(path) and back["schema_version"] == 1
    block = record_block(back, "encoders")
    assert KEYS <= set(block) and block["source"] == str(path)
    assert block["held_out_units"]["n"] == 5 and set(block["baselines"]) == {
        "random", "name_heuristic", "final_loss", "loo_best_metric"}
    assert record_block(back, "classifiers")["metric"] == "nuclear_norm_accuracy"
    assert record_block(back, "embeddings", "no such kind")["board"] == "encoders"
    assert record_block(None, "encoders") is None
    json.loads(path.read_text())  # strict JSON: no NaN


def test_bad_files_name_the_file(tmp_path):
    p = tmp_path / "r.json"
    p.write_text("{not json")
    with pytest.raises(ValueError, match="r.json"):
        load_record(p)
    p.write_text(json.dumps({"schema_version": 7, "boards": {}}))
    with pytest.raises(ValueError, match="schema_version"):
        load_record(p)
    with pytest.raises(FileNotFoundError):
        load_record(tmp_path / "missing.json")


def test_shipped_record_is_a_record_or_none():
    shipped = load_record(None)
    assert shipped is None or (shipped["source"] == "built-in" and "boards" in shipped)
