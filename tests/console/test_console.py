"""User-facing output off a terminal: plain text within 100 columns, each verdict once, a tie is
never called an overtake, and Ray's own start-up notes and warnings only with ``--debug``."""

from __future__ import annotations

import os
import re
import subprocess
import sys
from pathlib import Path

import numpy as np
import pandas as pd
import pytest
import yaml

from zoorank.console import PLAIN_WIDTH
from zoorank.oracle import budget

BOX = set("─│┌┐└┘├┤┬┴┼━┃┏┓┗┛╭╮╰╯═║╔╗╚╝")


def _tie_frame(tau_free: float, tau_budget: float) -> pd.DataFrame:
    rows = [{"metric": "coding_rate", "oracle_metric": "knn_accuracy", "dataset": "d",
             "family": "all", "kendall_tau": tau_free, "labels_per_class": np.nan,
             "budget_seed": None}]
    rows += [{"metric": "logme", "oracle_metric": "knn_accuracy", "dataset": "d", "family": "all",
              "kendall_tau": t, "labels_per_class": float(k), "budget_seed": "mean"}
             for k, t in ((5, tau_budget), (10, tau_budget - 0.2))]
    return pd.DataFrame(rows)


def test_a_tie_at_the_printed_precision_is_not_an_overtake():
    lines = budget.crossover_lines(budget.crossovers(_tie_frame(0.3810, 0.3812)))
    assert len(lines) == 1 and "does not overtake" in lines[0]
    lines = budget.crossover_lines(budget.crossovers(_tie_frame(0.3810, 0.3912)))
    assert "overtakes coding_rate (τ=+0.38) at 5 labels/class (τ=+0.39)" in lines[0]


#: a line Ray prints, not zoorank: its log format ("2026-01-01 12:00:00,123\tWARNING file.py:85
#: -- ..."), forwarded worker/raylet output ("(raylet) ...", "(embed_slice pid=1) ..."), and the
#: notes seen on a plain run (start-up, token auth, usage stats, Ray Data's progress-bar note).
RAY_LINE = re.compile(
    r"^\d{4}-\d\d-\d\d \d\d:\d\d:\d\d,\d+\s+(DEBUG|INFO|WARNING|ERROR)\s|^\((raylet|\w+ pid=|pid=)"
    r"|Started a local Ray instance|Token authentication|Progress bars disabled|usage stats"
    r"|[Mm]etrics exporter|ray\.data|ray/_private", re.MULTILINE)


def test_the_ray_line_pattern_matches_what_ray_prints():
    ray_lines = [
        "2026-11-24 11:09:19,519\tWARNING authentication_token_setup.py:85 -- Token authentication "
        "is enabled for this Ray cluster.",
        "2026-11-24 11:29:52,451\tINFO worker.py:2038 -- Started a local Ray instance.",
        "(raylet) [2026-11-24 11:29:52] WARNING: the object store is using /tmp",
        "(embed_slice pid=4242) UserWarning: something",
    ]
    assert all(RAY_LINE.search(line) for line in ray_lines)
    assert not RAY_LINE.search("failed b (digits/clean): CheckpointError: cannot import 'x'")


@pytest.mark.parametrize(("tau_free", "tau_budget", "crossover"), [
    (0.55, 0.55, False),   # equal: not a crossover
    (0.55, 0.549, False),  # below
    (0.55, 0.56, True),    # strictly above at the printed precision
])
def test_a_crossover_needs_a_score_strictly_above_the_best_label_free_tau(
        tau_free, tau_budget, crossover):
    table = budget.crossovers(_tie_frame(tau_free, tau_budget)).set_index("score")
    found = table.loc["logme", "crossover_labels_per_class"]
    assert (found == 5) if crossover else np.isnan(found)
    line, = budget.crossover_lines(budget.crossovers(_tie_frame(tau_free, tau_budget)))
    assert ("overtakes" in line and "does not" not in line) == crossover, line


def _folded_cells(lines: list[str], start: str) -> list[str]:
    """Every text that begins with ``start``, read down its column: a table cell folded by rich
    continues on the next lines at the same offset, with the columns to its left blank."""
    cells = []
    for i, line in enumerate(lines):
        at = line.find(start)
        if at < 0:
            continue
        cell = line[at:].split("  ")[0]
        for more in lines[i + 1:]:
            if more[:at].strip() or len(more) <= at or more[at] == " ":
                break
            cell += more[at:].split("  ")[0]
        cells.append(cell.strip())
    return cells


LONG = "sweep-resnet18-simclr-lr0.0030-wd0.0500-temperature0.20-batch512-epoch0100-seed"


@pytest.mark.timeout(600)
def test_piped_zoorank_run_has_no_line_over_100_columns_and_no_cut_border(tmp_path, e2e_zoo):
    import e2e_models as zoo

    files = e2e_zoo

    def model(key: str, model_id: str, **extra) -> dict:
        return {"id": model_id, "source": "torchscript", "name": files[key], "trust_checkpoint": True,
                "input_size": zoo.INPUT_SIZE, "interpolation": "bilinear", "crop_pct": 1.0,
                **extra}

    config = {
        "store": str(tmp_path / "store"), "seed": 0,
        "datasets": [{"name": "digits", "source": "sklearn_digits", "limit": 200}],
        "models": [model("trained", f"{LONG}1", family="cnn"),
                   model("random", f"{LONG}2", family="cnn"),
                   model("collapsed", "collapsed", family="cnn"),
                   model("pixels", "pixels"),
                   model("rot-0", "rot-0", group="rotated"),
                   model("rot-1", "rot-1", group="rotated")],
        "metrics": ["rankme", "uniformity", "twonn_id", "nc"],
        "score": {"nc_k": 10, "nc_reference_size": 60},
        "oracle": {"knn": True, "transferability": ["logme"], "labels_per_class": [2, 5],
                   "label_budget_seeds": 1},
        "rank": {"primary_metric": "rankme", "bootstrap": 50},
    }
    path = tmp_path / "run.yaml"
    path.write_text(yaml.safe_dump(config))
    env = {**os.environ, "RAY_TMPDIR": os.environ.get("RAY_TMPDIR", "/tmp/ray-zoorank-tests"),
           "COLUMNS": "250"}  # a wide COLUMNS must not widen piped output
    env.pop("ZOORANK_DEBUG", None)  # the plain run: no --debug from the environment either
    out = subprocess.run(f"{sys.executable} -m zoorank run {path} | cat", shell=True, env=env,
                         capture_output=True, text=True, timeout=540,
                         cwd=Path(__file__).resolve().parents[2])
    assert out.returncode == 0, out.stderr[-3000:]
    lines = out.stdout.splitlines()
    assert lines, out.stderr[-2000:]
    too_long = [line for line in lines if len(line) > PLAIN_WIDTH]
    assert not too_long, too_long
    assert not [line for line in lines if set(line) & BOX], "box borders in plain output"
    # the long model ids are printed whole (folded within their table column, not cut with an
    # ellipsis): the leaderboard's model cell, read down its column, is the whole id
    assert f"{LONG}1" in _folded_cells(lines, "sweep-")
    assert "…" not in out.stdout
    # each verdict once
    for marker in ("top set (", "overtake", "The label-free metrics"):
        hits = [line for line in lines if marker in line]
        assert len(hits) == len(set(hits)), hits
    assert sum("top set (" in line for line in lines) == 1
    # Ray's own start-up notes and warnings stay out of a plain run's output (stdout and stderr)
    assert not RAY_LINE.search(out.stdout), RAY_LINE.findall(out.stdout)
    assert not RAY_LINE.search(out.stderr), out.stderr[-3000:]

    # --debug brings them back: a cheap rerun (one model, one more metric: SCORE starts Ray for one
    # task, nothing is embedded)
    config["metrics"] = [*config["metrics"], "alpha_req"]
    config["models"] = config["models"][:1]
    path.write_text(yaml.safe_dump(config))
    debug = subprocess.run(f"{sys.executable} -m zoorank --debug score {path} 2>&1 | cat",
                           shell=True, env=env, capture_output=True, text=True, timeout=300,
                           cwd=Path(__file__).resolve().parents[2])
    assert debug.returncode == 0, debug.stdout[-3000:]
    assert "Started a local Ray instance" in debug.stdout, debug.stdout[-3000:]


def _large_embed_rows(models: int = 1000) -> tuple[pd.DataFrame, set, dict]:
    """A 1,000-model zoo's manifest rows (2 views): 37 failed models (30 corrupt, 6 missing keys,
    1 out of memory), 3 undecodable clean images, the first 500 models cached, 7 recipes."""
    rows, skipped, recipes = [], set(), {}
    for i in range(models):
        mid = f"sweep-{i:04d}"
        error = ("corrupt checkpoint" if i < 30 else "missing keys: fc.weight" if i < 36
                 else "CUDA out of memory" if i == 36 else None)
        for view in ("clean", "simclr"):
            rows.append({"dataset": "digits", "view": view, "model_id": mid,
                         "status": "failed" if error else "done", "error": error,
                         "rows": 0 if error else 100, "dim": None if error else 64,
                         "seconds": 0.5, "bad_images": 3 if view == "clean" else 0})
            if i < 500:
                skipped.add(("digits", view, mid))
        recipes[mid] = f"resize 36 crop 32 recipe-{i % 7}"
    return pd.DataFrame(rows), skipped, recipes


def test_embed_summary_of_a_thousand_models_stays_within_its_line_budget(capsys):
    from zoorank.console.embed_progress import MAX_REASONS_SHOWN, print_summary

    rows, skipped, recipes = _large_embed_rows()
    print_summary(rows, skipped, enabled=True, preprocessing=recipes, where="/s/manifest")
    out = capsys.readouterr().out
    lines = out.splitlines()
    assert len(lines) <= 25, out  # not one line per entry (2,000 entries)
    assert all(len(line) <= PLAIN_WIDTH for line in lines), out
    # counts by status: 37 failed models × 2 views; 500 cached models × 2 views, none failed
    assert lines[0] == ("embed: 2000 entries (1000 models × 2 dataset/views): 1926 done "
                        "(1000 cached), 74 failed"), out
    # failures grouped by reason, most frequent first, a few ids each and "+N more"
    failed = [line for line in lines if line.startswith("failed")]
    assert failed[0].startswith("failed 30 model(s): corrupt checkpoint — sweep-0000, "
                                "sweep-0001, sweep-0002 (+27 more)"), out
    assert failed[1].startswith("failed 6 model(s): missing keys"), out
    assert failed[2].startswith("failed 1 model(s): CUDA out of memory — sweep-0036"), out
    assert "74 of 2000 embeddings failed (recorded in the manifest)" in lines
    assert "digits/clean: skipped 3 undecodable image(s)" in lines
    assert sum(line.startswith("preprocessing of") for line in lines) == MAX_REASONS_SHOWN
    assert f"+{7 - MAX_REASONS_SHOWN} more preprocessing recipes" in out
    assert lines[-1].endswith("the manifest table /s/manifest")


def test_a_small_zoo_keeps_its_embed_table_and_names_each_failed_model(capsys):
    from zoorank.console.embed_progress import print_summary

    rows, skipped, recipes = _large_embed_rows(models=4)
    rows.loc[rows["model_id"] == "sweep-0003", ["status", "error"]] = [
        "failed", "bad <keys>\n" + "x" * 400]  # a multi-line error: one line, cut
    print_summary(rows, skipped, enabled=True, preprocessing=recipes, where="/s/manifest")
    out = capsys.readouterr().out
    assert sum(" sweep-0002 " in f" {line} " for line in out.splitlines()) >= 2  # the table rows
    assert "failed sweep-0003 (digits/clean, digits/simclr): bad <keys>" in out
    flat = out.replace("\n", "")  # rich wraps at 100 columns
    assert "x" * 228 + "…" in flat and "x" * 229 not in flat  # the error cut to 240 characters
    assert "failed sweep-0000 (digits/clean, digits/simclr): corrupt checkpoint" in out


def test_leaderboard_print_of_a_thousand_models_is_the_top_rows_and_where_the_rest_is(capsys):
    from zoorank.decide.leaderboard import print_leaderboard

    n = 1000
    board = pd.DataFrame({"rank": np.arange(1, n + 1, dtype=float), "model_id":
                          [f"sweep-{i:04d}" for i in range(n)], "flags": "",
                          "rank_low": np.arange(1, n + 1.0), "rank_high": np.arange(1, n + 1.0) + 2,
                          "p_best": np.r_[0.6, 0.4, np.zeros(n - 2)],
                          "in_top_set": np.arange(n) < 3, "digits/rankme": np.linspace(50, 1, n)})
    settings = {"ordered_by": "rankme", "primary_metric": {"digits": "rankme"},
                "decision": {"top_set": list(board["model_id"][:3]), "confidence": 0.95}}
    print_leaderboard(board, settings, where="/s")
    lines = capsys.readouterr().out.splitlines()
    assert len(lines) <= 20, lines
    assert sum("sweep-" in line for line in lines) <= 11  # 10 rows + the top-set line
    assert lines[-1] == ("the whole leaderboard (1000 models): /s/leaderboard.csv (and "
                         "leaderboard.md, the report)")


def test_paths_under_the_working_directory_are_shown_relative_to_it(tmp_path, monkeypatch):
    from zoorank.console import shown_path

    monkeypatch.chdir(tmp_path)
    assert shown_path(tmp_path / "zoorank-demo" / "run.yaml") == "zoorank-demo/run.yaml"
    assert shown_path(str(tmp_path / "store" / "decision.json")) == "store/decision.json"
    assert shown_path("store/report/index.html") == "store/report/index.html"
    assert shown_path("/elsewhere/run.yaml") == "/elsewhere/run.yaml"  # outside: as given
    assert shown_path("s3://bucket/store/report/index.html") == \
        "s3://bucket/store/report/index.html"


def test_the_verdict_names_a_store_under_the_working_directory_relative_to_it(
        tmp_path, monkeypatch, capsys):
    from zoorank.decide.leaderboard import print_verdict

    monkeypatch.chdir(tmp_path)
    doc = {"pick": {"model_id": "m", "metric": "rankme", "value": 3.0, "dataset": "d"},
           "shortlist": {"models": ["m"]}, "top_set": {"size": 1, "of": 2, "level": "94%"},
           "next_step": {"command": "zoorank ask CONFIG --budget 200", "budget": 200},
           "caveats": []}
    print_verdict(doc, report=str(tmp_path / "s" / "report" / "index.html"),
                  config="cfg/zoo.yaml", store=str(tmp_path / "s"))
    lines = capsys.readouterr().out.splitlines()
    assert "Next step: zoorank ask cfg/zoo.yaml --budget 200" in lines
    assert lines[-2].endswith(": s/report/index.html")
    assert lines[-1] == "Checkpoint and verdict, as JSON: s/decision.json"
