"""decision.json (zoorank.decide.verdict) as RANK writes it on a small real store (the hand-written
digits store of ``rank_fixtures``, ranked without Ray), against its documented schema and against
values derived here from leaderboard.csv; the console verdict's line budget."""

from __future__ import annotations

import json
import math
from pathlib import Path

import numpy as np
import pandas as pd
import pytest
from decision_schema import NESTED, documented_keys

from zoorank.config.loading import parse_config
from zoorank.store import Store


@pytest.fixture(scope="module")
def ranked(tmp_path_factory):
    """A decided store whose models have checkpoint files; RANK's outputs written (no Ray)."""
    from decision_fixtures import write_fold_and_health_rows
    from rank_fixtures import config_dict, oracle_rows, stamp_fingerprints, write_store

    from zoorank.rank import write_rank_outputs
    from zoorank.zoo import resolve_models

    root = tmp_path_factory.mktemp("verdict-store")
    models = write_store(str(root))
    weights = tmp_path_factory.mktemp("weights")
    raw = config_dict(str(root), oracle={"knn": True})
    for m in raw["models"]:
        path = weights / f"{m['id']}.safetensors"
        path.write_bytes(m["id"].encode())  # the digest only: nothing loads it here
        m["checkpoint"] = str(path)
    config = parse_config(raw)
    store = Store(config.store)
    stamp_fingerprints(config, store)
    write_fold_and_health_rows(store, config)
    oracle = oracle_rows(models)
    store.write_parquet("oracle", oracle)
    write_rank_outputs(config, store, resolve_models(config), store.read_metrics(), oracle,
                       show=False)
    return root, config, store, oracle


def _doc(root: Path) -> dict:
    return json.loads((root / "decision.json").read_text())


def _copy_of(ranked, tmp_path: Path):
    """The ranked store copied under ``tmp_path``: (its config, its Store, the oracle rows), for a
    test that writes to it."""
    import shutil

    root, config, _, oracle = ranked
    copy = tmp_path / "store"
    shutil.copytree(root, copy)
    return config.model_copy(update={"store": str(copy)}), Store(str(copy)), oracle


def _rank_inputs(config, catalog):
    """RANK's inputs for the store's metrics alone (no score, fold, health or reliability rows)."""
    from zoorank.catalog.stage_inputs import dataset_labels, rank_inputs

    empty = pd.DataFrame()
    return rank_inputs(config, catalog.models, empty, empty, empty, empty, empty,
                       dataset_labels(catalog), [])


def test_decision_json_holds_every_documented_key_and_nothing_undocumented(ranked):
    root = ranked[0]
    doc, documented = _doc(root), documented_keys()
    assert set(doc) == documented[""]
    for parent in NESTED:
        assert set(doc[parent]) == documented[parent], parent
    assert doc["schema_version"] == 1 and doc["few_label"] == {}
    assert isinstance(doc["caveats"], list) and all(isinstance(c, str) for c in doc["caveats"])
    # strict JSON: no NaN anywhere (json.loads accepts it; a strict parser does not)
    json.loads((root / "decision.json").read_text(), parse_constant=lambda c: pytest.fail(c))


def test_the_pick_is_the_first_unflagged_row_of_leaderboard_csv_with_its_checkpoint(ranked):
    root, config = ranked[0], ranked[1]
    doc = _doc(root)
    csv = pd.read_csv(root / "leaderboard.csv").sort_values("rank", kind="stable")
    ranked_rows = csv[csv["rank"].notna()]
    first = ranked_rows[ranked_rows["flags"].fillna("") == ""].iloc[0]
    pick = doc["pick"]
    assert pick["model_id"] == first["model_id"]
    assert pick["metric"] == "rankme" and pick["dataset"] == "digits"  # the config's primary
    assert math.isclose(pick["value"], first["digits/rankme"], rel_tol=1e-9)
    assert pick["checkpoint"] == next(m["checkpoint"] for m in
                                      [m.model_dump() for m in config.models]
                                      if m["id"] == pick["model_id"])
    # the constant model is flagged and never the pick
    assert "collapsed" in set(csv.loc[csv["flags"].fillna("") != "", "model_id"])


def test_the_shortlist_is_the_rule_applied_to_the_board(ranked):
    doc = _doc(ranked[0])
    csv = pd.read_csv(ranked[0] / "leaderboard.csv")
    order = list(csv[csv["rank"].notna()].sort_values("rank", kind="stable")["model_id"])
    short = doc["shortlist"]
    # any rank or band rule on the board's order holds a prefix of it
    assert short["models"] == order[:len(short["models"])] and short["models"]
    if short["rule"]["kind"] == "rank_fraction":
        # ⌈f·n⌉ of the n models without a blocking flag, never more than half of them
        blocking = {"non_finite", "collapsed", "dim_collapsed"}
        ranked_flags = csv[csv["rank"].notna()]["flags"].fillna("").astype(str)
        n = sum(not ({f.split(":")[-1] for f in fl.split(",") if f} & blocking)
                for fl in ranked_flags)
        cap = max(1, math.floor(short["rule"].get("max_fraction", 1.0) * n))
        assert len(short["models"]) == min(cap, max(1, math.ceil(n * short["rule"]["fraction"])))
    assert doc["expected_regret_pp"] == short["pick_regret_pp"]


def test_the_disagreement_line_counts_the_metrics_best_models(ranked):
    from zoorank.decide.leaderboard import read_leaderboard_settings

    doc, store = _doc(ranked[0]), ranked[2]
    consensus = read_leaderboard_settings(store)["decision"]["consensus"]["digits"]
    bests = list(consensus["best"].values())
    on_pick = sum(b == doc["pick"]["model_id"] for b in bests)
    in_short = sum(b in doc["shortlist"]["models"] for b in bests)
    assert doc["disagreement"].startswith(
        f"Label-free metrics: {on_pick} of {len(bests)} put the pick first, {in_short} a "
        f"shortlisted model; Kendall's W {consensus['kendall_w']:.2f} (")
    assert "\n" not in doc["disagreement"]


def test_next_step_asks_for_the_measured_embedding_budget(ranked):
    from zoorank.decide.next_step import LABELS_TO_SETTLE

    step = _doc(ranked[0])["next_step"]
    # an embedding zoo: benchmarks/results/active_labels.md measured 200 labels
    assert LABELS_TO_SETTLE["encoder"]["budget"] == 200
    assert step["kind"] == "encoder" and step["budget"] == 200
    assert step["command"] == "zoorank ask CONFIG --budget 200"  # built without a config path
    assert step["config"] is None
    assert "66%" in step["basis"] and step["source"] == "benchmarks/results/active_labels.md"


def test_one_level_for_the_top_set_in_decision_json_console_and_report(ranked, capsys):
    """The console once said 95% where the report said 94%: both read the one measured level."""
    from zoorank.decide.leaderboard import print_verdict
    from zoorank.decide.verdict import top_set_claim
    from zoorank.stats.uncertainty import MEASURED_SETTINGS, measured_coverage

    root, config = ranked[0], ranked[1]
    doc = _doc(root)
    at_defaults = (config.rank.confidence, config.score.resample_folds,
                   config.score.resample_fraction) == tuple(MEASURED_SETTINGS.values())
    level = f"{measured_coverage():.0%}" if at_defaults else f"nominal {config.rank.confidence:.0%}"
    assert doc["top_set"]["level"] == level
    assert top_set_claim({"confidence": 0.95, "folds": 8, "fold_fraction": 0.5})["level"] == \
        f"{measured_coverage():.0%}"
    print_verdict(doc)
    out = capsys.readouterr().out
    assert f"a {level} set" in out and "95% confidence" not in out


def test_console_verdict_gives_the_whole_path_and_every_shortlisted_id(ranked, capsys):
    """Within 100 columns but for a path or id that is longer, never cut: the checkpoint on a line
    of its own, every shortlisted id (wrapped), the few-label pick first once labels exist."""
    from zoorank.console import PLAIN_WIDTH
    from zoorank.decide.leaderboard import decision_lines, print_verdict
    from zoorank.decide.verdict import verdict_entry

    doc = _doc(ranked[0])
    print_verdict(doc, report="/s/report/index.html", config="run.yaml", store="/s")
    lines = capsys.readouterr().out.splitlines()
    assert all(len(line) <= PLAIN_WIDTH for line in lines), lines
    assert lines[0].startswith(f"Pick: {doc['pick']['model_id']} (rankme ")
    assert lines[1] == f"Checkpoint: {doc['pick']['checkpoint'] or 'none (the architecture alone, no file)'}"
    assert lines[-1] == "Checkpoint and verdict, as JSON: /s/decision.json"
    assert any(line.startswith("Next step: zoorank ask run.yaml --budget 200 (measured: ")
               for line in lines)
    # a long checkpoint path stands whole on its own line, whatever the width
    path = "s3://bucket/" + "/".join(f"sweep-{i:03d}" for i in range(30)) + "/epoch=9-step=99.ckpt"
    doc["pick"]["checkpoint"] = path
    assert f"Checkpoint: {path}" in decision_lines(doc)
    # a hundred shortlisted models: every id printed, wrapped within the width, none cut
    ids = [f"lr{i:04d}-checkpoints-epoch_{i % 7}-step_{i * 13}" for i in range(100)]
    doc["shortlist"]["models"] = ids
    shown = decision_lines(doc)
    start = next(i for i, line in enumerate(shown) if line.startswith("Shortlist"))
    block = [shown[start]] + [line for line in shown[start + 1:start + 80] if line.startswith("  ")]
    assert all(len(line) <= PLAIN_WIDTH for line in block)
    printed = [t.strip(",") for line in block for t in line.split()]
    assert all(i in printed for i in ids) and "report" not in " ".join(block)
    # after `zoorank label`: the few-label pick first, with p(best | labels), the label-free beside
    doc["few_label"] = {"digits": {"model_id": "proj-b", "p_best": 0.81, "labels": 60}}
    doc["verdict"] = verdict_entry(doc["pick"], doc["few_label"])
    first = decision_lines(doc)[0]
    assert first.startswith("Pick: proj-b (few-label: p(best | labels) 0.81 after 60 labels on "
                            "digits); label-free pick: " + doc["pick"]["model_id"]), first


def test_label_keeps_its_few_label_pick_when_rank_rewrites_the_file(ranked, tmp_path):
    from zoorank.decide.verdict import read_decision, update_few_label
    from zoorank.rank import write_rank_outputs
    from zoorank.zoo import resolve_models

    config, store, oracle = _copy_of(ranked, tmp_path)
    few = {"model_id": "proj-b", "p_best": 0.82, "labels": 60}
    doc = update_few_label(store, "digits", few)
    assert doc["few_label"]["digits"]["model_id"] == "proj-b"
    # 60 labels given back count against the measured 200
    assert doc["next_step"]["budget"] == 140 and doc["next_step"]["labelled"] == 60
    write_rank_outputs(config, store, resolve_models(config), store.read_metrics(), oracle,
                       show=False)
    again = read_decision(store)
    assert again["few_label"]["digits"]["p_best"] == 0.82
    assert again["next_step"]["command"] == "zoorank ask CONFIG --budget 140"
    # every label of the measured budget given back: no more asking
    spent = update_few_label(store, "digits", {**few, "labels": 250})
    assert spent["next_step"]["command"] is None and "250 labels given back" in \
        spent["next_step"]["basis"]


def test_few_label_before_any_rank_is_not_recorded(tmp_path):
    from zoorank.decide.verdict import update_few_label

    assert update_few_label(Store(str(tmp_path)), "digits", {"model_id": "a"}) is None
    assert not (tmp_path / "decision.json").exists()


def test_rank_recomputes_when_decision_json_is_missing(ranked, tmp_path):
    """A store ranked before decision.json existed gets it on the next rank, not a skip."""
    from zoorank.catalog import build_catalog
    from zoorank.rank import _unchanged, write_rank_outputs

    config, store, oracle = _copy_of(ranked, tmp_path)
    catalog = build_catalog(config, store=store)
    inputs = _rank_inputs(config, catalog)
    write_rank_outputs(config, store, catalog.models, store.read_metrics(), oracle, show=False,
                       inputs=inputs)
    assert _unchanged(store, inputs, show=False) is not None  # the same inputs: skipped
    (tmp_path / "store" / "decision.json").unlink()
    assert _unchanged(store, inputs, show=False) is None


def test_a_pick_passes_over_flagged_models_and_says_so():
    from zoorank.decide.verdict import build_decision

    board = pd.DataFrame({"model_id": ["flat", "dup", "good", "next"],
                          "rank": [1.0, 2.0, 3.0, 4.0], "flags": ["collapsed", "duplicates", "", ""],
                          "digits/rankme": [9.0, 8.0, 7.0, 6.0], "signal": "embedding"})
    settings = {"ordered_by": "rankme", "primary_metric": {"digits": "rankme"},
                "decision": {"top_set": ["good"], "confidence": 0.9}}
    doc = build_decision(board, settings, {}, "/s")
    assert doc["pick"]["model_id"] == "good" and doc["pick"]["value"] == 7.0
    assert doc["pick"]["checkpoint"] is None  # no zoo entry given
    assert any("flat, dup ranked above it" in c for c in doc["caveats"])
    assert doc["top_set"]["level"] == "nominal 90%"
    # every model flagged: the first without a blocking flag
    board["flags"] = ["collapsed", "duplicates", "duplicates", "duplicates"]
    assert build_decision(board, settings, {}, "/s")["pick"]["model_id"] == "dup"
    # nothing ranked: no pick, no next step
    board["rank"] = np.nan
    empty = build_decision(board, settings, {}, "/s")
    assert empty["pick"] is None and empty["next_step"] is None


def test_the_next_step_names_the_config_path_the_command_read_and_quotes_it():
    from zoorank.decide.next_step import CONFIG, config_path, next_step

    assert next_step("encoder")["command"] == f"zoorank ask {CONFIG} --budget 200"
    assert next_step("encoder")["config"] is None
    with config_path("runs/zoo.yaml"):
        step = next_step("encoder", labelled=60)
    assert step["command"] == "zoorank ask runs/zoo.yaml --budget 140"
    assert step["config"] == "runs/zoo.yaml"
    # a path a shell would split is quoted, so the printed command runs as pasted
    with config_path("my runs/zoo.yaml"):
        assert next_step("classifier")["command"] == "zoorank ask 'my runs/zoo.yaml' --budget 220"
    assert next_step("encoder")["config"] is None  # the path does not outlive its command


def test_a_skipped_rank_renames_the_config_in_the_next_step_and_writes_no_table(ranked, tmp_path):
    """RANK run through one path to the config, then through another: the second RANK is skipped
    (the path is no input of RANK), the leaderboard keeps its version, and decision.json's next
    step names the second path; nothing else in it changes. `zoorank label` keeps the path."""
    from zoorank.catalog import build_catalog
    from zoorank.decide.next_step import config_path
    from zoorank.decide.verdict import read_decision, update_few_label
    from zoorank.rank import _unchanged, write_rank_outputs

    config, store, oracle = _copy_of(ranked, tmp_path)
    catalog = build_catalog(config, store=store)

    def inputs():
        return _rank_inputs(config, catalog)

    with config_path("a/zoo.yaml"):
        first = inputs()
        write_rank_outputs(config, store, catalog.models, store.read_metrics(), oracle,
                           show=False, inputs=first)
    written = read_decision(store)
    assert written["next_step"]["command"] == "zoorank ask a/zoo.yaml --budget 200"
    assert written["next_step"]["config"] == "a/zoo.yaml"
    version = store.table_version("leaderboard")
    with config_path("/abs/b/zoo.yaml"):
        assert inputs().fingerprint == first.fingerprint
        assert _unchanged(store, inputs(), show=False) is not None  # skipped
    assert store.table_version("leaderboard") == version
    renamed = read_decision(store)
    assert renamed["next_step"]["command"] == "zoorank ask /abs/b/zoo.yaml --budget 200"
    assert {k: v for k, v in renamed.items() if k != "next_step"} == \
        {k: v for k, v in written.items() if k != "next_step"}
    # labels given back through the API (no path known) keep the stored path
    doc = update_few_label(store, "digits", {"model_id": "proj-b", "p_best": 0.8, "labels": 20})
    assert doc["next_step"]["command"] == "zoorank ask /abs/b/zoo.yaml --budget 180"


def test_the_next_step_never_asks_for_more_images_than_are_left_without_a_label():
    from zoorank.decide.next_step import next_step

    assert next_step("encoder", unlabelled=None)["budget"] == 200  # not known: the measured one
    assert next_step("encoder", unlabelled=500)["budget"] == 200
    assert next_step("encoder", unlabelled=50)["budget"] == 50
    assert next_step("encoder", labelled=180, unlabelled=50)["budget"] == 20
    done = next_step("classifier", unlabelled=0, dataset="digits")
    assert done["command"] is None and done["budget"] is None and done["unlabelled"] == 0
    assert done["short"] == "every image of digits already has a label"


def test_on_a_dataset_whose_every_image_has_a_label_the_verdict_asks_for_none(ranked, capsys):
    """scikit-learn's digits carry a label for every image: `zoorank ask` would have nothing to
    ask (it exits 2), so the decision, the console and the report's card say so instead."""
    from sklearn.datasets import load_digits

    from zoorank.catalog import build_catalog
    from zoorank.decide.leaderboard import print_verdict, read_leaderboard
    from zoorank.decide.verdict import build_decision
    from zoorank.report.decision_screen import decision_section
    from zoorank.report.page import render_page

    root, config, store, _ = ranked
    unlabelled = build_catalog(config).unlabelled()
    limit = config.datasets[0].limit
    assert len(load_digits().target[:limit]) == limit and unlabelled == {"digits": 0}
    board, settings = read_leaderboard(store)
    doc = build_decision(board, settings, {}, "/s", unlabelled=unlabelled)
    assert doc["next_step"]["command"] is None and doc["next_step"]["unlabelled"] == 0
    print_verdict(doc)
    assert "Next step: none (every image of digits already has a label)" in \
        capsys.readouterr().out.splitlines()
    html = render_page("r", [decision_section(board, settings, pd.DataFrame(), None, doc)])
    assert "<b>Next step:</b> none: every image of digits already has a label.</p>" in html


def test_labels_given_back_count_once_against_the_budget_and_keep_the_unlabelled_bound(tmp_path):
    """RANK after a merge counted 180 of 240 images still without a label; recording the
    few-label pick of those 60 labels then asks for 200 - 60 = 140 (not fewer: the 60 are not
    taken off the 180 a second time)."""
    from zoorank.decide.next_step import next_step
    from zoorank.decide.verdict import KEYS, update_few_label, write_decision

    store = Store(str(tmp_path))
    write_decision(store, {**dict.fromkeys(KEYS), "pick": {"model_id": "a", "dataset": "photos"},
                           "few_label": {},
                           "next_step": next_step("encoder", 0, "zoo.yaml", 180, "photos")})
    doc = update_few_label(store, "photos", {"model_id": "a", "p_best": 0.4, "labels": 60})
    assert doc["next_step"]["budget"] == 140 and doc["next_step"]["unlabelled"] == 180
    assert doc["next_step"]["command"] == "zoorank ask zoo.yaml --budget 140"


def test_the_card_leads_with_the_few_label_pick_and_lists_the_failed_models(ranked):
    from zoorank.decide.verdict import verdict_entry
    from zoorank.report.decision_screen import card_context

    doc = _doc(ranked[0])
    few = {"digits": {"model_id": "proj-b", "p_best": 0.8123, "labels": 60}}
    doc = {**doc, "few_label": few, "verdict": verdict_entry(doc["pick"], few)}
    board = pd.read_csv(ranked[0] / "leaderboard.csv")
    card = card_context(doc, board, {"primary_metric": {"digits": "rankme"}})
    assert card["first_few"]["model_id"] == "proj-b" and card["first_few"]["p_best_text"] == "0.81"
    assert card["pick"]["model_id"] == doc["pick"]["model_id"]  # the label-free one beside it
    failed = {f["model_id"] for f in doc["failed"]}
    assert failed and all(m in " ".join(card["failure_lines"]) for m in failed)
