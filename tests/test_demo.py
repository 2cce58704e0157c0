"""`zoorank demo` at a reduced size: a real SSL zoo trained with Ray Tune, then ranked end to end."""

from __future__ import annotations

import subprocess
import sys

import pandas as pd
import pytest
import yaml

from zoorank.demo import SIZES
from zoorank.store import Store


@pytest.mark.slow
@pytest.mark.timeout(900)
def test_tiny_demo_trains_a_zoo_and_ranks_it_with_the_oracle(tmp_path, ray_session, capsys):
    from zoorank.demo import run_demo

    size = SIZES["tiny"]
    result = run_demo(out=str(tmp_path / "demo"), size="tiny")
    printed = capsys.readouterr().out
    _check_the_decision(result, printed)
    zoo = yaml.safe_load(open(f"{result['zoo']}/zoo.yaml"))
    expected = len(size.methods) * len(size.lrs) * len(size.seeds)
    assert len(zoo) == expected
    assert {m["family"] for m in zoo} == set(size.methods)

    store = Store(result["store"])
    board = store.read_frame("leaderboard")
    assert len(board) == expected and board["rank"].tolist() == sorted(board["rank"])
    manifest = store.read_manifest()
    assert set(manifest["status"]) == {"done"}
    # every configuration is a seed ensemble, so each group got its reliability table
    groups = {m["group"] for m in zoo}
    assert len(groups) == expected // len(size.seeds)
    assert store.list_files("reliability/digits", suffix=".parquet") == sorted(f"{g}.parquet" for g in groups)
    oracle = store.read_frame("oracle")
    assert {"knn_accuracy", "linear_probe_accuracy"} <= set(oracle["metric"])
    agreement = result["agreement"]
    assert isinstance(agreement, pd.DataFrame) and not agreement.empty
    assert agreement["kendall_tau"].dropna().between(-1, 1).all()
    html = open(result["report"]).read()
    assert all(m["id"] in html for m in zoo)
    # the few-label oracle: every (score, k, seed) cell of every model, and the label-budget curve
    cells = oracle[oracle["metric"].str.contains(":k")]
    assert len(cells) == expected * 4 * 2 * 2  # 4 scores × k in (5, 10) × 2 seeds
    agree = store.read_frame("agreement")
    curve = agree[agree["labels_per_class"].notna() & (agree["budget_seed"] == "mean")]
    assert set(curve["metric"]) == {"logme", "h_score", "nleep", "gbc"}
    assert set(curve["labels_per_class"]) == {5.0, 10.0}
    assert "budget-digits-knn_accuracy.png" in html and "labels/class" in html
    assert not result["agreement"]["metric"].isin(["logme", "h_score", "nleep", "gbc"]).any()

    # run.yaml is the config that made the store: scoring with it again finds nothing to do

    from zoorank.config.loading import load_config
    from zoorank.score import run_score

    config = load_config(result["config"])
    assert config.store == result["store"]
    version = store.table_version("metrics")
    run_score(config)
    assert store.table_version("metrics") == version  # no new commit

    # dropping a metric from the config drops it from the leaderboard (its rows are stale now)
    from zoorank.cli import main

    raw = yaml.safe_load(open(result["config"]))
    from zoorank.config import DEFAULT_METRICS

    raw["metrics"] = [m for m in raw.get("metrics", DEFAULT_METRICS) if m != "clid"]
    raw["rank"] = {k: v for k, v in raw.get("rank", {}).items() if k != "primary_metric"}
    dropped = tmp_path / "no-clid.yaml"
    dropped.write_text(yaml.safe_dump(raw))
    assert main(["rank", str(dropped)]) == 0
    board = store.read_frame("leaderboard")
    assert not [c for c in board.columns if "clid" in c]


def _check_the_decision(result: dict, printed: str) -> None:
    """After the demo, decision.json names the pick (leaderboard.csv's first unflagged row, with
    its checkpoint from the zoo), the shortlist and its record's fields, every documented key;
    the report's first heading names the pick; the console ends with the verdict."""
    import json
    import re
    from pathlib import Path

    from decision_schema import NESTED, documented_keys

    from zoorank.decide.leaderboard import decision_lines

    store = Path(result["store"])
    doc = json.loads((store / "decision.json").read_text())
    assert doc == result["decision"]
    documented = documented_keys()
    assert set(doc) == documented[""]
    for parent in NESTED:
        assert set(doc[parent]) == documented[parent], parent
    csv = pd.read_csv(store / "leaderboard.csv").sort_values("rank", kind="stable")
    first = csv[csv["rank"].notna() & (csv["flags"].fillna("") == "")].iloc[0]
    assert doc["pick"]["model_id"] == first["model_id"]
    zoo = {m["id"]: m for m in yaml.safe_load(open(f"{result['zoo']}/zoo.yaml"))}
    # zoo.yaml names checkpoints relative to its folder; decision.json the file itself
    assert doc["pick"]["checkpoint"] == str(Path(result["zoo"]) /
                                            zoo[first["model_id"]]["checkpoint"])
    short = doc["shortlist"]
    assert short["models"] and short["models"] == list(csv["model_id"][:len(short["models"])])
    assert {"hits", "zoos", "hit_rate", "held_out_zoos"} <= set(short)
    # the report's first heading names the pick
    page = Path(result["report"]).read_text()
    assert re.search(r"<h([1-6])[^>]*>(.*?)</h\1>", page).group(2) == \
        f"Pick: {doc['pick']['model_id']}"
    # the verdict is the console's last lines, the run's config in the next step, ≤ 8 lines
    verdict = decision_lines(doc, result["report"], result["config"], str(store))
    # the pick, its checkpoint on its own line, the shortlist, the record and its baselines ...
    assert verdict[1] == f"Checkpoint: {doc['pick']['checkpoint']}" and len(verdict) <= 14
    tail = "".join(printed.split())
    assert tail.endswith("".join("".join(verdict).split()))  # wrapped or not, in this order
    # digits has a label for every image: nothing to ask (`zoorank ask` would exit 2), and the
    # next step still names the run's config
    assert "Next step: none (every image of digits already has a label)" in \
        " ".join(printed.split())
    assert doc["next_step"]["command"] is None
    assert doc["next_step"]["config"] == result["config"]


def test_demo_on_cifar10_without_data_exits_2_naming_the_option(tmp_path):
    proc = subprocess.run([sys.executable, "-m", "zoorank", "demo", "--dataset", "cifar10",
                           "--out", str(tmp_path)], capture_output=True, text=True, timeout=120)
    assert proc.returncode == 2
    assert "--data" in proc.stderr and "Traceback" not in proc.stderr
