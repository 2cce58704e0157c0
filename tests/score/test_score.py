"""SCORE stage on a store written directly (no embed stage): digits pixels through seeded maps."""

from __future__ import annotations

import json
import math
import os

import numpy as np
import pandas as pd
import pytest
import scipy.stats
from rank_fixtures import entry_fingerprints

from zoorank.catalog import reliability_path
from zoorank.config.loading import parse_config
from zoorank.metrics import coding_rate
from zoorank.metrics.label_free.clid import cluster_learnability
from zoorank.metrics.label_free.geometry import alignment, mle_id, twonn_id, uniformity
from zoorank.metrics.label_free.lidar import lidar
from zoorank.metrics.label_free.rankme import rankme
from zoorank.score import run_score
from zoorank.score.worker import pool_size
from zoorank.store import METRICS, Store
from zoorank.store.schema import METRICS_COLUMNS

N_AUG, Q = 300, 4


def _augment(images: np.ndarray, rng: np.random.Generator) -> np.ndarray:
    """One random ±1-pixel translation plus pixel noise of each 8×8 digit (flattened to 64)."""
    shifts = rng.integers(-1, 2, size=(len(images), 2))
    out = np.stack([np.roll(im, tuple(s), axis=(0, 1)) for im, s in zip(images, shifts)])
    return (out + rng.normal(0.0, 1.0, out.shape)).reshape(len(images), -1)


def _zoo(images: np.ndarray) -> tuple[dict, dict]:
    """model_id → map from flattened pixels to embeddings, and model_id → (group, family)."""
    rng = np.random.default_rng(0)
    wa, wb, wc = (rng.normal(size=(64, d)) for d in (48, 32, 40))
    rotations = [np.linalg.qr(rng.normal(size=(40, 40)))[0] for _ in range(3)]
    maps = {
        "proj-a": lambda x: np.maximum(x @ wa, 0.0),
        "proj-b": lambda x: np.tanh(x / 16.0 @ wb),
        "collapsed": lambda x: np.ones((len(x), 16)),
    }
    for i, r in enumerate(rotations):
        maps[f"rot-{i}"] = lambda x, r=r: (x @ wc) @ r
    meta = {"proj-a": (None, "nonlinear"), "proj-b": (None, "nonlinear"), "collapsed": (None, None)}
    meta.update({f"rot-{i}": ("rot", "linear") for i in range(3)})
    return maps, meta


@pytest.fixture(scope="module")
def scored(tmp_path_factory, digits, ray_session):
    images, _ = digits
    root = tmp_path_factory.mktemp("score-store")
    store = Store(root)
    pixels = images.reshape(len(images), -1)
    ids = np.arange(len(images), dtype=np.int64) * 3 + 7  # ids need not be positions
    rng = np.random.default_rng(1)
    aug_rows = rng.choice(len(images), N_AUG, replace=False)
    aug_pixels = np.stack([_augment(images[aug_rows], rng) for _ in range(Q)], axis=1)
    maps, meta = _zoo(images)
    arrays, manifest = {}, []
    for mid, fn in maps.items():
        clean = fn(pixels).astype(np.float32)
        views = fn(aug_pixels.reshape(-1, 64)).reshape(N_AUG, Q, -1).astype(np.float32)
        arrays[mid] = (clean, views)
        half = len(ids) // 2  # two shards, written out of order
        store.write_shard("digits", "clean", mid, 1, ids[half:], np.zeros(len(ids) - half),
                          clean[half:])
        store.write_shard("digits", "clean", mid, 0, ids[:half], np.zeros(half), clean[:half])
        store.write_shard("digits", "simclr", mid, 0, np.repeat(ids[aug_rows], Q),
                          np.tile(np.arange(Q), N_AUG), views.reshape(N_AUG * Q, -1))
        for view, rows in (("clean", len(ids)), ("simclr", N_AUG * Q)):
            manifest.append({"dataset": "digits", "view": view, "model_id": mid,
                             "status": "done", "rows": rows, "dim": clean.shape[1],
                             "seconds": 0.1})
    manifest.append({"dataset": "digits", "view": "clean", "model_id": "broken",
                     "fingerprint": "x", "status": "failed", "error": "CheckpointError: corrupt"})

    models = [{"id": mid, "source": "python", "name": "torch.nn:Flatten",
               **({"group": g} if g else {}), **({"family": f} if f else {})}
              for mid, (g, f) in meta.items()]
    models.append({"id": "broken", "source": "python", "name": "torch.nn:Flatten"})
    config = parse_config({
        "store": str(root),
        "seed": 0,
        "datasets": [{"name": "digits", "source": "sklearn_digits"}],
        "models": models,
        "views": [{"name": "clean"}, {"name": "simclr", "samples": N_AUG, "per_sample": Q}],
    })
    # the fingerprints EMBED would record for these entries under this config
    fps = entry_fingerprints(config)
    for row in manifest:
        row.setdefault("fingerprint", fps[(row["dataset"], row["view"], row["model_id"])])
    store.update_manifest(manifest)
    table = run_score(config)
    return {"store": store, "config": config, "table": table, "arrays": arrays,
            "aug_ids": ids[aug_rows], "ids": ids}


def _value(table: pd.DataFrame, model_id: str, metric: str) -> float:
    row = table[(table.model_id == model_id) & (table.metric == metric)]
    assert len(row) == 1, (model_id, metric)
    return float(row.value.iloc[0])


@pytest.mark.timeout(180)
def test_metrics_table_has_contract_columns_and_is_readable_by_duckdb(scored):
    import duckdb
    from deltalake import DeltaTable

    # a Delta table is read as its snapshot: compaction leaves the files it replaced on disk
    # for readers of older snapshots, so a plain read of every Parquet file would count them
    path = scored["store"].local_path(METRICS)
    on_disk = DeltaTable(str(path)).to_pandas()
    assert list(on_disk.columns) == METRICS_COLUMNS
    assert len(on_disk) == len(scored["table"])
    dataset = DeltaTable(str(path)).to_pyarrow_dataset()  # noqa: F841 (DuckDB scans it by name)
    [(count, distinct)] = duckdb.sql(
        "SELECT count(*), count(DISTINCT model_id || metric) FROM dataset").fetchall()
    assert count == distinct == len(on_disk)  # one row per (model, dataset, metric)
    for params in on_disk.params:
        json.loads(params)
    nan_rows = on_disk[on_disk.value.isna()]
    assert all("error" in json.loads(p) for p in nan_rows.params)  # never an unexplained NaN


@pytest.mark.timeout(180)
def test_values_equal_the_metric_functions_on_the_stored_arrays(scored):
    table = scored["table"]
    clean, views = scored["arrays"]["proj-a"]
    # The augmented rows are stored by sample_id: reorder the views the same way.
    views = views[np.argsort(scored["aug_ids"])]
    expected = {
        "rankme": rankme(clean),
        "rankme_aug": rankme(views.reshape(-1, views.shape[-1])),
        "lidar": lidar(views, delta=1e-6, eps=1e-7),
        "twonn_id": twonn_id(clean, normalize=True),
        "mle_id": mle_id(clean, k=20, normalize=True),
        "cluster_learnability": cluster_learnability(clean, n_clusters=round(math.sqrt(1797)),
                                                     seed=0),
        "alignment": alignment(views[:, 0], views[:, 1]),
        "uniformity": uniformity(clean, t=2),
        "coding_rate": coding_rate(clean, eps2=0.5),
        "embedding_norm_mean": float(np.linalg.norm(clean.astype(np.float64), axis=1).mean()),
        "numerical_rank": float(np.linalg.matrix_rank(clean)),
        "duplicate_fraction": 1.0 - len(np.unique(clean, axis=0)) / len(clean),
    }
    for metric, value in expected.items():
        assert _value(table, "proj-a", metric) == pytest.approx(value, rel=1e-9), metric
    row = table[(table.model_id == "proj-a") & (table.metric == "lidar")].iloc[0]
    assert (row.n, row.dim) == (N_AUG, 48)
    assert json.loads(row.params)["delta"] == 1e-6


@pytest.mark.timeout(180)
def test_collapsed_model_ranks_last_on_rank_and_dimension_metrics(scored):
    table = scored["table"]
    healthy = [m for m in scored["arrays"] if m != "collapsed"]
    for metric in ("rankme", "lidar", "numerical_rank"):
        assert _value(table, "collapsed", metric) < min(_value(table, m, metric) for m in healthy)
    row = table[(table.model_id == "collapsed") & (table.metric == "twonn_id")].iloc[0]
    assert math.isnan(row.value) and "duplicates" in json.loads(row.params)["error"]
    assert _value(table, "collapsed", "duplicate_fraction") == pytest.approx(1796 / 1797)


@pytest.mark.timeout(180)
def test_failed_models_get_no_metrics(scored):
    assert "broken" not in set(scored["table"].model_id)


@pytest.mark.timeout(180)
def test_nc_is_one_for_rotated_copies_and_baselines_are_stored(scored):
    table, store = scored["table"], scored["store"]
    nc = table[table.metric == "nc"]
    assert set(nc.model_id) == {"rot-0", "rot-1", "rot-2"}
    assert np.allclose(nc.value, 1.0)
    params = json.loads(nc.params.iloc[0])
    reference = params["reference_size"]
    assert reference == 1797 // 2 and params["k"] == round(0.02 * reference)
    assert params["group"] == "rot" and params["metric"] == "cosine"
    rel = store.read_frame(reliability_path("digits", "rot"))
    assert list(rel.columns) == ["sample_id", "nc", "mean_knn_distance", "embedding_norm",
                                 "feature_variance"]
    assert len(rel) == 1797 - reference and set(rel.sample_id) <= set(scored["ids"])
    assert ((rel.nc >= 0) & (rel.nc <= 1)).all() and np.allclose(rel.nc, 1.0)
    # Rotations keep neighbours and norms but move coordinates: FV sees a difference NC does not.
    assert (rel.feature_variance > 1e-3).all()
    clean = scored["arrays"]["rot-0"][0].astype(np.float64)
    by_id = dict(zip(scored["ids"], np.linalg.norm(clean, axis=1)))
    assert np.allclose(rel.embedding_norm, [by_id[i] for i in rel.sample_id], rtol=1e-5)


@pytest.mark.timeout(180)
def test_clid_is_sum_of_pool_zscores(scored):
    table = scored["table"]
    pool = ["proj-a", "proj-b", "rot-0", "rot-1", "rot-2"]  # collapsed: TwoNN undefined
    cl = np.array([_value(table, m, "cluster_learnability") for m in pool])
    id_ = np.array([_value(table, m, "twonn_id") for m in pool])
    expected = scipy.stats.zscore(cl) + scipy.stats.zscore(id_)
    got = np.array([_value(table, m, "clid") for m in pool])
    assert np.allclose(got, expected)
    assert math.isnan(_value(table, "collapsed", "clid"))
    family = ["proj-a", "proj-b"]
    sub = [pool.index(m) for m in family]
    expected = scipy.stats.zscore(cl[sub]) + scipy.stats.zscore(id_[sub])
    assert np.allclose([_value(table, m, "clid_family") for m in family], expected)
    assert "collapsed" not in set(table[table.metric == "clid_family"].model_id)


@pytest.mark.timeout(180)
def test_rerun_is_a_noop_and_a_changed_embedding_rescores_only_its_model(scored):
    store, config = scored["store"], scored["config"]
    rel_file = store.local_path(reliability_path("digits", "rot"))
    stamps = (store.table_version(METRICS), os.stat(rel_file).st_mtime_ns)
    before = store.read_metrics()
    again = run_score(config)
    assert (store.table_version(METRICS), os.stat(rel_file).st_mtime_ns) == stamps
    pd.testing.assert_frame_equal(again, before)

    # proj-b changes (another constructor argument: new embedding fingerprints) and is
    # re-embedded to the same arrays: its rows and the pool scores change, nothing else.
    saved = {f: store.read_frame(f) for f in ("manifest", METRICS)}
    raw = config.model_dump(mode="json")
    for m in raw["models"]:
        if m["id"] == "proj-b":
            m["model_kwargs"] = {"start_dim": 1}
    changed_config = parse_config(raw)
    fps = entry_fingerprints(changed_config)
    store.update_manifest([{"dataset": "digits", "view": v, "model_id": "proj-b",
                            "fingerprint": fps[("digits", v, "proj-b")], "status": "done",
                            "rows": rows, "dim": 32, "seconds": 0.1}
                           for v, rows in (("clean", 1797), ("simclr", N_AUG * Q))])
    after = run_score(changed_config).set_index(["model_id", "dataset", "metric"])
    old = before.set_index(["model_id", "dataset", "metric"])
    changed = {key for key in old.index if old.loc[key, "fingerprint"] != after.loc[key, "fingerprint"]}
    clean_metrics = {"rankme", "alpha_req", "twonn_id", "mle_id", "cluster_learnability",
                     "uniformity", "coding_rate", "embedding_norm_mean", "numerical_rank",
                     "duplicate_fraction", "rankme_norm", "rankme_proj", "etran_energy", "mst_id"}
    pool = {m for m, *_ in old.index if m != "broken"}
    augmented_metrics = {"rankme_aug", "lidar", "alignment"}
    expected = {("proj-b", "digits", m) for m in clean_metrics | augmented_metrics}
    expected |= {(m, "digits", "clid") for m in pool}
    expected |= {(m, "digits", "clid_family") for m in ("proj-a", "proj-b")}
    assert changed == expected
    # Same arrays, so the recomputed values are the same.
    assert np.allclose(after.loc[list(expected), "value"], old.loc[list(expected), "value"],
                       equal_nan=True)
    for f, data in saved.items():  # the other tests of this module use the original config
        store.write_parquet(f, data)


@pytest.mark.timeout(180)
def test_max_samples_caps_clean_samples_to_a_seeded_subset(scored):
    from zoorank.metrics.suite import select_samples

    config = scored["config"]
    capped = config.model_copy(update={"score": config.score.model_copy(update={"max_samples": 600})})
    table = run_score(capped)
    clean, _ = scored["arrays"]["proj-a"]
    subset = clean[select_samples(scored["ids"], 600, seed=0)]
    row = table[(table.model_id == "proj-a") & (table.metric == "rankme")].iloc[0]
    assert row.n == 600
    assert row.value == pytest.approx(rankme(subset), rel=1e-9)
    lidar_row = table[(table.model_id == "proj-a") & (table.metric == "lidar")].iloc[0]
    assert lidar_row.n == N_AUG  # the augmented set is the view recipe's, not capped


@pytest.mark.parametrize(
    ("tasks", "cpus", "gpus", "expected"),
    [
        (10, 2.0, 0.0, (2, 0.0, 1)),  # CPU: one actor per core, one thread each
        (1, 16.0, 0.0, (1, 0.0, 16)),  # one task: one actor with every core
        (300, 96.0, 8.0, (8, 1.0, 12)),  # GPU node: one actor per GPU, 96 / 8 threads each
        (3, 96.0, 8.0, (3, 1.0, 32)),  # fewer tasks than GPUs: the cores shared by 3
        (300, 4.0, 8.0, (8, 1.0, 1)),  # more GPUs than cores: at least one thread
    ],
)
def test_pool_size_shares_the_cores_among_the_actors(tasks, cpus, gpus, expected):
    actors, gpus_each, threads = pool_size(tasks, 0.5, cpus, gpus)
    assert (actors, gpus_each, threads) == expected
    assert actors * threads <= max(cpus, actors)  # never more threads than cores (≥ 1 each)


def test_on_an_object_store_two_cpu_tasks_share_each_core():
    """Reads wait on requests there: two tasks per core, one BLAS thread each; fewer tasks than
    that, fewer actors; a GPU node keeps one actor per GPU."""
    assert pool_size(10, 0.5, 2.0, 0.0, object_store=True) == (4, 0.0, 1)
    assert pool_size(3, 0.5, 2.0, 0.0, object_store=True) == (3, 0.0, 1)
    assert pool_size(300, 0.5, 96.0, 8.0, object_store=True) == (8, 1.0, 12)


@pytest.mark.timeout(180)
def test_an_ensemble_that_changes_leaves_no_stale_nc_rows_or_tables(scored, tmp_path):
    import shutil

    shutil.copytree(scored["store"].local_path(""), tmp_path / "store")
    spec = scored["config"].model_dump(mode="json", exclude_none=True)
    spec["store"] = str(tmp_path / "store")
    for model in spec["models"]:  # rot-0 and rot-1 form a new pair; rot-2 is on its own
        if model["id"] in ("rot-0", "rot-1"):
            model["group"] = "pair"
        elif model["id"] == "rot-2":
            model.pop("group")
    table = run_score(parse_config(spec))
    nc = table[table["metric"] == "nc"]
    assert sorted(nc["model_id"]) == ["rot-0", "rot-1"]
    assert sorted(p.name for p in (tmp_path / "store" / "reliability" / "digits").iterdir()) == [
        "pair.parquet"]
    # a rotation of the other: NC of the new pair is still 1 for every sample
    assert np.allclose(nc["value"], 1.0)


@pytest.mark.timeout(180)
def test_every_augmented_view_is_scored_under_its_own_name(tmp_path, digits, ray_session):
    images, _ = digits
    pixels = images.reshape(len(images), -1)[:200]
    ids = np.arange(200, dtype=np.int64)
    rng = np.random.default_rng(5)
    maps, _ = _zoo(images)
    views = {"simclr": 50, "heavy": 40}
    models = ["proj-a", "proj-b"]
    config = parse_config({
        "store": str(tmp_path / "store"), "seed": 0,
        "datasets": [{"name": "digits", "source": "sklearn_digits", "limit": 200}],
        "models": [{"id": m, "source": "python", "name": "torch.nn:Flatten"} for m in models],
        "views": [{"name": "clean"}] + [{"name": v, "recipe": "simclr", "samples": n,
                                         "per_sample": Q} for v, n in views.items()],
        "metrics": ["rankme", "lidar", "alignment"],
        "rank": {"primary_metric": "lidar@heavy"},
    })
    store, fps = Store(config.store), entry_fingerprints(config)
    arrays, manifest = {}, []
    for mid in models:
        store.write_shard("digits", "clean", mid, 0, ids, np.zeros(200),
                          maps[mid](pixels).astype(np.float32))
        manifest.append({"dataset": "digits", "view": "clean", "model_id": mid, "status": "done",
                         "fingerprint": fps[("digits", "clean", mid)], "rows": 200})
        for view, n in views.items():
            aug = np.stack([_augment(images[:n], rng) for _ in range(Q)], axis=1)
            E = maps[mid](aug.reshape(-1, 64)).reshape(n, Q, -1).astype(np.float32)
            arrays[(mid, view)] = E
            store.write_shard("digits", view, mid, 0, np.repeat(ids[:n], Q), np.tile(np.arange(Q), n),
                              E.reshape(n * Q, -1))
            manifest.append({"dataset": "digits", "view": view, "model_id": mid, "status": "done",
                             "fingerprint": fps[("digits", view, mid)], "rows": n * Q})
    store.update_manifest(manifest)
    table = run_score(config)
    for mid in models:
        for name, view in (("lidar", "simclr"), ("lidar@heavy", "heavy")):
            assert _value(table, mid, name) == pytest.approx(lidar(arrays[(mid, view)]), rel=1e-6)
        E = arrays[(mid, "heavy")]
        assert _value(table, mid, "alignment@heavy") == pytest.approx(
            alignment(E[:, 0], E[:, 1]), rel=1e-6)
        assert _value(table, mid, "rankme") == pytest.approx(
            rankme(maps[mid](pixels).astype(np.float32)), rel=1e-6)
    assert not (table["metric"] == "rankme@heavy").any()  # clean metrics are not repeated


def test_a_pool_over_a_crashed_term_is_not_fresh_and_is_recomputed_once_the_term_has_a_value():
    """A term row a crashed task left (NaN, ``"crashed": true``) is no term: the CLID rows built
    over it do not carry the catalog's fingerprint (so they never count as fresh), and once the
    term is recomputed the rows carry it and equal z(CL) + z(ID) over the whole pool."""
    from zoorank.catalog import expected_pool_fingerprint
    from zoorank.score.pools import pool_rows

    cl = {"a": 0.9, "b": 0.5, "c": 0.7}
    id_ = {"a": 12.0, "b": 20.0, "c": 7.0}

    def term(model, metric, value, crashed=False):
        params = json.dumps({"crashed": True, "error": "worker died"} if crashed else {})
        return {"model_id": model, "dataset": "d", "metric": metric, "value": value,
                "params": params, "n": 100, "dim": 8, "fingerprint": f"{model}-{metric}"}

    good = [term(m, "cluster_learnability", cl[m]) for m in cl]
    good += [term(m, "twonn_id", id_[m]) for m in id_]
    expected_fps = {(r["model_id"], "d", r["metric"]): r["fingerprint"] for r in good}
    expected = expected_pool_fingerprint("clid", "d", list(cl), None, expected_fps)
    crashed = [r if (r["model_id"], r["metric"]) != ("c", "twonn_id")
               else term("c", "twonn_id", math.nan, crashed=True) for r in good]

    first = pool_rows("clid", "d", list(cl), pd.DataFrame(crashed), seed=0)
    assert {r["fingerprint"] for r in first} != {expected}
    assert math.isnan(next(r["value"] for r in first if r["model_id"] == "c"))

    again = pool_rows("clid", "d", list(cl), pd.DataFrame(good), seed=0)
    assert {r["fingerprint"] for r in again} == {expected}
    z = scipy.stats.zscore(list(cl.values())) + scipy.stats.zscore(list(id_.values()))
    assert np.allclose([next(r["value"] for r in again if r["model_id"] == m) for m in cl], z)


def test_a_task_reads_exactly_the_shards_of_the_snapshot_whose_fingerprints_it_stamps(tmp_path):
    """The plan hands each task the shard lists of the manifest snapshot its fingerprints come
    from; a re-embed committed after planning (new shards, same directory) does not leak into it,
    and a CLID row names its pool by id instead of listing the pool."""
    from zoorank.catalog import build_catalog
    from zoorank.score.pools import pool_rows
    from zoorank.score.worker import load_clean

    store = Store(tmp_path / "store")
    config = parse_config({
        "store": str(tmp_path / "store"), "seed": 0,
        "datasets": [{"name": "digits", "source": "sklearn_digits"}],
        "models": [{"id": m, "source": "python", "name": "torch.nn:Flatten"} for m in "ab"],
        "views": [{"name": "clean"}],
    })
    fps = entry_fingerprints(config)
    ids = np.arange(20, dtype=np.int64)
    old = np.ones((20, 4), np.float32)
    names = {m: store.write_shard("digits", "clean", m, 0, ids, np.zeros(20), old) for m in "ab"}
    store.update_manifest([{"dataset": "digits", "view": "clean", "model_id": m,
                            "fingerprint": fps[("digits", "clean", m)], "status": "done",
                            "rows": 20, "dim": 4, "shards": [names[m]]} for m in "ab"])
    catalog = build_catalog(config)
    plan = catalog.plan_score(catalog.fresh_manifest(store.read_manifest()))
    task = next(t for t in plan.model_tasks if t.model_id == "a")
    assert task.shards == (("clean", (names["a"],)),)
    # a re-embed of "a" lands (new shard, manifest swapped) while the task waits to run
    new = store.write_shard("digits", "clean", "a", 0, ids, np.zeros(20), 2 * old)
    store.update_manifest([{"dataset": "digits", "view": "clean", "model_id": "a",
                            "fingerprint": "another", "status": "done", "rows": 20, "dim": 4,
                            "shards": [new]}])
    _, Z = load_clean(store, "digits", "clean", "a", None, 0, task.shards_of("clean"))
    assert np.array_equal(Z, old)  # what the stamped fingerprint describes, not the newer rows
    _, Z = load_clean(store, "digits", "clean", "a", None, 0)  # the manifest's list: the new one
    assert np.array_equal(Z, 2 * old)

    terms = pd.DataFrame([{"model_id": m, "dataset": "d", "metric": t, "value": v + i,
                           "params": "{}", "n": 10, "dim": 4, "fingerprint": f"{m}{t}"}
                          for i, m in enumerate(["a", "b", "c"])
                          for t, v in (("cluster_learnability", 0.5), ("twonn_id", 3.0))])
    records: list[dict] = []
    rows = pool_rows("clid", "d", ["a", "b", "c"], terms, seed=0, records=records)
    params = [json.loads(r["params"]) for r in rows]
    assert all("pool" not in p and p["pool_id"] == records[0]["pool_id"] for p in params)
    assert json.loads(records[0]["members"]) == ["a", "b", "c"] and records[0]["pool_size"] == 3
