"""Label pools that fit a head node (issue 32): a pool holds the label-free top set plus a bounded
margin, ``max(2 × |top set|, 16)`` models by label-free p(best), in float32, and ``zoorank label``
builds it once. A small real store of 40 models (random embeddings of 60 digits) with a
hand-written leaderboard, so which models may be best is known by construction."""

from __future__ import annotations

import numpy as np
import pandas as pd
import pyarrow as pa
import pyarrow.parquet as pq
import pytest
import yaml
from labels_fixtures import CLASSES, _png
from sklearn.datasets import load_digits

from zoorank.cli import main
from zoorank.config.loading import parse_config
from zoorank.labels.pool import load_pool
from zoorank.store import Store
from zoorank.store.layout import LEADERBOARD

N, M = 60, 40
IDS = [f"m{i:02d}" for i in range(M)]


@pytest.fixture(scope="module")
def zoo_store(tmp_path_factory):
    """(config dict, true labels): 40 models with fresh clean embeddings of 60 digits."""
    from zoorank.catalog import build_catalog

    root = tmp_path_factory.mktemp("labels-pool")
    d = load_digits()
    data = f"{root}/digits.parquet"
    pq.write_table(pa.table({"image": pa.array([_png(im) for im in d.images[:N]],
                                               type=pa.binary())}), data)
    cfg = {"store": f"{root}/store", "seed": 0,
           "datasets": [{"name": "digits", "source": "parquet", "path": data,
                         "image_column": "image", "limit": N, "classes": CLASSES}],
           "models": [{"id": m, "source": "python", "name": "fixtures:unused"} for m in IDS],
           "metrics": ["rankme"]}
    catalog = build_catalog(parse_config(cfg, "<pool fixture>"))
    store = Store(cfg["store"])
    ids = np.arange(N, dtype=np.int64)
    rng = np.random.default_rng(0)
    manifest = []
    for m in IDS:
        Z = d.data[:N] + rng.normal(scale=4.0, size=(N, 64))
        store.write_shard("digits", "clean", m, 0, ids, np.zeros(N, np.int32), Z.astype(np.float32))
        manifest.append({"dataset": "digits", "view": "clean", "model_id": m,
                         "fingerprint": catalog.entries[("digits", "clean", m)][0],
                         "status": "done", "error": None, "rows": N, "dim": 64,
                         "seconds": 0.1, "bad_images": 0})
    store.update_manifest(manifest)
    return cfg, d.target[:N]


def _board(store: Store, top: int) -> dict[str, float]:
    """A leaderboard whose p(best) falls with a seeded shuffle of the ids, the first ``top`` in
    the top set; returns model_id → p(best)."""
    order = list(np.random.default_rng(top).permutation(IDS))
    p = np.array([0.5 ** (i + 1) for i in range(M)])
    p /= p.sum()
    frame = pd.DataFrame({"model_id": order, "rank": np.arange(1, M + 1), "p_best": p,
                          "in_top_set": [i < top for i in range(M)]})
    store.replace_table(LEADERBOARD, frame)
    return dict(zip(order, p))


@pytest.mark.parametrize(("top", "held"), [(3, 16), (10, 20)])
def test_a_pool_holds_the_top_set_and_a_bounded_margin_in_float32(zoo_store, monkeypatch, top,
                                                                 held):
    monkeypatch.delenv("ZOORANK_POOL_MODELS", raising=False)
    cfg, _ = zoo_store
    p = _board(Store(cfg["store"]), top)
    pool = load_pool(parse_config(cfg, "<pool>"))
    assert held == max(2 * top, 16)
    best = sorted(p, key=p.get, reverse=True)  # the top set are the first ``top`` here
    assert sorted(pool.model_ids) == sorted(best[:held]) and pool.models_total == M
    assert set(pool.free_top_set) == set(best[:top]) <= set(pool.model_ids)
    assert len(pool.Zs) == held and all(Z.dtype == np.float32 and Z.shape == (N, 64)
                                        for Z in pool.Zs)
    # the prior is the board's p(best) over the pool's models plus the 1e-3 floor, renormalised
    want = np.array([p[m] for m in pool.model_ids]) + 1e-3
    np.testing.assert_allclose(pool.prior, want / want.sum(), rtol=1e-12)


def test_the_pool_size_can_be_set_and_a_top_set_member_is_never_left_out(zoo_store,
                                                                        monkeypatch):
    cfg, _ = zoo_store
    p = _board(Store(cfg["store"]), 3)
    best = sorted(p, key=p.get, reverse=True)
    monkeypatch.setenv("ZOORANK_POOL_MODELS", "5")
    assert sorted(load_pool(parse_config(cfg, "<pool>")).model_ids) == sorted(best[:5])
    assert sorted(load_pool(parse_config(cfg, "<pool>"), max_models=2).model_ids) == sorted(
        best[:2])


def test_label_reads_each_pool_models_embeddings_once(zoo_store, tmp_path, monkeypatch, capsys):
    monkeypatch.delenv("ZOORANK_POOL_MODELS", raising=False)
    cfg, truth = zoo_store
    import shutil

    shutil.copytree(cfg["store"], tmp_path / "store")
    cfg = {**cfg, "store": str(tmp_path / "store")}
    _board(Store(cfg["store"]), 3)
    path = tmp_path / "run.yaml"
    path.write_text(yaml.safe_dump(cfg))
    labels = tmp_path / "l.csv"
    pd.DataFrame({"sample_id": range(12), "label": [CLASSES[int(t)] for t in truth[:12]]}
                 ).to_csv(labels, index=False)
    reads: list[str] = []
    real = Store.read_embeddings

    def counted(self, dataset, view, model_id, shards=None):
        reads.append(model_id)
        return real(self, dataset, view, model_id, shards)

    monkeypatch.setattr(Store, "read_embeddings", counted)
    assert main(["label", str(path), str(labels), "--no-rank"]) == 0
    out = capsys.readouterr().out
    assert "label: 12 new label(s) for digits" in out
    assert "Given 12 label(s) on digits" in out  # the rule after the merge sees all 12
    assert len(reads) == 16 and len(set(reads)) == 16  # the pool's models, each read once
