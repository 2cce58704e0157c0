"""A dataset's sample and label table (``samples/<dataset>``): where it lives, its fingerprint (of
the sample ids and labels), and the labels people gave back (``<store>/labels/``, ``zoorank
label``) merged into the sample indexes where a sample has none of its own. The catalog
(:class:`zoorank.catalog.Catalog`) expects these tables and keys the oracle on their fingerprints.
"""

from __future__ import annotations

import dataclasses
import hashlib

import numpy as np
import pandas as pd

from zoorank.catalog.entries import class_names
from zoorank.config import RunConfig
from zoorank.config.digests import fingerprint
from zoorank.data.sources import SampleIndex
from zoorank.store import Store, layout


def samples_path(dataset: str) -> str:
    """Where a dataset's sample and label table lives in the store (a Delta table)."""
    return layout.samples_table(dataset)


def labels_fingerprint(index: SampleIndex) -> str:
    """Fingerprint of a dataset's sample list and labels (ids, label values, label names):
    changing ``label_column`` (or the labels) changes it; the image bytes do not enter."""
    frame = index.frame()
    h = hashlib.sha256(np.ascontiguousarray(frame["sample_id"], dtype="<i8").tobytes())
    h.update(np.ascontiguousarray(frame["label"].fillna(-1).to_numpy("int64"), "<i8").tobytes())
    h.update("\x00".join("" if pd.isna(v) else str(v) for v in frame["label_name"]).encode())
    return fingerprint("labels", h.hexdigest())


def with_given_labels(config: RunConfig, indexes: dict[str, SampleIndex], store: Store
                      ) -> dict[str, SampleIndex]:
    """The indexes with the labels people gave back (``<store>/labels/``, ``zoorank label``) where
    a sample has none of its own: the oracle, few-label scores and their fingerprints see them.

    A dataset's own label is never overridden (``zoorank label`` refuses a conflicting one).
    Labels only add information: nothing label-free reads the ``label`` of an index.
    """
    if not store.table_exists(layout.LABELS):
        return indexes
    given = store.read_frame(layout.LABELS)
    if given.empty:
        return indexes
    out = dict(indexes)
    for spec in config.datasets:
        rows = given[given["dataset"] == spec.name]
        index = indexes.get(spec.name)
        names = class_names(spec, index) if index is not None else None
        if rows.empty or index is None or not names:
            continue
        code = {n: i for i, n in enumerate(names)}
        pos = pd.Series(np.arange(len(index.sample_id)), index=index.sample_id)
        rows = rows[rows["sample_id"].isin(pos.index) & rows["label"].isin(code)]
        label = (pd.Series(pd.array([pd.NA] * len(index), dtype="Int64"), name="label")
                 if index.label is None else index.label.copy().reset_index(drop=True))
        at = pos.loc[rows["sample_id"].to_numpy("int64")].to_numpy()
        values = np.array([code[v] for v in rows["label"]], dtype=np.int64)
        empty = label.iloc[at].isna().to_numpy()
        label.iloc[at[empty]] = values[empty]
        out[spec.name] = dataclasses.replace(index, label=label, label_names=names)
    return out
