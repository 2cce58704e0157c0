"""What RANK and REPORT were computed from (zoorank.stage_inputs): the fingerprints that skip them."""

from __future__ import annotations

import json

import numpy as np
import pandas as pd
import pytest

from zoorank.config.loading import parse_config
from zoorank.stage_inputs import REPORT_INPUTS, frame_digest
from zoorank.store import Store
from zoorank.store.schema import METRICS_COLUMNS


def test_frame_digest_ignores_row_order_and_sees_every_value_and_column():
    frame = pd.DataFrame({"model_id": ["a", "b", "c"], "value": [0.1, np.nan, 3.0],
                          "params": ['{"k": 1}', None, "{}"], "other": [1, 2, 3]})
    cols = ["model_id", "value", "params"]
    digest = frame_digest(frame, cols)
    assert frame_digest(frame.iloc[::-1].reset_index(drop=True), cols) == digest
    assert frame_digest(frame.assign(other=[9, 9, 9]), cols) == digest  # not an input column
    changed = frame.copy()
    changed.loc[2, "value"] = 3.0000001
    assert frame_digest(changed, cols) != digest
    assert frame_digest(frame.assign(value=[0.1, 0.0, 3.0]), cols) != digest  # NaN is a value
    assert frame_digest(frame.iloc[:2], cols) != digest
    assert frame_digest(frame.iloc[0:0], cols) == frame_digest(None, cols) == "empty"


def _oracle_rows(model_ids) -> pd.DataFrame:
    acc = dict(zip(sorted(model_ids), np.linspace(0.2, 0.9, len(model_ids))))
    return pd.DataFrame([
        {"model_id": m, "dataset": "digits", "metric": "knn_accuracy", "value": float(acc[m]),
         "params": json.dumps({"k": 20}), "n": 150, "dim": 24, "seed": 0,
         "zoorank_version": "test", "fingerprint": f"o-{m}"} for m in model_ids
    ], columns=METRICS_COLUMNS)


@pytest.mark.timeout(300)
def test_a_second_report_with_unchanged_inputs_is_skipped_and_a_new_leaderboard_renders(
        tmp_path, capsys):
    """``zoorank report`` twice: the second says the page is current and renders nothing; after
    RANK commits another leaderboard (another rank setting) the page is rendered again."""
    from rank_fixtures import config_dict, write_store

    from zoorank import pipeline
    from zoorank.rank import write_rank_outputs
    from zoorank.zoo import resolve_models

    models = write_store(str(tmp_path))
    config = parse_config(config_dict(str(tmp_path), oracle={"knn": True}))
    store = Store(config.store)
    oracle = _oracle_rows(models)
    store.write_parquet("oracle", oracle)
    write_rank_outputs(config, store, resolve_models(config), store.read_metrics(), oracle,
                       show=False)
    pipeline.run_report(config, check=False)
    first = capsys.readouterr().out
    assert "plots)" in first and "is current" not in first
    recorded = json.loads((tmp_path / REPORT_INPUTS).read_text())["fingerprint"]
    page = tmp_path / "report" / "index.html"
    stamp = page.stat().st_mtime_ns

    pipeline.run_report(config, check=False)
    second = capsys.readouterr().out
    # (a plain console folds lines at 100 columns, so the path may span two)
    assert f"report:{page}iscurrent(inputsunchanged):notre-rendered" in "".join(second.split())
    assert "plots)" not in second  # the report stage did not run
    assert "zoorank leaderboard" in second  # the leaderboard is still printed
    assert page.stat().st_mtime_ns == stamp

    # another rank setting: RANK commits another leaderboard and agreement table
    other = config.model_copy(update={"rank": config.rank.model_copy(update={"top_k": 2})})
    write_rank_outputs(other, store, resolve_models(other), store.read_metrics(), oracle,
                       show=False)
    pipeline.run_report(other, check=False)
    third = capsys.readouterr().out
    assert "plots)" in third and "is current" not in third
    assert json.loads((tmp_path / REPORT_INPUTS).read_text())["fingerprint"] != recorded

    # a deleted page is rendered again even though its inputs are unchanged
    page.unlink()
    pipeline.run_report(other, check=False)
    assert "plots)" in capsys.readouterr().out and page.is_file()
