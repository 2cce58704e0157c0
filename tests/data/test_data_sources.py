"""zoorank.data.sources: stable sample ids from footers and listings, content digests, streaming reads.

Real CIFAR-10 JPEG rows and imagenet_sample photos; the same files on a loopback S3 (moto). The
reference for every payload is pyarrow's own row (or the file's bytes) at the sample's index.
"""

from __future__ import annotations

import shutil
import time

import numpy as np
import pyarrow.parquet as pq
import pytest

from zoorank.config import DatasetSpec
from zoorank.data.sample_reader import read_encoded, read_unit, read_units
from zoorank.data.sources import index_samples
from zoorank.store.uris import DigestCache


@pytest.fixture(scope="module")
def small_parquet(shared_data, tmp_path_factory):
    """200 CIFAR rows written in row groups of 37 (so ids cross row-group boundaries)."""
    table = pq.read_table(shared_data / "cifar10" / "test.parquet",
                          columns=["image", "label"]).slice(0, 200)
    path = tmp_path_factory.mktemp("pq") / "cifar200.parquet"
    pq.write_table(table, path, row_group_size=37)
    return path, table


@pytest.fixture(scope="module")
def folder(shared_data, tmp_path_factory):
    root = tmp_path_factory.mktemp("folder")
    photos = sorted((shared_data / "imagenet_sample").glob("*.JPEG"))[:9]
    for i, p in enumerate(photos):
        sub = root / ("a" if i % 2 else "b")
        sub.mkdir(exist_ok=True)
        shutil.copy(p, sub / p.name)
    (root / ".hidden").mkdir()
    shutil.copy(photos[0], root / ".hidden" / "x.JPEG")
    return root


def payloads(index, ids):
    out = {}
    for unit in read_units(index, ids):
        for block in read_unit(index, unit, block_rows=8):
            out.update(zip(block["sample_id"].tolist(), block["payload"]))
    return out


def test_parquet_ids_are_row_indices_across_row_groups_and_limits(small_parquet):
    path, table = small_parquet
    spec = DatasetSpec(name="c", source="parquet", path=str(path), label_column="label")
    index = index_samples(spec, seed=0)
    assert index.row_groups[:, 0].tolist() == list(range(0, 200, 37))
    assert np.array_equal(index.sample_id, np.arange(200))
    got = payloads(index, index.sample_id)
    assert [got[i] for i in range(200)] == table.column("image").to_pylist()
    assert index.label.tolist() == table.column("label").to_pylist()
    limited = index_samples(spec.model_copy(update={"limit": 23}), seed=5)
    assert len(limited) == 23 and set(limited.sample_id) <= set(range(200))
    sub = payloads(limited, limited.sample_id)
    assert all(sub[i] == got[i] for i in limited.sample_id)  # an id means the same row
    assert limited.label.tolist() == [table.column("label")[int(i)].as_py()
                                      for i in limited.sample_id]


def test_image_folder_ids_index_the_sorted_relative_paths(folder):
    index = index_samples(DatasetSpec(name="f", source="image_folder", path=str(folder),
                                      labels_from_folders=True), seed=0)
    rel = sorted(p.relative_to(folder).as_posix() for p in folder.rglob("*.JPEG")
                 if not p.relative_to(folder).as_posix().startswith("."))
    assert list(index.relpaths) == rel
    got = payloads(index, index.sample_id)
    assert all(got[i] == (folder / r).read_bytes() for i, r in enumerate(rel))
    assert index.label.tolist() == [0 if r.startswith("a/") else 1 for r in rel]


def test_folder_digest_follows_its_listing(folder, tmp_path):
    copy = tmp_path / "copy"
    shutil.copytree(folder, copy, copy_function=shutil.copy2)  # same names, sizes, mtimes
    spec = DatasetSpec(name="f", source="image_folder", path=str(copy))
    a = index_samples(spec, 0).content_digest
    assert a == index_samples(DatasetSpec(name="f", source="image_folder", path=str(folder)),
                              0).content_digest
    victim = next(copy.rglob("*.JPEG"))
    victim.write_bytes(victim.read_bytes() + b"\0")
    assert index_samples(spec, 0).content_digest != a


def test_parquet_digest_is_read_once_per_size_and_mtime(small_parquet, tmp_path):
    from zoorank.store import Store

    path, table = small_parquet
    local = tmp_path / "d.parquet"
    shutil.copy(path, local)
    store = Store(tmp_path / "store")
    spec = DatasetSpec(name="c", source="parquet", path=str(local))
    cache = DigestCache(store)
    first = index_samples(spec, 0, cache).content_digest
    cache.save()
    import hashlib
    assert first == hashlib.sha256(local.read_bytes()).hexdigest()
    again = DigestCache(Store(tmp_path / "store"))
    assert index_samples(spec, 0, again).content_digest == first
    assert not again._dirty  # served from the store's cache, no new read
    time.sleep(0.01)
    pq.write_table(table.slice(0, 100), local, row_group_size=37)
    assert index_samples(spec, 0, again).content_digest != first


@pytest.mark.timeout(180)
def test_dataset_on_s3_reads_the_same_ids_and_bytes_as_local(ray_session, s3_server, s3_env,
                                                             small_parquet, folder):
    path, table = small_parquet
    client = s3_server.client
    s3_server.bucket("data")
    client.upload_file(str(path), "data", "sets/cifar200.parquet")
    for p in folder.rglob("*.JPEG"):
        client.upload_file(str(p), "data", f"photos/{p.relative_to(folder).as_posix()}")
    pairs = [
        (DatasetSpec(name="c", source="parquet", path=str(path), limit=50),
         DatasetSpec(name="c", source="parquet", path="s3://data/sets/cifar200.parquet",
                     limit=50)),
        (DatasetSpec(name="f", source="image_folder", path=str(folder)),
         DatasetSpec(name="f", source="image_folder", path="s3://data/photos")),
    ]
    for local_spec, s3_spec in pairs:
        local, remote = index_samples(local_spec, 3), index_samples(s3_spec, 3)  # env credentials
        assert np.array_equal(local.sample_id, remote.sample_id)
        assert local.frame()["source"].tolist() == remote.frame()["source"].tolist()
    assert index_samples(pairs[0][0], 3).content_digest == \
        index_samples(pairs[0][1], 3).content_digest  # the same bytes
    # Ray read tasks on the workers (which see no test environment: credentials in the URI)
    for spec in (DatasetSpec(name="c", source="parquet",
                             path=s3_server("data/sets/cifar200.parquet"), limit=50),
                 DatasetSpec(name="f", source="image_folder", path=s3_server("data/photos"))):
        index = index_samples(spec, 3)
        rows = read_encoded(index, index.sample_id).take_all()
        got = {int(r["sample_id"]): bytes(r["payload"]) for r in rows}
        assert sorted(got) == index.sample_id.tolist()
        if spec.source == "parquet":
            assert all(got[i] == table.column("image")[i].as_py() for i in got)
        else:
            assert all(got[i] == (folder / index.relpaths[i]).read_bytes() for i in got)


def test_read_tasks_stream_bounded_blocks(small_parquet):
    path, _ = small_parquet
    index = index_samples(DatasetSpec(name="c", source="parquet", path=str(path)), 0)
    units = read_units(index, index.sample_id)
    assert all(len(u[1][2]) <= 1024 for u in units) and len(units) == len(index.row_groups)
    sizes = [len(b["sample_id"]) for u in units for b in read_unit(index, u, block_rows=8)]
    assert max(sizes) <= 8 and sum(sizes) == 200

