"""The EMBED stage on a local Ray: real images, a tiny real zoo, resume after SIGKILL, failures.

One module-scoped run embeds cifar10 (Parquet), real photos of varied sizes with a corrupt JPEG
(image folder) and digits with seven models: a seeded resnet18 saved as safetensors and as
torch.save (same weights), a python-factory conv net, and four that must fail (corrupt file, wrong
keys, a malicious pickle, NaN features). References are computed in the test process with plain
torch on inputs made by ``zoorank.data`` (whose clean view is checked against timm's transform in
test_data.py).
"""

from __future__ import annotations

import contextlib
import json
import os
import re
import signal
import subprocess
import sys
import time
from pathlib import Path

import numpy as np
import pandas as pd
import pyarrow as pa
import pyarrow.parquet as pq
import pytest
import torch
import yaml
from embed_worker import build_zoo, photo_folder

from zoorank.catalog import build_catalog, plan_entries
from zoorank.config.loading import load_config, parse_config
from zoorank.data import load_samples
from zoorank.data.images import decode_image
from zoorank.data.sources import index_samples
from zoorank.data.views import clean_view, make_views
from zoorank.embed import run_embed
from zoorank.embed.work_plan import chunk_models
from zoorank.errors import ConfigError, InputError
from zoorank.store import Store
from zoorank.zoo import load_model, resolve_models

REPO = Path(__file__).resolve().parents[2]
GOOD = ["r18-st", "r18-pt", "cnn"]
BROKEN = {
    "corrupt": "corrupt",
    "wrong-keys": "keys",
    "malicious": "unsafe pickle refused",
    "nan": "NaN",
}
Q = 3
AUG_SAMPLES = 24


def config_dict(store, zoo, shared_data, photos, models=None, **embed) -> dict:
    return {
        "store": str(store),
        "seed": 7,
        "datasets": [
            {"name": "cifar", "source": "parquet",
             "path": str(shared_data / "cifar10" / "test.parquet"), "label_column": "label",
             "limit": 96},
            {"name": "photos", "source": "image_folder", "path": str(photos)},
            {"name": "digits", "source": "sklearn_digits", "limit": 100},
        ],
        "models": [zoo[m] for m in (models or list(zoo))],
        "views": [{"name": "clean"},
                  {"name": "simclr", "samples": AUG_SAMPLES, "per_sample": Q}],
        "embed": {"batch_size": 16, "num_actors": 1, **embed},
    }


@pytest.fixture(scope="module")
def zoo(tmp_path_factory):
    return build_zoo(tmp_path_factory.mktemp("zoo"))


@pytest.fixture(scope="module")
def photos(shared_data, tmp_path_factory):
    return photo_folder(shared_data, tmp_path_factory.mktemp("photos"), 20)


@pytest.fixture(scope="module")
def embedded(ray_session, zoo, shared_data, photos, tmp_path_factory):
    """(config, manifest rows returned by run_embed, seconds) of one run over everything."""
    config = parse_config(config_dict(tmp_path_factory.mktemp("store"), zoo, shared_data, photos))
    t0 = time.perf_counter()
    rows = run_embed(config)
    return config, rows, time.perf_counter() - t0


def inputs(config, dataset, model_id, sample_ids, view="clean", view_index=None):
    """Normalized inputs made in this process from the decoded images."""
    (spec,) = [d for d in config.datasets if d.name == dataset]
    (model,) = [m for m in resolve_models(config) if m.model_id == model_id]
    table = load_samples(spec, config.seed)
    pos = np.searchsorted(table.sample_id, sample_ids)
    arrays = []
    for i, p in enumerate(pos):
        img = decode_image(table.images[p])
        if view == "clean":
            arrays.append(clean_view(img, model.geometry))
        else:
            views = make_views(img, int(sample_ids[i]), "simclr", model.geometry,
                               int(view_index[i]) + 1, config.seed)
            arrays.append(views[int(view_index[i])])
    x = torch.from_numpy(np.stack(arrays)).permute(0, 3, 1, 2).float() / 255
    mean = torch.tensor(model.normalization.mean).view(1, 3, 1, 1)
    std = torch.tensor(model.normalization.std).view(1, 3, 1, 1)
    return model, (x - mean) / std


@pytest.mark.timeout(240)
def test_good_models_are_done_and_broken_ones_failed_with_their_reason(embedded, zoo):
    config, rows, seconds = embedded
    print(f"embed run: {seconds:.1f} s")
    store = Store(config.store)
    manifest = store.read_manifest().set_index(["dataset", "view", "model_id"])
    assert len(rows) == len(manifest) == 3 * 2 * len(zoo)
    for r in rows.to_dict("records"):
        m = manifest.loc[(r["dataset"], r["view"], r["model_id"])]
        assert m["status"] == r["status"]
        if r["model_id"] in GOOD:
            assert r["status"] == "done", r["error"]
            assert r["dim"] == (16 if r["model_id"] == "cnn" else 512)
            emb = store.read_embeddings(r["dataset"], r["view"], r["model_id"])
            assert len(emb.sample_id) == r["rows"] and emb.embedding.shape[1] == r["dim"]
        else:
            assert r["status"] == "failed"
            assert BROKEN[r["model_id"]] in r["error"], r["error"]
            assert store.shard_names(r["dataset"], r["view"], r["model_id"]) == []


def test_the_manifest_records_each_models_parameter_count(embedded):
    import timm
    from zoo_factories import small_cnn

    config, _, _ = embedded
    manifest = Store(config.store).read_manifest()
    r18 = sum(p.numel() for p in timm.create_model("resnet18", num_classes=0).parameters())
    expected = {"r18-st": r18, "r18-pt": r18,
                "cnn": sum(p.numel() for p in small_cnn().parameters())}
    for model_id, count in expected.items():
        rows = manifest[manifest["model_id"] == model_id]
        assert len(rows) == 6 and (rows["param_count"] == count).all(), rows["param_count"]


def test_malicious_pickle_never_runs(embedded, zoo):
    marker = Path(zoo["malicious"]["checkpoint"]).parent / "pwned"
    assert not marker.exists()


def test_clean_embeddings_equal_a_direct_forward(embedded):
    config, _, _ = embedded
    store = Store(config.store)
    for dataset in ("cifar", "photos", "digits"):
        for model_id in ("r18-st", "cnn"):
            emb = store.read_embeddings(dataset, "clean", model_id)
            assert np.all(emb.view_index == 0)
            model, x = inputs(config, dataset, model_id, emb.sample_id)
            with torch.inference_mode():
                ref = load_model(model)(x).numpy()
            np.testing.assert_allclose(emb.embedding, ref, rtol=1e-4, atol=1e-4)


def test_augmented_views_are_identical_across_models_and_processes(embedded):
    config, _, _ = embedded
    store = Store(config.store)
    for dataset in ("cifar", "photos"):
        st = store.read_embeddings(dataset, "simclr", "r18-st")
        pt = store.read_embeddings(dataset, "simclr", "r18-pt")
        np.testing.assert_array_equal(st.sample_id, pt.sample_id)
        np.testing.assert_allclose(st.embedding, pt.embedding, rtol=1e-5, atol=1e-5)
        ids, grouped = st.grouped()
        assert grouped.shape[1] == Q and np.array_equal(np.unique(st.view_index), np.arange(Q))
        # views of one sample differ from each other (each view_index has its own RNG)
        spread = np.abs(grouped[:, 1:] - grouped[:, :1]).max(axis=(1, 2))
        assert np.all(spread > 1e-3)
        # the same views rebuilt in this process give the stored embeddings
        take = np.arange(0, len(st.sample_id), 7)
        model, x = inputs(config, dataset, "r18-st", st.sample_id[take], "simclr",
                          st.view_index[take])
        with torch.inference_mode():
            ref = load_model(model)(x).numpy()
        np.testing.assert_allclose(st.embedding[take], ref, rtol=1e-4, atol=1e-4)


def test_augmented_views_cover_a_sample_subset_of_the_clean_ones(embedded):
    config, rows, _ = embedded
    store = Store(config.store)
    clean = store.read_embeddings("cifar", "clean", "cnn")
    aug = store.read_embeddings("cifar", "simclr", "cnn")
    ids = np.unique(aug.sample_id)
    assert len(clean.sample_id) == 96 and len(ids) == AUG_SAMPLES
    assert set(ids) <= set(clean.sample_id)
    assert len(aug.sample_id) == AUG_SAMPLES * Q


def test_corrupt_image_is_skipped_and_counted(embedded, photos):
    config, rows, _ = embedded
    store = Store(config.store)
    names = sorted(p.name for p in photos.iterdir())
    corrupt_id = names.index("zz_corrupt.JPEG")
    r = rows.set_index(["dataset", "view", "model_id"])
    clean = r.loc[("photos", "clean", "cnn")]
    assert clean["bad_images"] == 1 and clean["rows"] == len(names) - 1
    emb = store.read_embeddings("photos", "clean", "cnn")
    assert corrupt_id not in emb.sample_id
    assert sorted(emb.sample_id) == [i for i in range(len(names)) if i != corrupt_id]
    aug = r.loc[("photos", "simclr", "cnn")]  # 24 samples asked, the folder has 21: all of them
    assert aug["bad_images"] == 1 and aug["rows"] == (len(names) - 1) * Q
    assert r.loc[("cifar", "clean", "cnn"), "bad_images"] == 0


def test_shards_follow_contract_2_without_duplicates(embedded):
    config, rows, _ = embedded
    root = Path(config.store)
    assert not list(root.rglob(".tmp-*"))
    for r in rows[rows["status"] == "done"].to_dict("records"):
        d = root / "embeddings" / r["dataset"] / r["view"] / r["model_id"]
        parts = sorted(d.glob("part-*.parquet"))
        assert parts
        tables = [pq.read_table(p) for p in parts]
        schema = tables[0].schema
        assert schema.field("sample_id").type == pa.int64()
        assert schema.field("view_index").type == pa.int32()
        assert schema.field("embedding").type == pa.list_(pa.float32(), r["dim"])
        keys = np.concatenate([
            t.column("sample_id").to_numpy() * 1000 + t.column("view_index").to_numpy()
            for t in tables
        ])
        assert len(keys) == len(np.unique(keys)) == r["rows"]


def test_sample_lists_with_labels_are_stored(embedded, shared_data):
    config, _, _ = embedded
    from zoorank.data import read_samples

    samples = read_samples(Store(config.store), "cifar")
    labels = pq.read_table(shared_data / "cifar10" / "test.parquet", columns=["label"])
    labels = labels.column("label").to_numpy()
    assert len(samples) == 96
    assert samples["label"].tolist() == labels[samples["sample_id"].to_numpy()].tolist()


@pytest.mark.timeout(120)
def test_rerun_skips_done_entries_without_touching_their_shards(embedded, zoo, shared_data,
                                                                photos):
    config, rows, _ = embedded
    good = parse_config(config_dict(config.store, zoo, shared_data, photos, models=GOOD))
    shards = sorted(Path(config.store).rglob("part-*.parquet"))
    before = {p: p.stat().st_mtime_ns for p in shards}
    again = run_embed(good)
    assert again.attrs["pipelines"] == []  # nothing ran
    assert set(again["status"]) == {"done"} and len(again) == 3 * 2 * len(GOOD)
    assert {p: p.stat().st_mtime_ns for p in shards} == before
    merged = again.merge(rows, on=["dataset", "view", "model_id"], suffixes=("", "_first"))
    assert (merged["fingerprint"] == merged["fingerprint_first"]).all()


def test_fingerprints_follow_what_changes_the_embeddings(zoo, shared_data, photos, tmp_path):
    base = config_dict(tmp_path, zoo, shared_data, photos, models=["r18-st", "cnn"])

    def fps(data):
        config = parse_config(data)
        indexes = {d.name: index_samples(d, config.seed) for d in config.datasets}
        return {e.key: e.fingerprint for e in plan_entries(config, resolve_models(config), indexes)}

    a = fps(base)
    b = fps({**base, "seed": 8})
    assert a == fps(base)
    # a new seed redraws the augmentations and the limited subsets; not the clean full folder
    assert a[("photos", "clean", "cnn")] == b[("photos", "clean", "cnn")]
    assert a[("photos", "simclr", "cnn")] != b[("photos", "simclr", "cnn")]
    assert a[("cifar", "clean", "cnn")] != b[("cifar", "clean", "cnn")]
    other = dict(base, models=[dict(zoo["r18-st"], checkpoint=zoo["r18-pt"]["checkpoint"]),
                               zoo["cnn"]])
    c = fps(other)
    assert c[("cifar", "clean", "r18-st")] != a[("cifar", "clean", "r18-st")]
    assert c[("cifar", "clean", "cnn")] == a[("cifar", "clean", "cnn")]


def test_models_are_chunked_by_count_or_memory_budget(zoo, shared_data, photos, tmp_path):
    data = config_dict(tmp_path, zoo, shared_data, photos, models=["r18-st", "r18-pt", "cnn"])
    models = resolve_models(parse_config(data))
    by_count = chunk_models(models, parse_config({**data, "embed": {"models_per_actor": 2}}).embed)
    assert [[m.model_id for m in c] for c in by_count] == [["r18-st", "r18-pt"], ["cnn"]]
    r18_bytes = sum(t.numel() * 4 for t in torch.load(zoo["r18-pt"]["checkpoint"]).values())
    one_r18 = (r18_bytes * 1.5) / 1024**3  # room for one resnet18 (+ the tiny cnn), not two
    by_memory = chunk_models(models, parse_config(
        {**data, "embed": {"actor_memory_gb": one_r18}}).embed)
    assert [[m.model_id for m in c] for c in by_memory] == [["r18-st"], ["r18-pt", "cnn"]]


@pytest.mark.timeout(120)
def test_on_bad_image_fail_stops_with_an_input_error_naming_the_file(ray_session, zoo,
                                                                      shared_data, tmp_path):
    folder = photo_folder(shared_data, tmp_path / "few", 3)
    config = parse_config({
        "store": str(tmp_path / "store"),
        "datasets": [{"name": "few", "source": "image_folder", "path": str(folder),
                      "on_bad_image": "fail"}],
        "models": [zoo["cnn"]],
        "embed": {"num_actors": 1},
    })
    with pytest.raises(InputError, match="zz_corrupt.JPEG"):
        run_embed(config)
    assert Store(config.store).read_manifest().empty
    clean = photo_folder(shared_data, tmp_path / "clean", 3, corrupt=False)
    ok = run_embed(config.model_copy(update={"datasets": [
        config.datasets[0].model_copy(update={"path": str(clean)})]}))
    assert set(ok["status"]) == {"done"}  # no undecodable image: `fail` never fires


def test_unknown_view_recipe_is_a_config_error_naming_the_view(zoo, tmp_path):
    config = parse_config({
        "store": str(tmp_path / "store"),
        "datasets": [{"name": "d", "source": "sklearn_digits"}],
        "models": [zoo["cnn"]],
        "views": [{"name": "clean"}, {"name": "mine", "recipe": "mocov9", "per_sample": 2}],
    })
    with pytest.raises(ConfigError, match="'mine'.*'mocov9'"):
        run_embed(config)


def _zoorank(args, cwd, log, env=None, **popen):
    env = env or dict(os.environ, PYTHONPATH=os.pathsep.join([str(REPO / "tests"), str(REPO)]))
    return subprocess.Popen([sys.executable, "-m", "zoorank", *args], cwd=cwd, env=env,
                            stdout=log, stderr=subprocess.STDOUT, **popen)


@pytest.mark.timeout(60)
def test_config_error_exits_2_naming_the_field(tmp_path):
    bad = tmp_path / "bad.yaml"
    bad.write_text(yaml.safe_dump({
        "datasets": [{"name": "d", "source": "sklearn_digits", "limitt": 5}],
        "models": [{"source": "timm", "name": "resnet18"}],
    }))
    with open(tmp_path / "log", "w") as log:
        rc = _zoorank(["embed", str(bad)], tmp_path, log).wait(timeout=50)
    out = (tmp_path / "log").read_text()
    assert rc == 2, out
    assert "limitt" in out and "datasets[0]" in out and "Traceback" not in out


@pytest.mark.timeout(240)
def test_sigkill_mid_run_then_rerun_equals_the_uninterrupted_run(embedded, zoo, shared_data,
                                                                 photos, tmp_path):
    """Two model chunks (one model each); the driver (with the local Ray it started) is killed while
    the second chunk writes shards; the rerun keeps the first chunk's finished entries and ends with
    exactly the embeddings of the uninterrupted run."""
    import psutil

    reference, _, _ = embedded
    models = ["cnn", "r18-pt"]  # chunks: [cnn], [r18-pt]
    data = config_dict(tmp_path / "store", zoo, shared_data, photos, models=models,
                       batch_size=4, models_per_actor=1)
    data["datasets"] = [d for d in data["datasets"] if d["name"] == "digits"]
    cfg = tmp_path / "cfg.yaml"
    cfg.write_text(yaml.safe_dump(data))
    store = Store(data["store"])
    last_dir = Path(data["store"]) / "embeddings" / "digits" / "clean" / "r18-pt"

    with open(tmp_path / "log1", "w") as log:
        proc = _zoorank(["embed", str(cfg)], tmp_path, log, start_new_session=True)
        deadline = time.monotonic() + 180
        while not list(last_dir.glob("part-*.parquet")):
            assert proc.poll() is None, (tmp_path / "log1").read_text()
            assert time.monotonic() < deadline
            time.sleep(0.01)
        started = psutil.Process(proc.pid).children(recursive=True)
        os.kill(proc.pid, signal.SIGKILL)
        proc.wait()
    # the Ray it started (raylet, workers) dies with the driver; its leftover agents are ours to
    # clean up
    psutil.wait_procs(started, timeout=10)
    with contextlib.suppress(ProcessLookupError):
        os.killpg(proc.pid, signal.SIGKILL)
    at_kill = store.read_manifest()
    done_at_kill = at_kill[at_kill["status"] == "done"]
    assert set(done_at_kill["model_id"]) <= {"cnn"}
    kept = {p: p.stat().st_mtime_ns for m in done_at_kill["model_id"].unique()
            for p in Path(data["store"]).glob(f"embeddings/digits/*/{m}/part-*.parquet")}

    rows = run_embed(load_config(cfg))  # the rerun, on the session's Ray
    assert set(rows["status"]) == {"done"}
    assert {p: p.stat().st_mtime_ns for p in kept} == kept  # finished entries were not redone

    manifest = store.read_manifest()
    assert len(manifest) == 2 * len(models) and set(manifest["status"]) == {"done"}
    ref_store = Store(reference.store)
    for r in manifest.to_dict("records"):
        got = store.read_embeddings("digits", r["view"], r["model_id"])
        ref = ref_store.read_embeddings("digits", r["view"], r["model_id"])
        keys = got.sample_id * 1000 + got.view_index
        assert len(np.unique(keys)) == len(keys) == r["rows"]
        np.testing.assert_array_equal(got.sample_id, ref.sample_id)
        np.testing.assert_array_equal(got.view_index, ref.view_index)
        np.testing.assert_allclose(got.embedding, ref.embedding, rtol=1e-5, atol=1e-5)
    assert not list(Path(data["store"]).rglob(".tmp-*"))



# -- issue 15: one task runner, one failure contract ---------------------------------------------
def _killer_zoo(store: Path, marker: Path) -> dict:
    """Four python models in one chunk; ``killer``'s forward SIGKILLs its worker while ``marker``
    exists."""
    models = [{"id": f"cnn-{w}", "source": "python", "name": "zoo_factories:small_cnn",
               "model_kwargs": {"width": w}, "input_size": 16} for w in (4, 6, 8)]
    models.append({"id": "killer", "source": "python", "name": "zoo_factories:kills_its_worker",
                   "model_kwargs": {"marker": str(marker)}, "input_size": 16})
    return {"store": str(store), "seed": 0,
            "datasets": [{"name": "digits", "source": "sklearn_digits", "limit": 48}],
            "models": models, "metrics": ["rankme", "twonn_id"],
            "embed": {"batch_size": 16, "models_per_actor": 4}}


def _entry_files(store: Path, model_id: str) -> dict[Path, int]:
    return {p: p.stat().st_mtime_ns
            for p in store.glob(f"embeddings/*/*/{model_id}/part-*.parquet")}


@pytest.mark.timeout(300)
def test_a_model_that_kills_its_worker_is_recorded_and_the_run_goes_on(ray_session, tmp_path):
    """One chunk of four models whose fourth SIGKILLs its worker: ``zoorank run`` exits 0, the
    three others are done, the fourth failed with a reason naming a dead worker; the rerun tries again
    only the fourth (here it no longer kills) and touches nothing that was done."""
    from zoorank.cli import main

    marker = tmp_path / "kill"
    marker.write_text("")
    data = _killer_zoo(tmp_path / "store", marker)
    cfg = tmp_path / "run.yaml"
    cfg.write_text(yaml.safe_dump(data))
    store = Store(data["store"])
    good = ["cnn-4", "cnn-6", "cnn-8"]

    assert main(["run", str(cfg)]) == 0
    manifest = store.read_manifest().set_index("model_id")
    assert (manifest.loc[good, "status"] == "done").all()
    assert manifest.loc["killer", "status"] == "failed"
    assert "worker died" in manifest.loc["killer", "error"]
    metrics = store.read_metrics()
    assert set(metrics["model_id"]) == set(good)
    files = {m: _entry_files(Path(data["store"]), m) for m in good}
    assert all(files.values())

    marker.unlink()
    assert main(["run", str(cfg)]) == 0
    again = store.read_manifest().set_index("model_id")
    assert (again["status"] == "done").all()
    pd.testing.assert_frame_equal(again.loc[good].drop(columns="error"),  # rows untouched
                                  manifest.loc[good].drop(columns="error"), check_dtype=False)
    assert again.loc[good, "error"].isna().all()
    assert {m: _entry_files(Path(data["store"]), m) for m in good} == files  # shards untouched
    assert again.loc["killer", "rows"] == 48
    rankme = store.read_metrics().set_index(["model_id", "metric"])["value"]
    for m in good:  # the done models' metric rows are the first run's
        assert rankme.loc[(m, "rankme")] == metrics.set_index(["model_id", "metric"]).loc[
            (m, "rankme"), "value"]


_NODE_LOSS_DRIVER = """
import json, os, sys, threading, time
from ray.cluster_utils import Cluster
from loopback_cluster import _node_ports
import ray

cfg, where, tmp = sys.argv[1:4]
common = {"object_store_memory": 150 * 1024**2}
for d in ("ray", "w0", "w1"):  # Ray's default temp dir, where it notes the cluster, is $RAY_TMPDIR/ray
    os.makedirs(os.path.join(tmp, d), exist_ok=True)
cluster = Cluster(initialize_head=True, head_node_args={
    **common, **_node_ports(), "num_cpus": 1, "num_gpus": 0,
    "temp_dir": os.path.join(tmp, "ray"), "include_dashboard": False})
for i in range(2):  # two GPU workers (declared GPUs; torch is CPU)
    cluster.add_node(**common, **_node_ports(), num_cpus=1, num_gpus=1,
                     temp_dir=os.path.join(tmp, f"w{i}"))
cluster.wait_for_nodes(timeout=240)
ray.init(address=cluster.address)
removed = {}

def remove_a_node_mid_embed():
    while not os.listdir(where):
        time.sleep(0.05)
    node_id = os.listdir(where)[0]
    for node in list(cluster.worker_nodes):
        if node.node_id == node_id:
            cluster.remove_node(node, allow_graceful=False)
            removed["node"] = node_id

threading.Thread(target=remove_a_node_mid_embed, daemon=True).start()
from zoorank.cli import main
rc = main(["run", cfg])
print("RESULT " + json.dumps({"rc": rc, "removed": removed.get("node")}), flush=True)
ray.shutdown()
for node in [*cluster.worker_nodes, cluster.head_node]:  # no graceful drain: throwaway nodes
    cluster.remove_node(node, allow_graceful=False)
"""


@pytest.mark.slow
@pytest.mark.timeout(600)
def test_a_worker_node_lost_mid_embed_loses_no_model(tmp_path):
    """A loopback cluster of a head and two GPU worker nodes, two chunks of two models; the node
    that embeds ``slow`` is removed (its raylet and workers killed) while ``slow``'s forward runs.
    The lost chunk's models run again one per task on the other node: ``zoorank run`` exits 0
    with every model done, and a rerun finds nothing to redo."""
    import shutil
    import tempfile

    from loopback_cluster import base_env

    where = tmp_path / "nodes"
    where.mkdir()
    models = [{"id": f"cnn-{w}", "source": "python", "name": "zoo_factories:small_cnn",
               "model_kwargs": {"width": w}, "input_size": 16} for w in (4, 6, 8)]
    models.insert(1, {"id": "slow", "source": "python", "name": "zoo_factories:signals_its_node",
                      "model_kwargs": {"where": str(where), "seconds": 2.0}, "input_size": 16})
    data = {"store": str(tmp_path / "store"), "seed": 0,
            "datasets": [{"name": "digits", "source": "sklearn_digits", "limit": 48}],
            "models": models, "metrics": ["rankme"],
            "embed": {"batch_size": 16, "models_per_actor": 2, "device": "cuda",
                      "allow_cpu_torch": True, "precision": "fp32",
                      "num_cpus_per_actor": 0.25},
            "score": {"num_cpus_per_actor": 0.25}}
    cfg = tmp_path / "run.yaml"
    cfg.write_text(yaml.safe_dump(data))
    script = tmp_path / "driver.py"
    script.write_text(_NODE_LOSS_DRIVER)
    ray_tmp = tempfile.mkdtemp(prefix="zr-", dir="/tmp")  # Ray's socket paths must stay short
    env = base_env({"RAY_TMPDIR": ray_tmp, "ZOORANK_PROGRESS": "0",
                    "PYTHONPATH": f"{REPO}{os.pathsep}{REPO / 'tests'}"})
    try:
        out = subprocess.run([sys.executable, str(script), str(cfg), str(where), ray_tmp],
                             env=env, capture_output=True, text=True, timeout=540,
                             start_new_session=True)
    finally:
        shutil.rmtree(ray_tmp, ignore_errors=True)
    log = out.stdout[-5000:] + out.stderr[-3000:]
    line = next((x for x in out.stdout.splitlines() if x.startswith("RESULT ")), None)
    assert line is not None, log
    result = json.loads(line[7:])
    assert result["rc"] == 0 and result["removed"], log
    # ``slow`` ran on the removed node, then again (split from its chunk) on the other one
    assert result["removed"] in os.listdir(where) and len(os.listdir(where)) == 2, log
    store = Store(data["store"])
    manifest = store.read_manifest()
    assert set(manifest["status"]) == {"done"}, manifest
    assert set(manifest["model_id"]) == {m["id"] for m in models}
    assert (manifest["rows"] == 48).all()
    assert set(store.read_metrics()["model_id"]) == {m["id"] for m in models}
    files = {m["id"]: _entry_files(Path(data["store"]), m["id"]) for m in models}

    rows = run_embed(load_config(cfg))  # the rerun (on this session's Ray): nothing to redo
    assert set(rows["status"]) == {"done"} and rows.attrs["pipelines"] == []
    assert {m["id"]: _entry_files(Path(data["store"]), m["id"]) for m in models} == files


# -- issue 9/10: concurrent chunks, compact entries, verified manifest, honest fingerprints --------
def test_verify_rows_accepts_exactly_one_row_per_sample_and_view_index():
    from zoorank.embed.work_plan import verify_rows

    ids = np.array([4, 9, 11])
    sid, vi = np.repeat(ids, 3), np.tile(np.arange(3), 3)
    perm = np.random.default_rng(0).permutation(9)
    assert verify_rows(sid[perm], vi[perm], ids, 3) is None
    assert "incomplete" in verify_rows(sid[:8], vi[:8], ids, 3)
    dup = vi.copy()
    dup[1] = 0  # (4, 0) twice, (4, 1) missing: right count, wrong rows
    assert verify_rows(sid, dup, ids, 3) is not None
    other = sid.copy()
    other[-3:] = 12  # a sample that is not expected
    assert verify_rows(other, vi, ids, 3) is not None


def test_auto_device_is_cuda_when_the_cluster_has_or_can_add_gpus():
    from zoorank.catalog import planned_precision
    from zoorank.config import EmbedOptions
    from zoorank.embed.work_plan import choose_device

    assert choose_device("auto", 0, 0) == "cpu"
    assert choose_device("auto", 2, 0) == "cuda"
    assert choose_device("auto", 0, 8) == "cuda"  # autoscaling GPU workers that start at zero
    assert choose_device("cpu", 4, 8) == "cpu"
    # auto on a device not known yet stays auto: the worker resolves it and the manifest records it
    assert planned_precision(EmbedOptions()) == "auto"
    assert planned_precision(EmbedOptions(device="cpu")) == "fp32"
    assert planned_precision(EmbedOptions(), "cuda") == "auto"
    assert planned_precision(EmbedOptions(precision="fp16")) == "fp16"


def test_slices_keep_entries_to_a_few_files():
    from zoorank.embed.work_plan import SLICE_MIN_ROWS, slices_for

    assert slices_for(chunks=1, workers=8, smallest_entry_rows=512, parts=40) == 1
    assert slices_for(1, 8, 8 * SLICE_MIN_ROWS, 40) == 8
    assert slices_for(4, 8, 8 * SLICE_MIN_ROWS, 40) == 2  # 8 GPUs over 4 chunks
    assert slices_for(16, 8, 10**6, 40) == 1  # more chunks than GPUs: one task each
    assert slices_for(1, 8, 10**6, 3) == 3  # never more slices than cache parts


def test_fingerprints_hold_precision_and_dataset_content_not_its_path(zoo, shared_data, photos,
                                                                      tmp_path):
    import shutil

    src = shared_data / "cifar10" / "test.parquet"
    copy = tmp_path / "elsewhere" / "cifar.parquet"
    copy.parent.mkdir()
    shutil.copy(src, copy)
    base = config_dict(tmp_path, zoo, shared_data, photos, models=["cnn"])

    def fps(data, precision="fp32"):
        config = parse_config(data)
        indexes = {d.name: index_samples(d, config.seed) for d in config.datasets}
        return {e.key: e.fingerprint
                for e in plan_entries(config, resolve_models(config), indexes, precision)}

    a = fps(base)
    moved = dict(base, datasets=[dict(base["datasets"][0], path=str(copy)),
                                 *base["datasets"][1:]])
    assert fps(moved) == a  # same bytes, other path
    assert fps(base, "bf16")[("cifar", "clean", "cnn")] != a[("cifar", "clean", "cnn")]
    pq.write_table(pq.read_table(src).slice(0, 5000), copy)  # other bytes at the same path
    assert fps(moved)[("cifar", "clean", "cnn")] != a[("cifar", "clean", "cnn")]
    assert fps(moved)[("digits", "clean", "cnn")] == a[("digits", "clean", "cnn")]


@pytest.mark.timeout(300)
def test_chunks_run_together_and_a_512_row_entry_is_at_most_two_files(ray_session, zoo,
                                                                       shared_data, photos,
                                                                       tmp_path, monkeypatch):
    from zoorank.embed import viewcache
    from zoorank.embed import work_plan as embedplan

    def config(store, **embed):
        data = config_dict(tmp_path / store, zoo, shared_data, photos,
                           models=["r18-st", "r18-pt", "cnn"], **embed)
        data["datasets"] = [{"name": "digits", "source": "sklearn_digits", "limit": 512}]
        data["views"] = [{"name": "clean"}]
        return parse_config(data)

    # three chunks on two CPUs' worth of tasks: all submitted at once, no pool after pool
    whole = run_embed(config("whole", models_per_actor=1, num_actors=4, batch_size=64))
    stats = whole.attrs["pipelines"]
    assert len(stats) == 3 and set(whole["status"]) == {"done"}
    submitted = [s["submitted"] for s in stats]
    assert max(submitted) - min(submitted) < 1.0  # every chunk's task was submitted at once
    assert all(s["nodes"] == [ray_session.get_runtime_context().get_node_id()] for s in stats)
    store = Store(tmp_path / "whole")
    for r in whole.to_dict("records"):
        assert r["rows"] == 512
        assert 1 <= len(store.shard_names(r["dataset"], r["view"], r["model_id"])) <= 2
    assert not store.exists("cache/views/digits")  # the decoded views go with the last chunk

    # one chunk sliced over two tasks (each keeps ≥ 256 rows): two files, the same rows
    monkeypatch.setattr(embedplan, "SLICE_MIN_ROWS", 256)
    monkeypatch.setattr(viewcache, "PART_ROWS", 128)  # 4 cache parts to share out
    sliced = run_embed(config("sliced", models_per_actor=3, num_actors=2, batch_size=64))
    assert sliced.attrs["pipelines"][0]["actors"] == 2
    other = Store(tmp_path / "sliced")
    for r in sliced.to_dict("records"):
        assert len(other.shard_names(r["dataset"], r["view"], r["model_id"])) == 2
        a = store.read_embeddings(r["dataset"], r["view"], r["model_id"])
        b = other.read_embeddings(r["dataset"], r["view"], r["model_id"])
        np.testing.assert_array_equal(a.sample_id, b.sample_id)
        np.testing.assert_allclose(a.embedding, b.embedding, rtol=1e-5, atol=1e-5)


@pytest.mark.slow
@pytest.mark.timeout(300)
def test_sigkill_between_clear_and_rewrite_leaves_entries_pending(ray_session, zoo, shared_data,
                                                                  photos, tmp_path):
    """A re-embed (new seed: new subsets) is paused after it cleared its entries; SIGKILL; the
    manifest says pending with the new fingerprints (never done without rows), and a rerun ends
    equal to a fresh run. The killed `zoorank embed` is a process of its own joined to the
    session's Ray (``--address``): what the kill leaves is the driver's manifest commits."""
    import psutil

    data = config_dict(tmp_path / "store", zoo, shared_data, photos, models=["cnn"])
    data["datasets"] = [{"name": "digits", "source": "sklearn_digits", "limit": 40}]
    first = run_embed(parse_config(data))
    assert set(first["status"]) == {"done"}
    store = Store(data["store"])
    data["seed"] = 8
    cfg = tmp_path / "cfg.yaml"
    cfg.write_text(yaml.safe_dump(data))
    keys = [("digits", v, "cnn") for v in ("clean", "simclr")]

    env = {"ZOORANK_TEST_PAUSE_AFTER_CLEAR": "120"}
    with open(tmp_path / "log", "w") as log:
        address = ray_session.get_runtime_context().gcs_address
        proc = _zoorank(["embed", str(cfg), "--address", address], tmp_path, log,
                        start_new_session=True,
                        env=dict(os.environ, **env,
                                 PYTHONPATH=os.pathsep.join([str(REPO / "tests"), str(REPO)])))
        deadline = time.monotonic() + 150
        while True:
            m = store.read_manifest()
            if (m["status"] == "pending").sum() == 2 and not any(store.shard_names(*k)
                                                                 for k in keys):
                break
            assert proc.poll() is None, (tmp_path / "log").read_text()
            assert time.monotonic() < deadline
            time.sleep(0.2)
        started = psutil.Process(proc.pid).children(recursive=True)
        os.killpg(proc.pid, signal.SIGKILL)
        proc.wait()
    psutil.wait_procs(started, timeout=10)

    m = store.read_manifest().set_index(["dataset", "view", "model_id"])
    config = load_config(cfg)
    planned = build_catalog(config).entries  # the fingerprints EMBED may give each entry
    for k in keys:
        assert m.loc[k, "status"] == "pending" and m.loc[k, "fingerprint"] in planned[k]
        assert store.shard_names(*k) == []
    assert store.done_entries() == {}  # what score and rank read

    rows = run_embed(config)  # the rerun
    assert set(rows["status"]) == {"done"}
    fresh_data = dict(data, store=str(tmp_path / "fresh"))
    run_embed(parse_config(fresh_data))
    fresh = Store(fresh_data["store"])
    for k in keys:
        a, b = store.read_embeddings(*k), fresh.read_embeddings(*k)
        np.testing.assert_array_equal(a.sample_id, b.sample_id)
        np.testing.assert_array_equal(a.view_index, b.view_index)
        np.testing.assert_allclose(a.embedding, b.embedding, rtol=1e-6, atol=1e-6)


def test_gpu_scheduled_work_runs_on_cpu_torch_only_when_allowed(monkeypatch):
    from zoorank.embed.embedder import torch_device

    monkeypatch.delenv("ZOORANK_GPU_AS_CPU", raising=False)
    if torch.cuda.is_available():  # a worker with CUDA runs on it, allowed CPU or not
        assert torch_device("cuda", False) == torch_device("cuda", True) == "cuda"
        assert torch_device("cpu", False) == "cpu"
        return
    assert torch_device("cpu", False) == "cpu"
    with pytest.raises(RuntimeError, match="allow_cpu_torch"):
        torch_device("cuda", False)
    assert torch_device("cuda", True) == "cpu"
    monkeypatch.setenv("ZOORANK_GPU_AS_CPU", "1")
    assert torch_device("cuda", False) == "cpu"


@pytest.mark.timeout(60)
def test_cuda_without_gpus_is_a_clear_error_or_a_bounded_wait(ray_session):
    from zoorank.config import EmbedOptions
    from zoorank.embed.resources import cluster_resources
    from zoorank.runtime import autoscaler_gpus, cluster_gpus, wait_for_gpus

    assert cluster_gpus() == 0 and autoscaler_gpus() == 0  # a local Ray: no autoscaler
    with pytest.raises(ConfigError, match="embed.device"):
        cluster_resources(EmbedOptions(device="cuda"))
    assert cluster_resources(EmbedOptions()).device == "cpu"
    t0 = time.monotonic()
    with pytest.raises(TimeoutError, match="no GPU"):
        wait_for_gpus(2, timeout_s=1.0, poll_s=0.2)
    assert time.monotonic() - t0 < 10


@pytest.mark.timeout(300)
def test_dataset_and_store_on_s3_embed_as_the_local_run(ray_session, s3_server, zoo, shared_data,
                                                        photos, tmp_path):
    """Parquet and image folder on a loopback S3, store there too: the same ids and embeddings as
    the local run, each entry verified and one file."""
    src = shared_data / "cifar10" / "test.parquet"
    small = tmp_path / "cifar300.parquet"
    pq.write_table(pq.read_table(src).slice(0, 300), small, row_group_size=64)
    s3_server.bucket("inputs")
    s3_server.client.upload_file(str(small), "inputs", "cifar300.parquet")
    for p in sorted(photos.iterdir()):
        s3_server.client.upload_file(str(p), "inputs", f"photos/{p.name}")

    def config(store, parquet, folder):
        data = config_dict(store, zoo, shared_data, photos, models=["cnn"])
        data["datasets"] = [
            {"name": "cifar", "source": "parquet", "path": parquet, "limit": 40},
            {"name": "photos", "source": "image_folder", "path": folder},
        ]
        return parse_config(data)

    local = run_embed(config(tmp_path / "local", str(small), str(photos)))
    remote = run_embed(config(s3_server("stores/run1"), s3_server("inputs/cifar300.parquet"),
                              s3_server("inputs/photos")))
    assert local["status"].tolist() == remote["status"].tolist()
    assert set(local["status"]) == {"done"}
    a, b = Store(tmp_path / "local"), Store(s3_server("stores/run1"))
    for r in remote.to_dict("records"):
        key = (r["dataset"], r["view"], r["model_id"])
        assert len(b.shard_names(*key)) == 1
        x, y = a.read_embeddings(*key), b.read_embeddings(*key)
        np.testing.assert_array_equal(x.sample_id, y.sample_id)
        np.testing.assert_array_equal(x.view_index, y.view_index)
        np.testing.assert_allclose(x.embedding, y.embedding, rtol=1e-6, atol=1e-6)
    assert not b.exists("cache/views/cifar")  # the view cache is gone once the entries are done


@pytest.mark.timeout(300)
def test_progress_bars_end_at_their_totals_and_count_images_read_once(ray_session, zoo,
                                                                       shared_data, photos,
                                                                       tmp_path, capfd,
                                                                       monkeypatch):
    """Three models in one chunk read 40 clean + 8 × 2 augmented view rows once between them:
    the images bar ends at 56/56 (the old total counted every model's rows: 56/168), the entries
    bar at 6/6, a failed model included."""
    monkeypatch.setenv("ZOORANK_PROGRESS", "1")
    data = config_dict(tmp_path / "store", zoo, shared_data, photos,
                       models=["cnn", "corrupt"], models_per_actor=3, num_actors=1)
    data["models"].append({**zoo["cnn"], "id": "cnn-again"})
    data["datasets"] = [{"name": "digits", "source": "sklearn_digits", "limit": 40}]
    data["views"] = [{"name": "clean"}, {"name": "simclr", "samples": 8, "per_sample": 2}]
    out = run_embed(parse_config(data))
    assert len(out.attrs["pipelines"]) == 1  # one chunk: one read of the decoded views
    expected = 40 + 8 * 2
    err = capfd.readouterr().err
    bars = dict(re.findall(r"^(images|entries done)\s.*?(\d+/\d+)", err, re.MULTILINE))
    assert bars == {"images": f"{expected}/{expected}", "entries done": "6/6"}, err
    assert out.attrs["progress"] == {"entries": (6, 6), "images": (expected, expected)}
