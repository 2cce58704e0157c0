"""Datasets: the stable sample list of a small set with its encoded images, and the samples table
EMBED keeps in the store.

Conventions:

- ``sample_id`` (int64) is stable for a dataset: the row index in a Parquet file, the index of the
  file in the sorted list of relative paths of an image folder, the index in scikit-learn's digits or
  in a ``.npz`` array (the one dataset model, indexing: :mod:`zoorank.data.sources`; streaming reads:
  :mod:`zoorank.data.sample_reader`). ``limit`` keeps a seeded, sorted subset of those ids.
- Decoding: :mod:`zoorank.data.images`; the clean view and augmentation recipes: :mod:`zoorank.data.views`;
  the samples a decode found undecodable: :mod:`zoorank.data.undecodable`.

The data layer reads the datasets' sources (Parquet, image folders, ``.npz``, scikit-learn's
digits; local or object storage) and writes only the ``samples`` tables and the sources'
undecodable-image records; EMBED, SCORE's heads, the oracle, the probe API and Tune read through it.
"""

from __future__ import annotations

import dataclasses
from typing import TYPE_CHECKING

import pandas as pd

from zoorank.data.sources import SampleIndex
from zoorank.errors import InputError
from zoorank.store.layout import samples_table

if TYPE_CHECKING:
    from zoorank.config import DatasetSpec
    from zoorank.store import Store

SAMPLES_COLUMNS = ["sample_id", "label", "label_name", "source"]


# -- sample lists ----------------------------------------------------------------------------------
def load_samples(spec: DatasetSpec, seed: int) -> SampleIndex:
    """The dataset's index with its encoded ``images`` read here (small sets only).

    For probe sets and tests; the EMBED stage never holds the images on the driver (it indexes with
    :func:`zoorank.data.sources.index_samples` and streams with
    :func:`zoorank.data.sample_reader.read_encoded`).
    ``limit`` keeps a seeded sorted subset.
    """
    from zoorank.data.sample_reader import read_unit, read_units
    from zoorank.data.sources import index_samples

    index = index_samples(spec, seed)
    if index.kind == "memory":
        images = [index.arrays[int(s)] for s in index.sample_id]
    else:
        images = []
        for unit in read_units(index, index.sample_id):
            for block in read_unit(index, unit):
                images += list(block["payload"])
    return dataclasses.replace(index, images=images)


def samples_path(dataset: str) -> str:
    """The dataset's samples/labels table (a Delta table; :mod:`zoorank.store.layout`)."""
    return samples_table(dataset)


def write_samples(store: Store, dataset: str, table: SampleIndex) -> None:
    """Keep the ``datasets/<dataset>/samples`` table (sample_id, label, label_name, source);
    committed only when its rows change."""
    store.replace_table(samples_path(dataset), table.frame())


def read_samples(store: Store, dataset: str) -> pd.DataFrame:
    """The sample list EMBED wrote for ``dataset`` (labels by sample_id for SCORE and the oracle)."""
    if not store.table_exists(samples_path(dataset)):
        raise InputError(f"no sample list for dataset {dataset!r} in {store.name}; run embed first")
    df = store.read_frame(samples_path(dataset))
    df["sample_id"] = df["sample_id"].astype("int64")
    df["label"] = df["label"].astype("Int64")
    return df[SAMPLES_COLUMNS]
