"""Label merges that run at once (issue 32): every label lands, a sample two merges label
differently keeps the first label and the other merge reports it.

The interleaving is forced: a second writer commits its labels between the first merge's read
and its commit (a pass-through around delta-rs's two commit calls runs it once, just before the
first merge commits). A read-concat-replace merge loses the second writer's labels there; an
insert-only MERGE is checked against the winner's commit and runs again. The black-box tests start
two real ``zoorank label`` processes together on one store, on local disk and on a loopback S3.
"""

from __future__ import annotations

import csv
import os
import shutil
import subprocess
import sys
import threading
from pathlib import Path

import deltalake
import numpy as np
import pandas as pd
import pytest
import yaml
from deltalake.table import TableMerger
from labels_fixtures import CLASSES, copy_label_store, write_label_store

from zoorank.cli import main
from zoorank.labels.table import merge_labels, read_labels
from zoorank.store import Store

REPO = Path(__file__).resolve().parents[2]
N = 420  # samples: 400 labelled by two merges of 200, 20 for the table's first labels


@pytest.fixture(scope="module")
def template(tmp_path_factory):
    root = tmp_path_factory.mktemp("labels-merge-template")
    cfg, truth = write_label_store(str(root), n=N)
    return root, cfg, truth


@pytest.fixture
def label_store(template, tmp_path):
    """A copy of the template store: (config path, config dict, truth)."""
    src, cfg, truth = template
    path, cfg = copy_label_store(src, cfg, tmp_path)
    return path, cfg, truth


def _frame(ids, truth) -> pd.DataFrame:
    ids = np.asarray(ids, dtype=np.int64)
    return pd.DataFrame({"sample_id": ids, "label": [CLASSES[int(truth[i])] for i in ids]})


def _write_csv(path: Path, frame: pd.DataFrame) -> Path:
    with open(path, "w", newline="") as f:
        w = csv.writer(f)
        w.writerow(["sample_id", "label", "source"])
        w.writerows((int(s), lab, "") for s, lab in zip(frame["sample_id"], frame["label"]))
    return path


class CommitInterleaver:
    """Runs ``second()`` once, in the thread of the first commit to the labels table after
    arming, just before that commit (delta-rs ``write_deltalake`` or a MERGE's ``execute``):
    after the first merge read the table, before it commits. The calls pass through unchanged."""

    def __init__(self, monkeypatch, second) -> None:
        self.second, self.fired, self.armed = second, False, False
        self._busy = threading.local()
        real_write, real_execute = deltalake.write_deltalake, TableMerger.execute
        interleaver = self

        def write(table_or_uri, *args, **kwargs):
            interleaver._maybe_fire(str(table_or_uri))
            return real_write(table_or_uri, *args, **kwargs)

        def execute(merger, *args, **kwargs):
            interleaver._maybe_fire(str(merger._table.table_uri()))
            return real_execute(merger, *args, **kwargs)

        monkeypatch.setattr(deltalake, "write_deltalake", write)
        monkeypatch.setattr(TableMerger, "execute", execute)

    def _maybe_fire(self, uri: str) -> None:
        if not self.armed or self.fired or getattr(self._busy, "on", False):
            return
        if not uri.rstrip("/").endswith("/labels"):
            return
        self.fired = True
        self._busy.on = True
        try:
            self.second()
        finally:
            self._busy.on = False


def test_a_merge_committed_between_anothers_read_and_commit_loses_no_label(label_store,
                                                                           monkeypatch):
    _, cfg, truth = label_store
    store = Store(cfg["store"])
    merge_labels(store, "digits", _frame(range(400, 420), truth), "first.csv")  # the table exists
    a, b = _frame(range(0, 200), truth), _frame(range(200, 400), truth)
    results = {}
    hook = CommitInterleaver(monkeypatch, lambda: results.setdefault(
        "b", merge_labels(Store(cfg["store"]), "digits", b, "b.csv")))
    hook.armed = True
    results["a"] = merge_labels(store, "digits", a, "a.csv")
    assert hook.fired
    table = read_labels(store, "digits")
    assert len(table) == 420 and not table["sample_id"].duplicated().any()
    assert dict(zip(table["sample_id"], table["label"])) == {
        i: CLASSES[int(truth[i])] for i in range(420)}
    assert results["a"].added == 200 and results["b"].added == 200
    assert not results["a"].conflicts and not results["b"].conflicts
    sources = table.set_index("sample_id")["source"]
    assert set(sources.loc[list(range(200))]) == {"a.csv"}
    assert set(sources.loc[list(range(200, 400))]) == {"b.csv"}


def test_a_sample_labelled_twice_keeps_the_first_label_and_the_cli_reports_the_conflict(
        label_store, monkeypatch, capsys):
    path, cfg, truth = label_store
    store = Store(cfg["store"])
    merge_labels(store, "digits", _frame(range(400, 420), truth), "first.csv")
    # the second writer labels 0..29, of which 0..4 otherwise (the next class), first
    other = _frame(range(0, 30), truth)
    wrong = {i: CLASSES[(int(truth[i]) + 1) % 10] for i in range(5)}
    other.loc[other["sample_id"] < 5, "label"] = [wrong[i] for i in range(5)]
    hook = CommitInterleaver(monkeypatch, lambda: merge_labels(Store(cfg["store"]), "digits",
                                                               other, "other.csv"))
    mine = _write_csv(path.parent / "mine.csv", _frame(range(0, 60), truth))
    real = Store.insert_rows

    def armed_insert(self, *args, **kwargs):  # arm after `zoorank label` read and checked
        hook.armed = True
        return real(self, *args, **kwargs)

    monkeypatch.setattr(Store, "insert_rows", armed_insert)
    assert main(["label", str(path), str(mine), "--no-rank"]) == 0
    assert hook.fired
    out = capsys.readouterr().out
    table = read_labels(store, "digits")
    assert len(table) == 80 and not table["sample_id"].duplicated().any()
    kept = dict(zip(table["sample_id"], table["label"]))
    assert {i: kept[i] for i in range(5)} == wrong  # the first label stays
    assert all(kept[i] == CLASSES[int(truth[i])] for i in range(5, 60))
    # 30 new (30..59), 25 the same as the other merge's, 5 conflicts named with both labels
    assert "label: 30 new label(s) for digits from mine.csv (25 already known, unchanged)" in out
    line = next(x for x in out.splitlines() if "conflict" in x)
    assert line.startswith("label: 5 conflict(s)")
    for i in range(5):
        assert f"{i} ({CLASSES[int(truth[i])]!r}, kept {wrong[i]!r})" in line


def _label_process(cfg_path: Path, labels: Path, log: Path, env: dict) -> subprocess.Popen:
    return subprocess.Popen([sys.executable, "-m", "zoorank", "label", str(cfg_path), str(labels),
                             "--no-rank"], env=env, stdout=open(log, "w"),
                            stderr=subprocess.STDOUT, start_new_session=True)


@pytest.mark.slow
@pytest.mark.timeout(600)
@pytest.mark.parametrize("where", ["local", "s3"])
def test_two_label_processes_started_together_leave_every_label(where, template, tmp_path,
                                                                 request):
    src, cfg, truth = template
    data = tmp_path / "digits.parquet"
    shutil.copy(src / "digits.parquet", data)
    if where == "local":
        uri = str(tmp_path / "store")
        shutil.copytree(src / "store", uri)
    else:  # the template store's files, uploaded as they are (shards, manifest table)
        server = request.getfixturevalue("s3_server")
        bucket = f"labels-{tmp_path.name.lower()[-20:].strip('_-')}".replace("_", "-")
        uri = server(f"{bucket}/store")
        for f in (src / "store").rglob("*"):
            if f.is_file():
                server.client.upload_file(str(f), bucket,
                                          f"store/{f.relative_to(src / 'store')}")
    cfg = {**cfg, "store": uri, "datasets": [{**cfg["datasets"][0], "path": str(data)}]}
    cfg_path = tmp_path / "run.yaml"
    cfg_path.write_text(yaml.safe_dump(cfg))
    files = [_write_csv(tmp_path / f"{n}.csv", _frame(ids, truth))
             for n, ids in (("a", range(0, 200)), ("b", range(200, 400)))]
    env = {**os.environ, "PYTHONPATH": str(REPO), "ZOORANK_PROGRESS": "0"}
    procs = [_label_process(cfg_path, f, tmp_path / f"{f.stem}.log", env) for f in files]
    codes = [p.wait(timeout=300) for p in procs]
    logs = [(tmp_path / f"{f.stem}.log").read_text() for f in files]
    assert codes == [0, 0], logs
    for f, log in zip(files, logs):
        assert f"label: 200 new label(s) for digits from {f.name}" in log
    table = read_labels(Store(uri), "digits")
    assert len(table) == 400 and not table["sample_id"].duplicated().any()
    assert dict(zip(table["sample_id"], table["label"])) == {
        i: CLASSES[int(truth[i])] for i in range(400)}
