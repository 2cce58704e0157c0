"""What RANK and REPORT were computed from (zoorank.catalog.stage_inputs): the fingerprints that skip them."""

from __future__ import annotations

import hashlib
import json
from typing import Any

import numpy as np
import pandas as pd
import pytest

from zoorank.catalog.stage_inputs import REPORT_INPUTS, frame_digest
from zoorank.config.loading import parse_config
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


# -- skips keyed on the code (Contract 8) and on every input column ------------------------------


def _rank_store(root) -> tuple[Any, Store]:
    """The RANK fixture store (rank_fixtures: 8 digits models, no oracle, so no Ray) and its config."""
    from rank_fixtures import config_dict, write_store

    write_store(str(root))
    config = parse_config(config_dict(str(root)))
    return config, Store(config.store)


def _out(capsys) -> str:
    """The console output of the last calls, with the line folds of a plain console undone."""
    return " ".join(capsys.readouterr().out.split())


def _fingerprints_of_80dfd23(config, store: Store) -> tuple[str, str]:
    """(RANK's, REPORT's) input fingerprint as zoorank 80dfd23 computed them for this store: the
    hand-bumped ``RANK_VERSION = 1`` / ``REPORT_VERSION = 1``, the columns it hashed, no code
    digest, no labels. (Its formula, copied here: the store of an older zoorank.)"""
    from zoorank.catalog import build_catalog
    from zoorank.catalog.stage_inputs import INPUTS_KEY, leaderboard_commit
    from zoorank.config.digests import fingerprint
    from zoorank.decide.leaderboard import metrics_fingerprint
    from zoorank.oracle import resample
    from zoorank.store.layout import ORACLE

    catalog = build_catalog(config)
    manifest = catalog.fresh_manifest(store.read_manifest())
    metrics = catalog.fresh_metrics(store, manifest)
    folds = resample.fresh_resamples(store, metrics, config.score)
    health = resample.fresh_health(store, manifest, config.clean_view.name)
    oracle = pd.DataFrame(columns=METRICS_COLUMNS)  # no oracle in the config
    metric_cols = ["model_id", "dataset", "metric", "value", "fingerprint", "params", "dim"]
    models = [(m.model_id, m.family, m.group, None if m.datasets is None else list(m.datasets))
              for m in catalog.models]
    rank = fingerprint(
        "rank", 1, config.model_dump(mode="json", exclude={"store"}), models,
        frame_digest(metrics, metric_cols), frame_digest(oracle, metric_cols),
        frame_digest(folds, ["model_id", "dataset", "metric", "fold", "value", "fingerprint"]),
        frame_digest(health, list(health.columns)),
        frame_digest(manifest, ["dataset", "view", "model_id", "status", "error", "fingerprint"]),
        [], length=32)
    version, info = leaderboard_commit(store)
    stored = store.read_metrics()
    fresh = catalog.fresh_metrics(store, manifest)
    report = fingerprint(
        "report", 1, config.model_dump(mode="json"), store.name, version, info.get(INPUTS_KEY),
        info.get("zoorank_tables"), store.table_version(ORACLE),
        sorted(map(list, catalog.fresh_reliability(manifest, stored).items())),
        frame_digest(manifest, list(manifest.columns)), metrics_fingerprint(config, fresh),
        length=32)
    return rank, report


@pytest.mark.timeout(300)
def test_a_store_ranked_by_an_older_zoorank_reruns_rank_and_report_once_and_says_why(
        tmp_path, capsys):
    """The store as zoorank 80dfd23 left it: its leaderboard commit and report/inputs.json carry
    the fingerprints that version computed (hand-bumped versions, no code). The new code reruns
    RANK and REPORT once, saying the code changed; a second run skips both. Then an upgrade of a
    store the new code wrote (another package digest): once more, naming both digests."""
    from zoorank import pipeline
    from zoorank.catalog import stage_inputs
    from zoorank.catalog.stage_inputs import INPUTS_KEY, leaderboard_commit
    from zoorank.rank import write_rank_outputs
    from zoorank.report import run_report
    from zoorank.store.layout import LEADERBOARD
    from zoorank.zoo import resolve_models

    config, store = _rank_store(tmp_path)
    # what 80dfd23's `zoorank rank` + `zoorank report` wrote: the outputs, their old fingerprints
    write_rank_outputs(config, store, resolve_models(config), store.read_metrics(),
                       pd.DataFrame(columns=METRICS_COLUMNS), show=False)
    old_rank, _ = _fingerprints_of_80dfd23(config, store)
    _, info = leaderboard_commit(store)
    store.replace_table(LEADERBOARD, store.read_frame(LEADERBOARD),
                        {"zoorank": info["zoorank"], "zoorank_tables": info["zoorank_tables"],
                         INPUTS_KEY: old_rank})
    run_report(config)
    _, old_report = _fingerprints_of_80dfd23(config, store)
    store.write_json(REPORT_INPUTS, {"fingerprint": old_report, "version": 1})
    version = leaderboard_commit(store)[0]
    capsys.readouterr()

    pipeline.run_rank(config, show=False)
    out = _out(capsys)
    assert "inputs unchanged" not in out
    assert "rank: code changed since the last run" in out and "recomputing" in out
    assert leaderboard_commit(store)[0] > version
    pipeline.run_report(config)
    out = _out(capsys)
    assert "report: code changed since the last run" in out and "rendering again" in out
    assert "plots)" in out and "is current" not in out  # the report stage ran

    version = leaderboard_commit(store)[0]
    page = tmp_path / "report" / "index.html"
    stamp = page.stat().st_mtime_ns
    pipeline.run_rank(config, show=False)
    pipeline.run_report(config)
    out = _out(capsys)
    assert f"rank: inputs unchanged since leaderboard version {version}: skipped" in out
    assert "is current (inputs unchanged): not re-rendered" in out
    assert "recomputing" not in out and "rendering again" not in out and "plots)" not in out
    assert leaderboard_commit(store)[0] == version and page.stat().st_mtime_ns == stamp

    # an upgrade of a store this code wrote: the package's files digest to something else
    now = stage_inputs.code_identity()
    real = stage_inputs.source_digest
    try:
        stage_inputs.source_digest = lambda root: "f" * 64
        pipeline.run_rank(config, show=False)
        pipeline.run_report(config)
        out = _out(capsys)
        was = f"zoorank {now['zoorank']} @ {now['source'][:12]}"
        assert (f"rank: code changed since the last run ({was} → zoorank {now['zoorank']} @ "
                f"{'f' * 12}): recomputing") in out
        assert f"report: code changed since the last run ({was} → " in out
        assert "inputs changed" in out  # the page's leaderboard is the new commit
        assert "skipped" not in out and "is current" not in out and "plots)" in out
        pipeline.run_rank(config, show=False)
        pipeline.run_report(config)
        out = _out(capsys)
        assert "skipped" in out and "is current" in out and "recomputing" not in out
        assert "plots)" not in out
    finally:
        stage_inputs.source_digest = real


def test_a_comment_added_to_a_module_rank_runs_changes_the_code_and_rank_fingerprint(
        tmp_path, monkeypatch):
    """The package's digest, over a copy of it: the same files digest the same wherever they
    lie; a comment in ``rank/board.py`` (or any module), a template edit or a new module change
    it and RANK's fingerprint; compiled files (``__pycache__``) do not."""
    import shutil

    from zoorank.catalog import stage_inputs

    copy = tmp_path / "zoorank"
    shutil.copytree(stage_inputs.PACKAGE_ROOT, copy, ignore=shutil.ignore_patterns("__pycache__"))
    digest = stage_inputs.source_digest(copy)
    assert digest == stage_inputs.source_digest(stage_inputs.PACKAGE_ROOT)
    # an independent listing of the files hashed: every module and template, nothing else
    manual = hashlib.sha256()
    for path in sorted([*copy.rglob("*.py"), *copy.glob("*/templates/*")]):
        manual.update(path.relative_to(copy).as_posix().encode() + b"\0")
        manual.update(hashlib.sha256(path.read_bytes()).digest())
    assert manual.hexdigest() == digest

    config = parse_config({"store": str(tmp_path / "store"), "seed": 0,
                           "datasets": [{"name": "digits", "source": "sklearn_digits"}],
                           "models": [{"id": "m", "source": "python", "name": "x:unused"}]})
    empty = pd.DataFrame()
    monkeypatch.setattr(stage_inputs, "PACKAGE_ROOT", copy)

    def rank_fingerprint() -> str:
        return stage_inputs.rank_inputs(config, [], empty, empty, empty, empty, empty,
                                        {"digits": "l"}).fingerprint

    before = rank_fingerprint()
    (copy / "__pycache__").mkdir(exist_ok=True)
    (copy / "__pycache__" / "board.cpython-312.pyc").write_bytes(b"compiled")
    assert stage_inputs.source_digest(copy) == digest and rank_fingerprint() == before
    board = copy / "rank" / "board.py"
    board.write_text(board.read_text() + "# a comment changes no behaviour, but it is new code\n")
    commented = stage_inputs.source_digest(copy)
    assert commented != digest and rank_fingerprint() != before
    template = copy / "report" / "templates" / "decision.html.j2"
    template.write_text(template.read_text() + "\n")
    assert stage_inputs.source_digest(copy) not in (digest, commented)
    with_template = stage_inputs.source_digest(copy)
    (copy / "rank" / "new_module.py").write_text("")
    assert stage_inputs.source_digest(copy) not in (digest, commented, with_template)


@pytest.mark.timeout(300)
def test_a_changed_param_count_or_width_in_the_manifest_recomputes_rank(tmp_path, capsys):
    """RANK reads ``param_count`` and ``dim`` of the manifest (the priors ``param_count`` and
    ``width``): changing either in the store reruns RANK, which says the manifest changed, and
    the board shows the new value; unchanged, it skips."""
    from zoorank import pipeline
    from zoorank.store.schema import MANIFEST_KEY

    config, store = _rank_store(tmp_path)
    pipeline.run_rank(config, show=False)
    pipeline.run_rank(config, show=False)
    assert "skipped" in _out(capsys)

    def set_done_row(**values):
        manifest = store.read_manifest()
        row = manifest[manifest["model_id"] == "proj-a"].assign(**values)
        store.upsert_rows("manifest", row, key=MANIFEST_KEY,
                          update_if="t.fingerprint = s.fingerprint")  # the same fresh entry

    set_done_row(param_count=1234)
    board = pipeline.run_rank(config, show=False).set_index("model_id")
    out = _out(capsys)
    assert "rank: inputs changed since the last run (manifest): recomputing" in out
    assert board.loc["proj-a", "param_count"] == 1234
    set_done_row(dim=25)
    board = pipeline.run_rank(config, show=False).set_index("model_id")
    assert "rank: inputs changed since the last run (manifest): recomputing" in _out(capsys)
    assert board.loc["proj-a", "width"] == 25
    pipeline.run_rank(config, show=False)
    assert "skipped" in _out(capsys)


# -- labels in the report's inputs ---------------------------------------------------------------


def _two_dataset_label_store(root, n: int = 200) -> tuple[dict, np.ndarray]:
    """labels_fixtures' store (digits without a label column, four models of known quality)
    with a second dataset ``digits-b`` on the same images and real RankMe rows for both, so
    `zoorank rank` and `zoorank report` run without Ray (no oracle: 5 labels are below its 10)."""
    from labels_fixtures import embeddings, write_label_store

    from zoorank.catalog import build_catalog
    from zoorank.metrics.label_free.rankme import rankme

    cfg, truth = write_label_store(str(root), n=n)
    cfg.pop("oracle")
    cfg["datasets"].append({**cfg["datasets"][0], "name": "digits-b"})
    config = parse_config(cfg)
    catalog = build_catalog(config)
    store = Store(config.store)
    ids = np.arange(n, dtype=np.int64)
    zoo = embeddings(n)
    store.update_manifest([
        {"dataset": "digits-b", "view": "clean", "model_id": m,
         "fingerprint": catalog.entries[("digits-b", "clean", m)][0], "status": "done",
         "error": None, "rows": n, "dim": Z.shape[1], "seconds": 0.1, "bad_images": 0}
        for m, Z in zoo.items()])
    for m, Z in zoo.items():
        store.write_shard("digits-b", "clean", m, 0, ids, np.zeros(n, np.int32),
                          Z.astype(np.float32))
    manifest = catalog.fresh_manifest(store.read_manifest())
    assert len(manifest) == 2 * len(zoo)  # every entry fresh
    expected = catalog.metric_fingerprints(manifest)
    store.write_parquet("metrics", pd.DataFrame([
        {"model_id": m, "dataset": d, "metric": "rankme", "value": rankme(Z), "params": "{}",
         "n": n, "dim": Z.shape[1], "seed": 0, "zoorank_version": "test",
         "fingerprint": expected[(m, d, "rankme")]}
        for d in ("digits", "digits-b") for m, Z in zoo.items()], columns=METRICS_COLUMNS))
    return cfg, truth


def _label_csv(path, truth: np.ndarray, sample_ids) -> str:
    lines = ["sample_id,label"] + [f"{s},{truth[s]}" for s in sample_ids]
    path.write_text("\n".join(lines) + "\n")
    return str(path)


@pytest.mark.timeout(300)
def test_merged_labels_rerender_the_report_and_every_labelled_dataset_is_summarised(
        tmp_path, capsys):
    """`zoorank label` merges 5 labels (without rerunning RANK): `zoorank report` renders the
    page again, saying the labels changed, and its labels section shows those 5; labels on the
    second dataset add its own section beside the first's. Unchanged, the page is current."""
    import yaml

    from zoorank.cli import main

    cfg, truth = _two_dataset_label_store(tmp_path)
    config_path = tmp_path / "run.yaml"
    config_path.write_text(yaml.safe_dump(cfg))
    page = tmp_path / "store" / "report" / "index.html"
    assert main(["rank", str(config_path)]) == 0
    assert main(["report", str(config_path)]) == 0
    assert "labels-given" not in page.read_text()
    capsys.readouterr()

    first = [0, 1, 10, 11, 20]  # digits 0, 1, 0, 1, 0
    assert main(["label", str(config_path), _label_csv(tmp_path / "a.csv", truth, first),
                 "--no-rank"]) == 0
    assert main(["report", str(config_path)]) == 0
    out = _out(capsys)
    assert "label: 5 new label(s) for digits" in out
    assert "report: inputs changed since the last run (labels): rendering again" in out
    html = page.read_text()
    assert "id='labels-given-digits'" in html and "Given 5 label(s) on digits," in html
    assert "labels-given-digits-b" not in html  # no label on the second dataset yet

    second = [10, 11, 12, 13, 14, 15, 16]
    assert main(["label", str(config_path), _label_csv(tmp_path / "b.csv", truth, second),
                 "--dataset", "digits-b", "--no-rank"]) == 0
    assert main(["report", str(config_path)]) == 0
    assert "(labels): rendering again" in _out(capsys)
    html = page.read_text()
    assert "Given 5 label(s) on digits," in html and "id='labels-given-digits'" in html
    assert "id='labels-given-digits-b'" in html and "Given 7 label(s) on digits-b," in html

    assert main(["report", str(config_path)]) == 0
    assert "is current (inputs unchanged): not re-rendered" in _out(capsys)


@pytest.mark.timeout(300)
def test_rank_and_report_name_the_config_path_as_typed_and_rank_skips_through_another_path(
        tmp_path, capsys, monkeypatch):
    """`zoorank rank cfgs/run.yaml` (typed relative to the working directory) writes and prints
    that path in the next step; `zoorank rank /abs/.../run.yaml` is skipped (the path is no input
    of RANK) and names the absolute path; `zoorank report cfgs/run.yaml` shows the relative one
    on its decision card."""
    import yaml

    from zoorank.cli import main

    cfg, _ = _two_dataset_label_store(tmp_path)
    (tmp_path / "cfgs").mkdir()
    config_path = tmp_path / "cfgs" / "run.yaml"
    config_path.write_text(yaml.safe_dump(cfg))
    monkeypatch.chdir(tmp_path)
    decision = tmp_path / "store" / "decision.json"
    store = Store(cfg["store"])

    assert main(["report", "cfgs/run.yaml"]) == 2  # nothing ranked yet: says what to run
    assert "run `zoorank rank cfgs/run.yaml` first" in capsys.readouterr().err
    assert main(["rank", "cfgs/run.yaml"]) == 0
    step = json.loads(decision.read_text())["next_step"]
    assert step["command"] == f"zoorank ask cfgs/run.yaml --budget {step['budget']}"
    assert f"Next step: zoorank ask cfgs/run.yaml --budget {step['budget']}" in _out(capsys)
    version = store.table_version("leaderboard")

    assert main(["rank", str(config_path)]) == 0
    out = _out(capsys)
    assert "rank: inputs unchanged" in out and "skipped" in out
    assert store.table_version("leaderboard") == version
    assert f"Next step: zoorank ask {config_path} --budget" in out
    assert json.loads(decision.read_text())["next_step"]["config"] == str(config_path)

    assert main(["report", "cfgs/run.yaml"]) == 0
    html = (tmp_path / "store" / "report" / "index.html").read_text()
    assert f"<code id='next-step-command'>zoorank ask cfgs/run.yaml --budget {step['budget']}" \
        in html
