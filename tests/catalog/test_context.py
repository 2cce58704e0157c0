"""One command builds its world once (issue 33, item 2): ``zoorank run``, ``ask`` and ``label``
construct one ``Store`` per store URI in the driver and build the catalog once (``label``'s merge
changes the catalog's labels fingerprints in place: :meth:`zoorank.catalog.Catalog.relabel`).

Observed, not mocked: ``Store.__init__`` and ``build_catalog`` are wrapped to count their calls and
delegate to the real ones; every command runs for real on the labels fixture's small store."""

from __future__ import annotations

import sys
from collections import Counter

import pandas as pd
import pytest
from labels_fixtures import copy_label_store, write_label_store

import zoorank.catalog as catalog_module
import zoorank.embed
import zoorank.gc
import zoorank.labels.ask
import zoorank.labels.merge
import zoorank.oracle.label_oracle
import zoorank.pipeline
import zoorank.rank
import zoorank.report.skip
import zoorank.score  # noqa: F401  (the stages imported: their names bound to build_catalog are found)
from zoorank.cli import main
from zoorank.store import Store


@pytest.fixture(scope="module")
def template(tmp_path_factory):
    root = tmp_path_factory.mktemp("context-template")
    cfg, truth = write_label_store(str(root))
    return root, cfg, truth


@pytest.fixture
def config_path(template, tmp_path):
    src, cfg, truth = template
    path, cfg = copy_label_store(src, cfg, tmp_path)
    return path, cfg["store"], truth


@pytest.fixture
def counts(monkeypatch):
    """Calls of ``Store.__init__`` (by URI) and of ``build_catalog`` in this (the driver) process."""
    stores: Counter = Counter()
    catalogs = []
    real_init, real_build = Store.__init__, catalog_module.build_catalog

    def init(self, uri, *args, **kwargs):
        stores[str(uri)] += 1
        real_init(self, uri, *args, **kwargs)

    def build(*args, **kwargs):
        catalogs.append(1)
        return real_build(*args, **kwargs)

    monkeypatch.setattr(Store, "__init__", init)
    for name in [n for n in sys.modules if n == "zoorank" or n.startswith("zoorank.")]:
        if getattr(sys.modules[name], "build_catalog", None) is real_build:  # every name bound to it
            monkeypatch.setattr(sys.modules[name], "build_catalog", build)
    return stores, catalogs


def _labels_csv(path, truth, step: int):
    path.write_text("sample_id,label,source\n" + "".join(f"{s},{truth[s]},\n"
                                                         for s in range(0, 300, step)))
    return path


def test_ask_builds_one_store_and_one_catalog(config_path, counts):
    path, store, _ = config_path
    stores, catalogs = counts
    assert main(["ask", str(path), "--budget", "10"]) == 0
    assert dict(stores) == {store: 1}
    assert len(catalogs) == 1


@pytest.mark.timeout(400)
def test_label_builds_one_store_and_one_catalog(
        config_path, counts, tmp_path, ray_session):
    path, store, truth = config_path
    stores, catalogs = counts
    assert main(["label", str(path), str(_labels_csv(tmp_path / "l.csv", truth, 3))]) == 0
    assert dict(stores) == {store: 1}
    assert len(catalogs) == 1  # the merge's labels reach it in place, not by a second build
    stores.clear()
    catalogs.clear()
    assert main(["label", str(path), str(_labels_csv(tmp_path / "l.csv", truth, 3)), "--no-rank"]) == 0
    assert dict(stores) == {store: 1}
    assert len(catalogs) == 1


@pytest.mark.timeout(400)
def test_run_builds_one_store_and_one_catalog(config_path, counts, ray_session):
    path, store, _ = config_path
    stores, catalogs = counts
    assert main(["run", str(path)]) == 0
    assert dict(stores) == {store: 1}
    assert len(catalogs) == 1


def test_a_merge_reaches_the_built_catalog_as_a_fresh_build_would(config_path, tmp_path):
    """The catalog built before ``zoorank label``'s merge, relabelled in place, holds what one
    built after it holds: the same labels, labels fingerprints and expected entries (no stale
    fingerprint lets RANK or REPORT skip after new labels)."""
    from zoorank.catalog.context import RunContext
    from zoorank.config.loading import load_config
    from zoorank.labels.table import merge_labels

    path, _, truth = config_path
    context = RunContext(load_config(str(path)))
    before = context.catalog
    old = before.labels_fingerprint("digits")
    merged = merge_labels(context.store, "digits", pd.DataFrame(
        {"sample_id": list(range(0, 300, 7)), "label": [str(truth[s]) for s in range(0, 300, 7)]}),
        "l.csv")
    assert merged.added == len(range(0, 300, 7))
    context.labels_merged()
    fresh = catalog_module.build_catalog(load_config(str(path)))
    assert context.catalog is before
    assert before.labels_fingerprint("digits") == fresh.labels_fingerprint("digits") != old
    assert before.indexes["digits"].label.tolist() == fresh.indexes["digits"].label.tolist()
    assert before.indexes["digits"].label.notna().sum() == merged.added
    assert before.entries == fresh.entries


@pytest.mark.timeout(400)
def test_watch_builds_one_store_and_one_catalog_per_round(tmp_path, counts, ray_session):
    """``zoorank run --watch``: one ``Store`` for the whole watch (its rounds share it and the Ray
    runtime); each round builds the catalog of its models once."""
    from test_watch import _checkpoint, _config

    from zoorank.config.loading import parse_config
    from zoorank.watch import watch

    for i in range(2):
        _checkpoint(tmp_path / f"run{i}.safetensors", i)
    store = str(tmp_path / "store")
    config = parse_config(_config(store, str(tmp_path / "*.safetensors")), "<watch>")
    stores, catalogs = counts
    summary = watch(config, interval=0.1, until="2", settle=0, out=lambda line: None)
    assert [r.models for r in summary.rounds] == [["run0", "run1"]]
    assert summary.stopped_by == "until"
    assert dict(stores) == {store: 1}
    assert len(catalogs) == len(summary.rounds) == 1
