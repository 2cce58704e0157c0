"""Hostile images and datasets (issue 16): every case of the generated corpus has its defined
outcome — decoded correctly (upright, 16-bit range mapped to 8 bits, first frame, transparency on
white), or skipped and counted with its reason, or an input error (exit 2) naming the dataset or
column. The corpus is made at test time (``tests/hostile_corpus.py``).
"""

from __future__ import annotations

import os
import subprocess
import sys
from pathlib import Path

import numpy as np
import pandas as pd
import pytest
import yaml
from hostile_corpus import (
    PHOTO_SIZE,
    animated_gif,
    exif_rotated_jpeg,
    gray16_png,
    image_cases,
    palette_alpha_png,
    photo,
    upright_jpeg,
    write_folder,
    write_parquet,
)
from PIL import Image

from zoorank.config import DatasetSpec
from zoorank.data import sample_reader
from zoorank.data.images import MAX_DECODE_PIXELS, BadImageError, decode_image
from zoorank.data.sample_reader import UNREADABLE, UnreadableError, read_unit, read_units
from zoorank.data.sources import index_samples
from zoorank.data.views import ViewGeometry, ViewPlan, clean_view, decode_views
from zoorank.embed.viewcache import check_decoded
from zoorank.errors import InputError

REPO = Path(__file__).resolve().parents[2]


@pytest.fixture(scope="module")
def corpus():
    return {c.name: c for c in image_cases(big=True)}


# -- images ----------------------------------------------------------------------------------------
def test_every_corpus_image_is_decoded_or_refused_with_its_reason(corpus):
    for case in corpus.values():
        if case.outcome == "embedded":
            img = decode_image(case.data, name=case.name)
            assert img.mode == "RGB" and img.width * img.height <= MAX_DECODE_PIXELS, case.name
        else:
            with pytest.raises(BadImageError, match=case.reason) as err:
                decode_image(case.data, name=case.name)
            assert case.name in str(err.value)


def test_exif_rotated_jpeg_decodes_upright():
    upright = np.asarray(decode_image(upright_jpeg()), dtype=np.float64)
    rotated = np.asarray(decode_image(exif_rotated_jpeg()), dtype=np.float64)
    assert rotated.shape == upright.shape == (PHOTO_SIZE[1], PHOTO_SIZE[0], 3)
    # JPEG noise only (both are quality 95 4:4:4 of the same pixels); sideways would not even match
    # in shape, and a 180° turn differs by ~100 grey levels on these gradients.
    assert np.abs(rotated - upright).mean() < 2.0
    assert np.abs(rotated - photo()).mean() < 2.0


def test_16_bit_grayscale_maps_its_full_range_to_8_bits():
    data, eight_bit = gray16_png()
    out = np.asarray(decode_image(data))
    for c in range(3):
        np.testing.assert_array_equal(out[..., c], eight_bit)
    assert out.min() == 0 and out.max() == 255


def test_palette_transparency_is_composited_on_white():
    out = np.asarray(decode_image(palette_alpha_png()))
    assert (out[:, :16] == 255).all()
    assert (out[:, 16:] == [255, 0, 0]).all()


def test_animation_gives_its_first_frame():
    out = np.asarray(decode_image(animated_gif()))
    assert (np.abs(out.astype(int) - [255, 0, 0]) <= 2).all()


def test_cmyk_la_rgba_and_webp_decode_to_the_source_colours(corpus):
    src = photo().astype(np.float64)
    for name, tol in (("cmyk.jpg", 4.0), ("rgba.png", 0.0), ("lossless.webp", 0.0)):
        out = np.asarray(decode_image(corpus[name].data), dtype=np.float64)
        assert np.abs(out - src).mean() <= tol, name
    la = np.asarray(decode_image(corpus["la.png"].data))
    for c in range(3):
        np.testing.assert_array_equal(la[..., c], photo()[..., 0])


def test_huge_jpeg_decodes_at_a_dct_scale_within_the_pixel_cap(corpus):
    img = decode_image(corpus["huge-12000.jpg"].data)
    assert img.size == (6000, 6000)
    arr = np.asarray(img)
    assert abs(int(arr[3000, 100, 0]) - 40) <= 3 and abs(int(arr[3000, 5900, 0]) - 128) <= 3


def test_extreme_aspect_clean_view_resamples_the_crop_box_only():
    g = ViewGeometry(16, "bilinear", 1.0)
    strip = decode_image(image_cases(big=False)[-2].data)  # the 1×20000 strip
    assert strip.size == (1, 20000)
    np.testing.assert_array_equal(clean_view(strip, g), np.full((16, 16, 3), [10, 200, 30]))
    # a moderate extreme aspect: the box path equals resize-then-crop away from the box's edges
    rng = np.random.default_rng(0)
    col = np.repeat(np.cumsum(rng.integers(0, 3, 600))[:, None], 6, axis=1) % 256
    img = Image.fromarray(np.stack([col] * 3, -1).astype(np.uint8))
    box = clean_view(img, g).astype(int)
    full = img.resize((16, 1600), Image.Resampling.BILINEAR).crop((0, 792, 16, 808))
    assert np.abs(box[1:-1] - np.asarray(full, dtype=int)[1:-1]).max() <= 2


def test_decode_views_skips_and_counts_each_bad_image_with_its_reason(corpus):
    cases = list(corpus.values())
    batch = {
        "sample_id": np.arange(len(cases)),
        "payload": np.array([c.data for c in cases] + [None], dtype=object)[:-1],
        "name": np.array([c.name for c in cases], dtype=object),
    }
    plans = [ViewPlan("clean", "clean", 1, np.arange(len(cases)), is_clean=True)]
    out = decode_views(batch, ViewGeometry(16, "bicubic", 0.875), plans, seed=0)
    assert out["bad"].tolist() == [c.outcome == "skipped" for c in cases]
    for c, err in zip(cases, out["error"]):
        assert (c.reason in err and c.name in err) if c.outcome == "skipped" else err == ""


# -- datasets --------------------------------------------------------------------------------------
def test_parquet_with_no_rows_is_an_input_error_naming_the_dataset(tmp_path):
    path = write_parquet(tmp_path / "empty.parquet", [])
    with pytest.raises(InputError, match="dataset 'empty'.*no rows"):
        index_samples(DatasetSpec(name="empty", source="parquet", path=str(path)), 0)


def test_string_labels_become_classes_in_sorted_order_or_their_classes_json(tmp_path):
    good = upright_jpeg()
    path = write_parquet(tmp_path / "d.parquet", [good] * 4, ["dog", "cat", None, "dog"])
    spec = DatasetSpec(name="d", source="parquet", path=str(path), label_column="label")
    index = index_samples(spec, 0)
    assert index.label.tolist() == [1, 0, pd.NA, 1] and index.label_names == ("cat", "dog")
    (tmp_path / "classes.json").write_text('{"classes": ["dog", "cat", "bird"]}')
    index = index_samples(spec, 0)
    assert index.label.tolist() == [0, 1, pd.NA, 0] and index.label_names == ("dog", "cat", "bird")


@pytest.mark.parametrize("labels, ok", [([1.0, 2.0, None], True), ([0.5, 1.0, 2.0], False),
                                        ([[1], [2], [3]], False)])
def test_float_labels_must_be_whole_and_others_name_the_column(tmp_path, labels, ok):
    path = write_parquet(tmp_path / "f.parquet", [upright_jpeg()] * 3, labels)
    spec = DatasetSpec(name="f", source="parquet", path=str(path), label_column="label")
    if ok:
        assert index_samples(spec, 0).label.tolist() == [1, 2, pd.NA]
    else:
        with pytest.raises(InputError, match="dataset 'f': label column 'label'"):
            index_samples(spec, 0)


def test_null_images_in_parquet_are_skipped_with_their_reason(tmp_path):
    path = write_parquet(tmp_path / "n.parquet", [upright_jpeg(), None, b""])
    index = index_samples(DatasetSpec(name="n", source="parquet", path=str(path)), 0)
    blocks = [b for u in read_units(index, index.sample_id) for b in read_unit(index, u)]
    batch = {k: np.concatenate([b[k] for b in blocks]) for k in blocks[0]}
    plans = [ViewPlan("clean", "clean", 1, index.sample_id, is_clean=True)]
    out = decode_views(batch, ViewGeometry(16, "bicubic", 1.0), plans, seed=0)
    assert out["bad"].tolist() == [False, True, True]
    assert all("no image bytes" in e and "n.parquet#row=" in e for e in out["error"][1:])


def test_npy_images_load_and_string_or_fractional_numpy_labels_are_handled(tmp_path):
    images = np.stack([photo(seed=i) for i in range(3)])
    np.save(tmp_path / "x.npy", images)
    index = index_samples(DatasetSpec(name="x", source="numpy", path=str(tmp_path / "x.npy")), 0)
    assert len(index) == 3 and index.label is None
    np.savez(tmp_path / "s.npz", images=images, labels=np.array(["b", "a", "b"]))
    index = index_samples(DatasetSpec(name="s", source="numpy", path=str(tmp_path / "s.npz")), 0)
    assert index.label.tolist() == [1, 0, 1] and index.label_names == ("a", "b")
    np.savez(tmp_path / "q.npz", images=images, labels=np.array([0.5, 1.0, 2.0]))
    with pytest.raises(InputError, match="dataset 'q': array 'labels'"):
        index_samples(DatasetSpec(name="q", source="numpy", path=str(tmp_path / "q.npz")), 0)


def test_a_flaky_read_is_retried_and_a_lasting_failure_is_flagged_unreadable(tmp_path,
                                                                             monkeypatch):
    from zoorank.tasks import retry

    monkeypatch.setattr(retry, "READS", retry.Policy(attempts=4, first_wait_s=0.001,
                                                     max_wait_s=0.01))
    calls = []

    def flaky() -> bytes:  # a filesystem that fails twice, then answers
        calls.append(1)
        if len(calls) < 3:
            raise OSError("connection reset by peer")
        return b"ok"

    assert sample_reader._retrying("x", flaky) == b"ok" and len(calls) == 3
    folder = write_folder(tmp_path / "imgs", [c for c in image_cases(big=False)
                                              if c.name in ("upright.jpg", "text.jpg")])
    index = index_samples(DatasetSpec(name="f", source="image_folder", path=str(folder)), 0)
    (folder / "upright.jpg").unlink()  # listed, then gone: unreadable, not undecodable
    blocks = [b for u in read_units(index, index.sample_id) for b in read_unit(index, u)]
    names = np.concatenate([b["name"] for b in blocks]).tolist()
    payloads = np.concatenate([b["payload"] for b in blocks]).tolist()
    assert names[1].startswith(UNREADABLE) and "upright.jpg" in names[1] and payloads[1] is None
    assert "after 1 try" in names[1] and payloads[0] is not None  # missing: final at once


def test_a_cache_with_unreadable_or_only_undecodable_samples_is_refused():
    plans = [ViewPlan("clean", "clean", 1, np.arange(3), is_clean=True),
             ViewPlan("simclr", "simclr", 2, np.array([1]))]
    found = {"bad": {"clean": [1], "simclr": [1]}, "first_error": "cannot decode b.jpg",
             "unreadable": 0, "first_unreadable": ""}
    with pytest.raises(InputError, match="dataset 'd' \\(view 'simclr'\\): none of its 1"):
        check_decoded("d", found, plans)
    found["bad"] = {"clean": [0, 1, 2]}
    with pytest.raises(InputError, match="dataset 'd': none of its 3 .*b.jpg"):
        check_decoded("d", found, plans[:1])
    found.update(bad={}, unreadable=1, first_unreadable=f"{UNREADABLE}a.jpg: cannot read")
    with pytest.raises(UnreadableError, match="dataset 'd': 1 sample.*a.jpg"):
        check_decoded("d", found, plans)


# -- through `zoorank run` -------------------------------------------------------------------------
def _run_cli(tmp_path: Path, config: dict, name: str, **env_extra: str) -> tuple[int, str]:
    path = tmp_path / f"{name}.yaml"
    path.write_text(yaml.safe_dump(config))
    env = dict(os.environ, PYTHONPATH=os.pathsep.join([str(REPO / "tests"), str(REPO)]),
               ZOORANK_PROGRESS="0", **env_extra)
    proc = subprocess.run([sys.executable, "-m", "zoorank", "run", str(path)], cwd=tmp_path,
                          env=env, capture_output=True, text=True, timeout=400)
    return proc.returncode, proc.stdout + proc.stderr


def _config(store: Path, datasets: list[dict]) -> dict:
    geometry = {"input_size": 16, "interpolation": "bilinear", "crop_pct": 1.0}
    return {
        "store": str(store), "seed": 0, "datasets": datasets,
        "models": [{"id": "pixels", "source": "python", "name": "zoo_factories:pixels", **geometry},
                   {"id": "cnn", "source": "python", "name": "zoo_factories:small_cnn",
                    **geometry}],
        "views": [{"name": "clean"}],
        "metrics": ["rankme"],
        "embed": {"batch_size": 8},
    }


#: the images of datasets ``flaky`` and ``broken`` (the first five that decode)
FAULT_IMAGES = 5


@pytest.fixture(scope="module")
def hostile_run(tmp_path_factory, corpus):
    """One ``zoorank run`` shared by the two tests below (each asserts on its own datasets): the
    whole corpus as an image folder and a Parquet with null images and string labels (hostile
    inputs), plus datasets ``flaky`` and ``broken`` whose reads of one file fail twice (retried)
    and always (transient read faults)."""
    from zoorank.data.sample_reader import ENV_FAIL_READS

    tmp_path = tmp_path_factory.mktemp("hostile-run")
    cases = list(corpus.values())
    refs = [("ref-gray16-8bit.png", Image.fromarray(gray16_png()[1])),
            ("ref-red.png", Image.new("RGB", (16, 16), (255, 0, 0)))]
    folder = write_folder(tmp_path / "corpus", cases)
    for name, img in refs:
        img.save(folder / name)
    table = write_parquet(tmp_path / "t.parquet", [upright_jpeg(), None, animated_gif()],
                          ["dog", "cat", "dog"])
    good = [c for c in image_cases(big=False) if c.outcome == "embedded"][:FAULT_IMAGES]
    flaky = write_folder(tmp_path / "flaky", good)
    broken = write_folder(tmp_path / "broken", good)
    config = _config(tmp_path / "store", [
        {"name": "corpus", "source": "image_folder", "path": str(folder)},
        {"name": "table", "source": "parquet", "path": str(table), "label_column": "label"},
        {"name": "flaky", "source": "image_folder", "path": str(flaky)},
        {"name": "broken", "source": "image_folder", "path": str(broken)}])
    faults = f"*/flaky/{good[0].name}:2;*/broken/{good[1].name}"
    rc, out = _run_cli(tmp_path, config, "run", **{ENV_FAIL_READS: faults})
    return {"tmp_path": tmp_path, "cases": cases, "refs": refs, "good": good, "rc": rc,
            "out": out}


@pytest.mark.slow
@pytest.mark.timeout(900)
def test_hostile_corpus_through_zoorank_run(hostile_run):
    """One run over the whole corpus (image folder) and a Parquet with null images and string
    labels: exit 0, each bad image skipped and counted, the pixels model sees the upright photo,
    the 8-bit copy of the 16-bit image and the first frame; then a 0-row Parquet and an all-bad
    folder each exit 2 naming the dataset."""
    from zoorank.data import read_samples
    from zoorank.store import Store

    tmp_path, cases, refs = hostile_run["tmp_path"], hostile_run["cases"], hostile_run["refs"]
    rc, out = hostile_run["rc"], hostile_run["out"]
    assert rc == 0, out[-3000:]
    store = Store(str(tmp_path / "store"))
    manifest = store.read_manifest().set_index(["dataset", "model_id"])
    skipped = sum(c.outcome == "skipped" for c in cases)
    for model in ("pixels", "cnn"):
        row = manifest.loc[("corpus", model)]
        assert row["status"] == "done" and row["bad_images"] == skipped
        assert row["rows"] == len(cases) + len(refs) - skipped
        assert manifest.loc[("table", model)]["bad_images"] == 1
    emb = store.read_embeddings("corpus", "clean", "pixels")
    names = read_samples(store, "corpus").set_index("sample_id")["source"]
    feats = {names[s]: e for s, e in zip(emb.sample_id, emb.embedding)}
    assert not {c.name for c in cases if c.outcome == "skipped"} & set(feats)

    def close(a: str, b: str, tol: float) -> bool:
        return float(np.abs(feats[a] - feats[b]).mean()) < tol

    # normalised pixels (÷ std ≈ 0.22): 0.1 is under 6 grey levels on average
    assert close("exif-rotated.jpg", "upright.jpg", 0.1)
    assert close("gray16.png", "ref-gray16-8bit.png", 0.02)
    assert close("animated.gif", "ref-red.png", 0.05)
    assert not close("upright.jpg", "ref-red.png", 0.5)
    # the undecodable set is recorded and in the fingerprints readers expect: every entry of the
    # corpus and the table fresh (flaky and broken belong to the read-fault test below)
    from zoorank.catalog import build_catalog
    from zoorank.config.loading import load_config

    expected = build_catalog(load_config(tmp_path / "run.yaml")).entries
    rows = [r for r in store.read_manifest().to_dict("records")
            if r["dataset"] in ("corpus", "table")]
    assert len(rows) == 4
    for r in rows:
        assert r["fingerprint"] in expected[(r["dataset"], r["view"], r["model_id"])]
        assert r["precision"] == "fp32" and "torch" in r["versions"]
    labels = read_samples(store, "table")
    assert labels["label"].tolist() == [1, 0, 1] and labels["label_name"].tolist()[:2] == ["dog",
                                                                                          "cat"]

    empty = write_parquet(tmp_path / "empty.parquet", [])
    rc, out = _run_cli(tmp_path, _config(tmp_path / "store2", [
        {"name": "nothing", "source": "parquet", "path": str(empty)}]), "empty")
    assert rc == 2 and "dataset 'nothing'" in out and "Traceback" not in out, out[-3000:]
    bad = write_folder(tmp_path / "bad", [c for c in cases if c.outcome == "skipped"][:3])
    rc, out = _run_cli(tmp_path, _config(tmp_path / "store3", [
        {"name": "allbad", "source": "image_folder", "path": str(bad)}]), "allbad")
    assert rc == 2 and "dataset 'allbad'" in out and "could be decoded" in out, out[-3000:]
    assert not (Store(str(tmp_path / "store3")).read_manifest()["status"] == "done").any()


@pytest.mark.slow
@pytest.mark.timeout(900)
def test_transient_read_faults_are_retried_and_lasting_ones_fail_the_entries(hostile_run):
    """In one run, reads of one file of dataset ``flaky`` fail twice (retried: every sample
    embedded) and every read of one file of ``broken`` fails (its entries fail naming the file;
    none is done with fewer samples); the run goes on and exits 0."""
    from zoorank.store import Store

    rc, out, good = hostile_run["rc"], hostile_run["out"], hostile_run["good"]
    assert rc == 0, out[-3000:]
    manifest = Store(str(hostile_run["tmp_path"] / "store")).read_manifest().set_index(
        ["dataset", "model_id"])
    for model in ("pixels", "cnn"):
        row = manifest.loc[("flaky", model)]
        assert row["status"] == "done" and row["rows"] == FAULT_IMAGES
        assert row["bad_images"] == 0
        row = manifest.loc[("broken", model)]
        assert row["status"] == "failed" and good[1].name in row["error"]
        assert "after 4 tries" in row["error"]


def test_undecodable_samples_are_part_of_the_datasets_identity(tmp_path):
    from zoorank.catalog import dataset_selection
    from zoorank.data.undecodable import known_undecodable, record_undecodable
    from zoorank.store import Store, uris

    cases = image_cases(big=False)
    folder = write_folder(tmp_path / "imgs", cases)
    spec = DatasetSpec(name="f", source="image_folder", path=str(folder))
    store = Store(str(tmp_path / "store"))
    before = index_samples(spec, 0, uris.DigestCache(store))
    assert len(before.undecodable) == 0
    bad = [i for i, c in enumerate(sorted(cases, key=lambda c: c.name)) if c.outcome == "skipped"]
    assert record_undecodable(store, "f", before.content_digest, bad)
    assert not record_undecodable(store, "f", before.content_digest, bad[:1])  # nothing new
    after = index_samples(spec, 0, uris.DigestCache(store))
    assert after.undecodable.tolist() == bad
    assert dataset_selection(spec, after) != dataset_selection(spec, before)
    assert dataset_selection(spec, after)["undecodable"].startswith(f"{len(bad)}:")
    # a selection without those samples is not affected by them
    limited = index_samples(DatasetSpec(name="f", source="image_folder", path=str(folder),
                                        limit=2), 0, uris.DigestCache(store))
    assert set(limited.undecodable) == set(bad) & set(limited.sample_id)
    # other content: nothing known
    assert len(known_undecodable(store, "f", "other-digest")) == 0


def test_undecodable_ids_recorded_at_once_by_two_writers_all_land(tmp_path):
    """Each record is one append commit: two writers adding ids at the same time lose none (a
    read-merge-rewrite of one file keeps only the last writer's view)."""
    from concurrent.futures import ThreadPoolExecutor

    from zoorank.data.undecodable import known_undecodable, record_undecodable
    from zoorank.store import Store

    store = Store(str(tmp_path / "store"))
    record_undecodable(store, "f", "d1", [0])  # the table exists before the race
    batches = [[i, i + 100] for i in range(1, 9)]
    with ThreadPoolExecutor(2) as pool:
        grew = list(pool.map(lambda ids: record_undecodable(store, "f", "d1", ids), batches))
    assert all(grew)
    expected = sorted({0} | {i for b in batches for i in b})
    assert known_undecodable(store, "f", "d1").tolist() == expected
    assert len(known_undecodable(store, "f", "d2")) == 0  # another content: its own ids


def test_an_old_stores_undecodable_json_moves_into_the_table(tmp_path):
    from zoorank.data.undecodable import known_undecodable, record_undecodable
    from zoorank.store import Store
    from zoorank.store.layout import undecodable_file

    store = Store(str(tmp_path / "store"))
    store.write_json(undecodable_file("f"), {"d1": [7, 3], "d0": [1]})
    assert known_undecodable(store, "f", "d1").tolist() == [3, 7]
    assert not store.exists(undecodable_file("f"))
    assert known_undecodable(store, "f", "d0").tolist() == [1]
    assert not record_undecodable(store, "f", "d1", [3])
    assert record_undecodable(store, "f", "d1", [5])
    assert known_undecodable(store, "f", "d1").tolist() == [3, 5, 7]
