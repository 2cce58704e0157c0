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
import os
import signal
import subprocess
import sys
import time
from pathlib import Path

import numpy as np
import pyarrow as pa
import pyarrow.parquet as pq
import pytest
import torch
import yaml
from embed_worker import build_zoo, photo_folder

from zoorank.config import load_config, parse_config
from zoorank.data import clean_view, decode_image, load_samples, make_views
from zoorank.embed import chunk_models, plan_entries, run_embed
from zoorank.errors import ConfigError, InputError
from zoorank.sources import index_samples
from zoorank.store import Store
from zoorank.zoo import load_model, resolve_models

REPO = Path(__file__).resolve().parents[1]
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
        img = decode_image(table.image[p])
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


def test_unknown_view_recipe_is_a_config_error_naming_the_view(zoo, tmp_path):
    config = parse_config({
        "store": str(tmp_path / "store"),
        "datasets": [{"name": "d", "source": "sklearn_digits"}],
        "models": [zoo["cnn"]],
        "views": [{"name": "clean"}, {"name": "mine", "recipe": "mocov9", "per_sample": 2}],
    })
    with pytest.raises(ConfigError, match="'mine'.*'mocov9'"):
        run_embed(config)


def _zoorank(args, cwd, log, **popen):
    env = dict(os.environ, PYTHONPATH=os.pathsep.join([str(REPO / "tests"), str(REPO)]))
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
    """Two model chunks; the driver (with the local Ray it started) is killed while the second chunk
    writes shards; the rerun keeps the first chunk's finished entries and ends with exactly the
    embeddings of the uninterrupted run."""
    import psutil

    reference, _, _ = embedded
    models = ["cnn", "r18-st", "r18-pt"]  # chunks: [cnn, r18-st], [r18-pt]
    data = config_dict(tmp_path / "store", zoo, shared_data, photos, models=models,
                       batch_size=4, models_per_actor=2)
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
    assert set(done_at_kill["model_id"]) <= {"cnn", "r18-st"}
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

