"""zoorank.data: stable sample lists, decoding, the clean view and seeded augmentation recipes.

Real images (cifar10 Parquet, imagenet_sample photos, scikit-learn digits); reference values come
from pyarrow, scikit-learn, timm's own eval transform and torchvision's functional ops.
"""

from __future__ import annotations

import io
import shutil
from dataclasses import dataclass

import numpy as np
import pyarrow.parquet as pq
import pytest
import torch
from PIL import Image

from zoorank.config import DatasetSpec, ViewSpec
from zoorank.data import load_samples, read_samples, write_samples
from zoorank.data.images import BadImageError, decode_image
from zoorank.data.views import (
    VIEW_RECIPES,
    _adjust_hue,
    augment,
    check_views,
    clean_view,
    make_views,
    view_rng,
    view_subset,
)
from zoorank.errors import ConfigError, InputError
from zoorank.store import Store


@dataclass(frozen=True)
class Geo:
    input_size: int
    interpolation: str
    crop_pct: float


def photos(shared_data, n=12):
    files = sorted((shared_data / "imagenet_sample").glob("*.JPEG"))
    return files[:: len(files) // n][:n]


def test_parquet_sample_ids_are_row_indices_with_labels_and_names(shared_data):
    path = shared_data / "cifar10" / "test.parquet"
    spec = DatasetSpec(name="c", source="parquet", path=str(path), label_column="label")
    table = load_samples(spec, seed=0)
    ref = pq.read_table(path, columns=["image", "label"])
    assert np.array_equal(table.sample_id, np.arange(ref.num_rows))
    assert table.images[123] == ref.column("image")[123].as_py()
    frame = table.frame()
    assert frame["label"].tolist() == ref.column("label").to_pylist()
    assert frame.loc[0, "label_name"] == ["airplane", "automobile", "bird", "cat", "deer", "dog",
                                          "frog", "horse", "ship", "truck"][ref["label"][0].as_py()]


def test_limit_is_a_seeded_sorted_subset(shared_data):
    path = str(shared_data / "cifar10" / "test.parquet")
    spec = DatasetSpec(name="c", source="parquet", path=path, limit=50)
    a, b = load_samples(spec, seed=3), load_samples(spec, seed=3)
    other = load_samples(spec, seed=4)
    assert len(a) == 50 and np.array_equal(a.sample_id, b.sample_id)
    assert np.all(np.diff(a.sample_id) > 0) and a.sample_id.max() < 10_000
    assert not np.array_equal(a.sample_id, other.sample_id)
    # each kept sample keeps its own bytes (row index = sample_id)
    full = pq.read_table(path, columns=["image"]).column("image")
    assert all(a.images[i] == full[int(s)].as_py() for i, s in enumerate(a.sample_id[:5]))
    assert a.frame()["label"].isna().all()  # no label_column: no labels


def test_parquet_missing_column_names_the_column_and_file(shared_data):
    path = str(shared_data / "cifar10" / "test.parquet")
    spec = DatasetSpec(name="c", source="parquet", path=path, image_column="img")
    with pytest.raises(InputError, match=r"'img'.*test.parquet"):
        load_samples(spec, seed=0)


def test_image_folder_ids_follow_sorted_relative_paths_and_folder_labels(shared_data, tmp_path):
    files = photos(shared_data, 6)
    for i, f in enumerate(files):
        sub = tmp_path / ("dogs" if i % 2 else "cats")
        sub.mkdir(exist_ok=True)
        shutil.copy(f, sub / f.name.lower().replace(".jpeg", ".jpg" if i < 3 else ".JPEG"))
    (tmp_path / "cats" / "notes.txt").write_text("not an image")
    spec = DatasetSpec(name="f", source="image_folder", path=str(tmp_path),
                       labels_from_folders=True)
    table = load_samples(spec, seed=0)
    expected = sorted(p.relative_to(tmp_path).as_posix() for p in tmp_path.rglob("*")
                      if p.suffix.lower() in (".jpg", ".jpeg"))
    assert table.source_names() == expected
    assert np.array_equal(table.sample_id, np.arange(6))
    frame = table.frame()
    assert frame["label_name"].tolist() == [s.split("/")[0] for s in expected]
    assert frame["label"].tolist() == [0 if s.startswith("cats/") else 1 for s in expected]


def test_digits_are_uint8_scaled_from_0_16(digits):
    images, target = digits
    table = load_samples(DatasetSpec(name="d", source="sklearn_digits"), seed=0)
    assert len(table) == len(images) == 1797
    img = decode_image(table.images[5])
    arr = np.asarray(img)
    assert img.mode == "RGB" and arr.shape == (8, 8, 3)
    np.testing.assert_array_equal(arr[..., 0], np.rint(images[5] * 255 / 16).astype(np.uint8))
    assert np.array_equal(arr[..., 0], arr[..., 2])
    assert table.frame()["label"].tolist() == target.tolist()


def test_numpy_float_images_become_uint8_and_labels_are_read(tmp_path):
    rng = np.random.default_rng(0)
    images = rng.random((7, 5, 6, 3)).astype(np.float32)
    np.savez(tmp_path / "x.npz", images=images, labels=np.arange(7) % 3)
    table = load_samples(DatasetSpec(name="n", source="numpy", path=str(tmp_path / "x.npz")), 0)
    np.testing.assert_array_equal(np.asarray(decode_image(table.images[2])),
                                  np.rint(images[2] * 255).astype(np.uint8))
    assert table.frame()["label"].tolist() == [0, 1, 2, 0, 1, 2, 0]


def test_numpy_object_arrays_are_refused_without_unpickling(tmp_path):
    np.savez(tmp_path / "obj.npz", images=np.array([{"a": 1}], dtype=object))
    with pytest.raises(InputError, match="obj.npz"):
        load_samples(DatasetSpec(name="n", source="numpy", path=str(tmp_path / "obj.npz")), 0)


def test_decode_grayscale_becomes_rgb_with_equal_channels():
    gray = np.arange(64, dtype=np.uint8).reshape(8, 8) * 3
    buf = io.BytesIO()
    Image.fromarray(gray, "L").save(buf, format="PNG")
    arr = np.asarray(decode_image(buf.getvalue()))
    assert arr.shape == (8, 8, 3)
    for c in range(3):
        np.testing.assert_array_equal(arr[..., c], gray)


def test_undecodable_bytes_raise_a_clear_error_naming_the_sample(shared_data):
    good = photos(shared_data, 1)[0].read_bytes()
    for bad in (b"definitely not an image", good[:300]):
        with pytest.raises(BadImageError, match="cifar row 17"):
            decode_image(bad, name="cifar row 17")
    assert issubclass(BadImageError, InputError)


@pytest.mark.parametrize(
    "geometry",
    [Geo(32, "bicubic", 0.875), Geo(224, "bilinear", 0.9), Geo(64, "nearest", 1.0),
     Geo(37, "bicubic", 0.95)],
)
def test_clean_view_equals_timms_eval_transform(shared_data, geometry):
    from timm.data import create_transform

    ref = create_transform(geometry.input_size, is_training=False, crop_pct=geometry.crop_pct,
                           interpolation=geometry.interpolation, normalize=False)
    for f in photos(shared_data, 8):
        img = decode_image(str(f))
        expected = ref(img).numpy().transpose(1, 2, 0)
        got = clean_view(img, geometry)
        assert got.dtype == np.uint8 and got.shape == (geometry.input_size,) * 2 + (3,)
        np.testing.assert_array_equal(got, expected)


def test_views_are_identical_for_the_same_seed_sample_and_view_index(shared_data):
    img = decode_image(str(photos(shared_data, 1)[0]))
    g = Geo(64, "bicubic", 0.875)
    torch.manual_seed(0)
    np.random.seed(0)  # noqa: NPY002 (the legacy global RNG must not matter)
    a = make_views(img, 17, "simclr", g, 4, seed=5)
    # the global RNGs of torch and numpy neither feed nor are consumed by the views
    torch_state = torch.random.get_rng_state()
    np.random.seed(99)  # noqa: NPY002
    b = make_views(img, 17, "simclr", g, 4, seed=5)
    assert torch.equal(torch_state, torch.random.get_rng_state())
    assert all(np.array_equal(x, y) for x, y in zip(a, b))
    assert all(x.shape == (64, 64, 3) and x.dtype == np.uint8 for x in a)
    # view_index, sample_id and seed each change the view
    assert all(not np.array_equal(a[i], a[j]) for i in range(4) for j in range(i))
    assert not np.array_equal(a[0], make_views(img, 18, "simclr", g, 1, seed=5)[0])
    assert not np.array_equal(a[0], make_views(img, 17, "simclr", g, 1, seed=6)[0])
    # make_views is augment with the per-view RNG
    np.testing.assert_array_equal(a[2], augment(img, "simclr", g, view_rng(5, 17, 2)))


def test_simclr_grayscale_rate_is_about_one_fifth(shared_data):
    img = decode_image(str(photos(shared_data, 3)[2]))
    assert np.asarray(img).std(axis=2).mean() > 5  # a colour photo
    g = Geo(16, "bilinear", 1.0)
    views = [augment(img, "simclr", g, view_rng(0, i, 0)) for i in range(400)]
    gray = np.mean([np.array_equal(v[..., 0], v[..., 1]) and np.array_equal(v[..., 1], v[..., 2])
                    for v in views])
    assert 0.2 - 0.07 < gray < 0.2 + 0.07  # binomial sd 0.02


def test_hue_shift_matches_torchvision(shared_data):
    import torchvision.transforms.functional as TF

    img = decode_image(str(photos(shared_data, 2)[1])).resize((48, 40))
    for factor in (-0.1, 0.03, 0.1):
        np.testing.assert_array_equal(np.asarray(_adjust_hue(img, factor)),
                                      np.asarray(TF.adjust_hue(img, factor)))


def test_augmented_view_takes_a_seeded_subset_and_clean_takes_all():
    ids = np.arange(100, 300, 2)
    clean = view_subset(ids, ViewSpec(name="clean"), seed=0)
    aug = ViewSpec(name="simclr", samples=10, per_sample=3)
    a, b = view_subset(ids, aug, seed=0), view_subset(ids, aug, seed=1)
    assert np.array_equal(clean, ids)
    assert len(a) == 10 and set(a) <= set(ids) and np.all(np.diff(a) > 0)
    assert np.array_equal(a, view_subset(ids, aug, seed=0)) and not np.array_equal(a, b)


def test_unknown_recipe_is_a_config_error_naming_the_view():
    assert {"clean", "simclr"} <= set(VIEW_RECIPES)
    with pytest.raises(ConfigError, match="'fancy'.*'nope'"):
        check_views([ViewSpec(name="clean"), ViewSpec(name="fancy", recipe="nope", per_sample=2)])


def test_samples_round_trip_through_the_store(shared_data, tmp_path):
    spec = DatasetSpec(name="c", source="parquet", path=str(shared_data / "cifar10" /
                       "test.parquet"), label_column="label", limit=20)
    table = load_samples(spec, seed=0)
    store = Store(tmp_path / "store")
    write_samples(store, "c", table)
    df = read_samples(store, "c")
    assert (tmp_path / "store" / "datasets" / "c" / "samples" / "_delta_log").is_dir()
    assert df["sample_id"].tolist() == table.sample_id.tolist()
    assert df["label"].tolist() == table.frame()["label"].tolist()
    assert df["source"].iloc[0] == f"test.parquet#row={table.sample_id[0]}"
    with pytest.raises(InputError, match="other"):
        read_samples(store, "other")


def test_decode_views_makes_every_planned_view_and_flags_bad_images(shared_data):
    from zoorank.data.views import ViewGeometry, ViewPlan, decode_views

    files = photos(shared_data, 3)
    g = ViewGeometry(24, "bicubic", 0.9)
    batch = {
        "sample_id": np.array([3, 5, 9]),
        "payload": np.array([files[0].read_bytes(), b"broken", str(files[2])], dtype=object),
        "name": np.array(["a", "b.jpg", "c"], dtype=object),
    }
    plans = [ViewPlan("clean", "clean", 1, np.array([3, 5, 9]), is_clean=True),
             ViewPlan("simclr", "simclr", 2, np.array([5, 9]))]
    out = decode_views(batch, g, plans, seed=11)
    rows = list(zip(out["sample_id"].tolist(), out["view"].tolist(), out["view_index"].tolist()))
    assert rows == [(3, "clean", 0), (5, "clean", 0), (5, "simclr", 0), (9, "clean", 0),
                    (9, "simclr", 0), (9, "simclr", 1)]
    assert out["bad"].tolist() == [False, True, True, False, False, False]
    assert "b.jpg" in out["error"][1] and out["image"].shape == (6, 24, 24, 3)
    img = decode_image(str(files[2]))
    np.testing.assert_array_equal(out["image"][3], clean_view(img, g))
    np.testing.assert_array_equal(out["image"][5], make_views(img, 9, "simclr", g, 2, 11)[1])
