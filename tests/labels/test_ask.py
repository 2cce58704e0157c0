"""``zoorank ask`` / ``zoorank label`` on a small real store (digits without a label column; see
``labels_fixtures``): the round's files, the page in Chromium, the merge and its checks, and what
the labels change."""

from __future__ import annotations

import csv
import json
import shutil
from pathlib import Path

import numpy as np
import pytest
import yaml
from labels_fixtures import copy_label_store, embeddings, frame_of, reference_knn_accuracy, write_label_store

from zoorank.cli import main


@pytest.fixture(scope="module")
def template(tmp_path_factory):
    root = tmp_path_factory.mktemp("labels-template")
    cfg, truth = write_label_store(str(root))
    return root, cfg, truth


@pytest.fixture
def labelled_store(template, tmp_path):
    """A copy of the template store with its config at ``run.yaml``: (config path, store, truth)."""
    src, cfg, truth = template
    path, cfg = copy_label_store(src, cfg, tmp_path)
    return path, Path(cfg["store"]), truth, cfg


def _asked(store: Path, round_: int) -> list[int]:
    with open(store / "asks" / str(round_) / "to_label.csv") as f:
        return [int(r["sample_id"]) for r in csv.DictReader(f)]


def _write_csv(path: Path, rows: list[tuple]) -> Path:
    with open(path, "w", newline="") as f:
        w = csv.writer(f)
        w.writerow(["sample_id", "label", "source"])
        w.writerows(rows)
    return path


def _table(cfg) -> set[tuple[str, int, str]]:
    t = frame_of(cfg)
    return {(str(d), int(s), str(lab)) for d, s, lab in zip(t["dataset"], t["sample_id"],
                                                           t["label"])}


def test_ask_writes_a_round_of_forty_images_in_three_formats(labelled_store, capsys):
    path, store, _, _ = labelled_store
    assert main(["ask", str(path), "--budget", "40"]) == 0
    out = capsys.readouterr().out
    round_dir = store / "asks" / "1"
    for name in ("to_label.csv", "index.html", "label_studio.json", "label_studio.xml"):
        assert str(round_dir / name) in out
    # the command to run next names the config as it was typed, not a placeholder
    assert f"then: zoorank label {path} {round_dir / 'to_label.csv'}" in out
    with open(round_dir / "to_label.csv") as f:
        rows = list(csv.DictReader(f))
    assert len(rows) == 40 == len({r["sample_id"] for r in rows})
    assert all(r["label"] == "" and "digits.parquet#row=" in r["source"] for r in rows)
    tasks = json.loads((round_dir / "label_studio.json").read_text())
    assert [t["data"]["sample_id"] for t in tasks] == [int(r["sample_id"]) for r in rows]
    assert all(t["data"]["image"].startswith("data:image/png;base64,") for t in tasks)
    assert {t["meta"]["dataset"] for t in tasks} == {"digits"}
    xml = (round_dir / "label_studio.xml").read_text()
    assert xml.count("<Choice ") == 10
    page = (round_dir / "index.html").read_text()
    assert page.count('class="item') == 40 and "http://" not in page and "https://" not in page
    # the cold start spreads over the images: the 40 asked cover most of the 10 classes
    from sklearn.datasets import load_digits

    classes = set(load_digits().target[[int(r["sample_id"]) for r in rows]].tolist())
    assert len(classes) >= 8


@pytest.mark.timeout(240)
def test_the_page_assigns_labels_by_keys_and_its_csv_is_accepted(labelled_store, tmp_path,
                                                                  chromium):
    path, store, truth, cfg = labelled_store
    assert main(["ask", str(path), "--budget", "40"]) == 0
    asked = _asked(store, 1)
    page = chromium.new_page(accept_downloads=True)
    page.goto((store / "asks" / "1" / "index.html").as_uri())
    assert page.locator(".item img").count() == 40
    for sid in asked:  # digit keys: the class's shortcut; the focus moves on by itself
        page.keyboard.press(str(truth[sid]))
    assert page.locator("#progress").inner_text().startswith("40 / 40")
    page.keyboard.press("ArrowLeft")  # the focus stayed on the last image: one back
    page.keyboard.press("Backspace")  # clear the 39th, then set it again by key
    assert page.locator("#progress").inner_text().startswith("39 / 40")
    assert page.locator(".item.current select").input_value() == ""
    page.keyboard.press(str(truth[asked[-2]]))
    with page.expect_download() as info:
        page.click("#save")
    saved = tmp_path / "saved.csv"
    info.value.save_as(saved)
    with open(saved) as f:
        rows = list(csv.DictReader(f))
    assert [(int(r["sample_id"]), r["label"]) for r in rows] == [(s, str(truth[s])) for s in asked]
    assert main(["label", str(path), str(saved), "--no-rank"]) == 0
    assert _table(cfg) == {("digits", s, str(truth[s])) for s in asked}


def test_a_label_studio_export_of_the_same_labels_gives_the_same_store(labelled_store, tmp_path):
    path, store, truth, cfg = labelled_store
    assert main(["ask", str(path), "--budget", "40"]) == 0
    asked = _asked(store, 1)
    filled = _write_csv(tmp_path / "filled.csv", [(s, truth[s], "") for s in asked])
    tasks = json.loads((store / "asks" / "1" / "label_studio.json").read_text())
    export = [{"id": i + 1, "data": t["data"], "meta": t["meta"], "annotations": [
        {"id": i + 1, "was_cancelled": False, "result": [
            {"from_name": "label", "to_name": "image", "type": "choices",
             "value": {"choices": [str(truth[t["data"]["sample_id"]])]}}]}]}
        for i, t in enumerate(tasks)]
    (tmp_path / "export.json").write_text(json.dumps(export))
    twin = tmp_path / "twin"
    shutil.copytree(store, twin)
    twin_cfg = {**cfg, "store": str(twin)}
    (tmp_path / "twin.yaml").write_text(yaml.safe_dump(twin_cfg))
    assert main(["label", str(path), str(filled), "--no-rank"]) == 0
    assert main(["label", str(tmp_path / "twin.yaml"), str(tmp_path / "export.json"),
                 "--no-rank"]) == 0
    assert _table(cfg) == _table(twin_cfg) == {("digits", s, str(truth[s])) for s in asked}
    # the same labels again, in the other format: nothing new, nothing committed
    version = len(list((store / "labels" / "_delta_log").glob("*.json")))
    assert main(["label", str(path), str(tmp_path / "export.json"), "--no-rank"]) == 0
    assert len(list((store / "labels" / "_delta_log").glob("*.json"))) == version


def test_true_labels_raise_the_best_models_p_best_and_a_second_ask_repeats_none(
        labelled_store, tmp_path, capsys):
    from zoorank.config.loading import load_config
    from zoorank.labels.pool import load_pool
    from zoorank.labels.stopping import evidence

    path, store, truth, _ = labelled_store
    accuracy = {m: reference_knn_accuracy(Z, truth) for m, Z in embeddings(len(truth)).items()}
    best = max(accuracy, key=accuracy.get)
    config = load_config(str(path))
    pool = load_pool(config)
    before = evidence(pool).p_best[pool.model_ids.index(best)]
    assert main(["ask", str(path), "--budget", "40"]) == 0
    first = _asked(store, 1)
    _write_csv(tmp_path / "l.csv", [(s, truth[s], "") for s in first])
    assert main(["label", str(path), str(tmp_path / "l.csv"), "--no-rank"]) == 0
    pool = load_pool(config)
    assert sorted(pool.sample_id[pool.labelled].tolist()) == sorted(first)
    after = evidence(pool).p_best[pool.model_ids.index(best)]
    assert after > before and after >= 0.9
    capsys.readouterr()
    assert main(["ask", str(path), "--budget", "40"]) == 0
    assert "the stopping rule says stop" in capsys.readouterr().out  # after ≥ 0.9
    second = _asked(store, 2)
    assert len(second) == 40 and not set(second) & set(first)
    # an unanswered round is not asked again either
    assert main(["ask", str(path), "--budget", "40"]) == 0
    assert not set(_asked(store, 3)) & (set(first) | set(second))


@pytest.mark.parametrize("case, needle", [
    ("unknown id", "line 3: unknown sample_id 99999"),
    ("unknown class", "line 3: unknown class 'eleven'"),
    ("two labels", "line 4: sample_id 5 is labelled '2' here and '1' at"),
    ("empty file", "the labels file is empty"),
    ("contradicts the store", "line 2: sample_id 0 is labelled '9' here but is already "
                              "labelled '0'"),
])
def test_bad_label_files_exit_2_naming_the_row_and_leave_the_table_unchanged(
        labelled_store, tmp_path, capsys, case, needle):
    path, store, _, cfg = labelled_store
    assert main(["label", str(path), str(_write_csv(tmp_path / "ok.csv", [(0, "0", ""),
                                                                          (1, "1", "")])),
                 "--no-rank"]) == 0
    before = _table(cfg)
    log = sorted(p.name for p in (store / "labels" / "_delta_log").glob("*.json"))
    bad = tmp_path / "bad.csv"
    rows = {"unknown id": [(4, "4", ""), (99999, "1", "")],
            "unknown class": [(4, "4", ""), (7, "eleven", "")],
            "two labels": [(4, "4", ""), (5, "1", ""), (5, "2", "")],
            "contradicts the store": [(0, "9", ""), (4, "4", "")]}.get(case)
    if rows is None:
        bad.write_text("")
    else:
        _write_csv(bad, rows)
    capsys.readouterr()
    assert main(["label", str(path), str(bad), "--no-rank"]) == 2
    err = capsys.readouterr().err
    assert needle in err and err.count("\n") == 1
    assert _table(cfg) == before
    assert sorted(p.name for p in (store / "labels" / "_delta_log").glob("*.json")) == log


def test_labels_on_a_dataset_without_class_names_exit_2_naming_the_field(labelled_store,
                                                                         tmp_path, capsys):
    path, _, _, cfg = labelled_store
    cfg = {**cfg, "datasets": [{k: v for k, v in cfg["datasets"][0].items() if k != "classes"}]}
    path.write_text(yaml.safe_dump(cfg))
    assert main(["ask", str(path), "--budget", "5"]) == 2
    assert "datasets.digits.classes" in capsys.readouterr().err


def test_given_labels_reach_the_oracle_and_only_it(labelled_store, tmp_path):
    """The catalog sees the labels (fingerprint changes, oracle wanted); embeddings do not."""
    from zoorank.catalog import build_catalog
    from zoorank.config.loading import load_config

    path, _, truth, _ = labelled_store
    config = load_config(str(path))
    c0 = build_catalog(config)
    assert not c0.has_oracle_labels("digits")
    _write_csv(tmp_path / "l.csv", [(s, truth[s], "") for s in range(20)])
    assert main(["label", str(path), str(tmp_path / "l.csv"), "--no-rank"]) == 0
    c1 = build_catalog(config)
    assert c1.has_oracle_labels("digits")
    assert c1.labels_fingerprint("digits") != c0.labels_fingerprint("digits")
    assert c1.entries == c0.entries  # the label-free side is untouched
    label = c1.indexes["digits"].label
    assert label.iloc[:20].tolist() == truth[:20].tolist() and label.iloc[20:].isna().all()


def test_ask_sampler_option_chooses_how_images_are_asked(labelled_store, tmp_path, capsys):
    from zoorank.config.loading import load_config
    from zoorank.labels.pool import load_pool
    from zoorank.metrics.active.knn_committee import knn_votes

    path, store, truth, _ = labelled_store
    labelled = list(range(0, 300, 5))
    _write_csv(tmp_path / "l.csv", [(s, truth[s], "") for s in labelled])
    assert main(["label", str(path), str(tmp_path / "l.csv"), "--no-rank"]) == 0
    assert main(["ask", str(path), "--budget", "8", "--sampler", "uncertainty"]) == 0
    meta = json.loads((store / "asks" / "1" / "round.json").read_text())
    assert meta["method"] == "uncertainty sampling"
    # the asked images are the 8 free ones of largest consensus kNN vote entropy (a reference)
    pool = load_pool(load_config(str(path)))
    mean = sum(knn_votes(Z, pool.labelled, pool.codes, len(pool.classes)) for Z in pool.Zs)
    p = np.clip(mean / len(pool.Zs), 1e-12, 1)
    h = -(p * np.log(p)).sum(axis=1)
    h[pool.labelled] = -np.inf
    asked = np.searchsorted(pool.sample_id, _asked(store, 1))
    assert h[asked].min() >= np.sort(h)[-8] - 1e-12
    assert main(["ask", str(path), "--budget", "8", "--sampler", "random"]) == 0
    assert json.loads((store / "asks" / "2" / "round.json").read_text())["method"] == "random"
    assert not set(_asked(store, 2)) & (set(_asked(store, 1)) | set(labelled))
    capsys.readouterr()
    with pytest.raises(SystemExit) as err:  # argparse: a sampler that does not exist
        main(["ask", str(path), "--budget", "8", "--sampler", "oracle"])
    assert err.value.code == 2 and "--sampler" in capsys.readouterr().err


def test_the_stopping_rule_is_plain_data_for_the_report(labelled_store, tmp_path):
    from zoorank.config.loading import load_config
    from zoorank.labels.stopping import summary

    path, _, truth, _ = labelled_store
    config = load_config(str(path))
    assert summary(config) is None  # no label given back yet
    _write_csv(tmp_path / "l.csv", [(s, truth[s], "") for s in range(0, 300, 5)])
    assert main(["label", str(path), str(tmp_path / "l.csv"), "--no-rank"]) == 0
    rule = summary(config, round_size=10)
    json.dumps(rule)  # plain data
    assert rule["labels_spent"] == 60 and rule["leader"] == "pixels"
    # the rule compares the leader's p(best) widened for its repeated looks (STOP_WIDENING)
    assert rule["stop"] == (rule["p_best_stop"] >= 0.9)
    assert {r["model_id"] for r in rule["rows"]} == {"pixels", "proj-8", "proj-3", "noise"}
    assert sum(r["p_best_given_labels"] for r in rule["rows"]) == pytest.approx(1.0)
    assert any("p(best)" in s for s in rule["sentences"]) and rule["title"]


@pytest.mark.slow
@pytest.mark.timeout(400)
def test_label_reruns_rank_and_the_oracle_uses_the_given_labels(labelled_store, tmp_path,
                                                                  ray_session):
    """Without --no-rank, ``zoorank label`` reruns RANK: the label oracle (absent before: the
    dataset has no label column) now runs on the given labels, keyed by their fingerprint."""
    from zoorank.catalog import build_catalog
    from zoorank.config.loading import load_config
    from zoorank.store import Store
    from zoorank.store.layout import ORACLE

    path, store, truth, _ = labelled_store
    assert Store(str(store)).read_frame(ORACLE).empty
    _write_csv(tmp_path / "l.csv", [(s, truth[s], "") for s in range(0, 300, 3)])
    assert main(["label", str(path), str(tmp_path / "l.csv")]) == 0
    oracle = Store(str(store)).read_frame(ORACLE)
    knn = oracle[oracle["metric"] == "knn_accuracy"].set_index("model_id")["value"]
    assert set(knn.index) == {"pixels", "proj-8", "proj-3", "noise"}
    assert knn.idxmax() == "pixels" and knn["noise"] < 0.3
    assert json.loads(oracle["params"].iloc[0])["n_train"] < 100  # only the 100 given labels
    catalog = build_catalog(load_config(str(path)))
    manifest = catalog.fresh_manifest(Store(str(store)).read_manifest())
    expected = catalog.oracle_fingerprints(manifest, Store(str(store)).read_metrics())
    assert {(m, "digits") for m in knn.index} <= set(expected)
    assert all(oracle.loc[oracle["model_id"] == m, "fingerprint"].iloc[0] == expected[(m, d)][0]
               for m, d in expected)


def test_the_rule_stops_on_the_widened_p_best_not_the_printed_one(labelled_store, tmp_path):
    # the same printed p(best) 0.95: the rule goes on when the widened p(best) (STOP_WIDENING,
    # for the rule's repeated looks) is 0.80 and stops when it is 0.92, saying which it compared
    from dataclasses import replace

    from zoorank.config.loading import load_config
    from zoorank.labels.pool import load_pool
    from zoorank.labels.stopping import evidence, stopping_rule

    path, _, truth, _ = labelled_store
    _write_csv(tmp_path / "l.csv", [(s, truth[s], "") for s in range(0, 300, 5)])
    assert main(["label", str(path), str(tmp_path / "l.csv"), "--no-rank"]) == 0
    pool = load_pool(load_config(str(path)))
    ev = evidence(pool)
    m = len(ev.p_best)
    assert ev.p_best_stop is not None and ev.p_best_stop.shape == (m,)

    def lead(p):
        return np.r_[p, np.full(m - 1, (1 - p) / (m - 1))]

    for widened, stops in ((0.80, False), (0.92, True)):
        rule = stopping_rule(pool, replace(ev, p_best=lead(0.95), p_best_stop=lead(widened)),
                             round_size=10)
        assert rule["stop"] is stops
        assert rule["p_best"] == pytest.approx(0.95)
        assert rule["p_best_stop"] == pytest.approx(widened)
        verdict = rule["sentences"][-1]
        if stops:
            assert verdict == ("Stop: the leader's p(best) 0.95 (0.92 allowing for the repeated "
                               "looks) ≥ 0.90.")
        else:
            assert verdict.startswith("Go on:")
            assert verdict.endswith("allowing for the repeated looks the leader's p(best) is 0.80, "
                                    "below 0.90.")
