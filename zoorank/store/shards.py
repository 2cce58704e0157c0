"""Embedding shards: the immutable Parquet files of an entry (contract-2 columns), read back as
:class:`Embeddings`, and the shard list a manifest row references (``shards``, a JSON list of file
names).

Columns: ``sample_id`` int64, ``view_index`` int32, ``embedding`` fixed_size_list<float32>[dim]
and, for a model whose classifier head is kept (:mod:`zoorank.zoo.label_space`), ``logits``
fixed_size_list<float32>[K], from the same forward as the embedding: K columns in the dataset's
class order (label index 0..K−1) after the label-space mapping (a softmax over them is the softmax
restricted to the mapped head outputs); K is the head's number of outputs when the dataset has no
class list. The manifest's ``logit_dim`` says K (0: no logits column).
"""

from __future__ import annotations

import json
from dataclasses import dataclass

import numpy as np
import pandas as pd
import pyarrow as pa


@dataclass(frozen=True)
class Embeddings:
    """Rows of one (dataset, view, model) entry, sorted by (sample_id, view_index)."""

    sample_id: np.ndarray  # int64 (rows,)
    view_index: np.ndarray  # int32 (rows,)
    embedding: np.ndarray  # float32 (rows, dim)
    #: float32 (rows, K) logits of the kept head, aligned with the rows; None without a head
    logits: np.ndarray | None = None

    def grouped(self) -> tuple[np.ndarray, np.ndarray]:
        """(sample_ids (n,), views (n, q, dim)) for augmented views; every sample must have q views."""
        ids, counts = np.unique(self.sample_id, return_counts=True)
        if len(ids) == 0:
            return ids, self.embedding.reshape(0, 0, self.embedding.shape[-1])
        if not np.all(counts == counts[0]):
            raise ValueError("samples have different numbers of views; cannot group n×q")
        q = int(counts[0])
        return ids, self.embedding.reshape(len(ids), q, -1)


def _vectors(values: np.ndarray, what: str) -> pa.FixedSizeListArray:
    arr = np.ascontiguousarray(values, dtype=np.float32)
    if arr.ndim != 2:
        raise ValueError(f"{what} must be 2-D (rows, dim), got {arr.shape}")
    return pa.FixedSizeListArray.from_arrays(pa.array(arr.reshape(-1), type=pa.float32()),
                                             arr.shape[1])


def embedding_table(sample_id: np.ndarray, view_index: np.ndarray, embedding: np.ndarray,
                    logits: np.ndarray | None = None) -> pa.Table:
    """Arrow table with the contract-2 columns (embedding as fixed_size_list<float32>[dim]) and,
    when given, ``logits`` (fixed_size_list<float32>[K], one row per embedding row)."""
    columns = {
        "sample_id": pa.array(np.asarray(sample_id, dtype=np.int64)),
        "view_index": pa.array(np.asarray(view_index, dtype=np.int32)),
        "embedding": _vectors(embedding, "embedding"),
    }
    if logits is not None:
        if len(logits) != len(embedding):
            raise ValueError(f"logits have {len(logits)} rows, embeddings {len(embedding)}")
        columns["logits"] = _vectors(logits, "logits")
    return pa.table(columns)


def _matrix(table: pa.Table, name: str) -> np.ndarray:
    col = table.column(name).combine_chunks()
    if isinstance(col.type, pa.ExtensionType):  # a Ray Data tensor column
        col = col.storage
    if len(col) == 0:
        return np.zeros((0, 0), dtype=np.float32)
    dim = col.type.list_size if pa.types.is_fixed_size_list(col.type) else len(col[0])
    return col.flatten().to_numpy(zero_copy_only=False).astype(np.float32).reshape(-1, dim)


def embeddings_from_table(table: pa.Table) -> Embeddings:
    """An entry's rows from a shard table (or Ray Data's tensor column), sorted by (sample_id,
    view_index); ``logits`` too when the table has them."""
    sample_id = table.column("sample_id").to_numpy().astype(np.int64)
    view_index = table.column("view_index").to_numpy().astype(np.int32)
    emb = (_matrix(table, "embedding") if "embedding" in table.column_names
           else np.zeros((table.num_rows, 0), np.float32))  # a read of the logits alone
    logits = _matrix(table, "logits") if "logits" in table.column_names else None
    order = np.lexsort((view_index, sample_id))
    return Embeddings(sample_id[order], view_index[order], emb[order],
                      None if logits is None else logits[order])


def referenced_shards(manifest: pd.DataFrame, dataset: str, view: str, model_id: str) -> list[str] | None:
    """An entry's shards per ``manifest``: [] unless done; None when it has no row or no list."""
    m = manifest
    hit = m[(m["dataset"] == dataset) & (m["view"] == view) & (m["model_id"] == model_id)]
    if hit.empty:
        return None
    if hit.iloc[-1]["status"] != "done":
        return []
    return parse_shards(hit.iloc[-1].get("shards"))


def parse_shards(value: object) -> list[str] | None:
    """A manifest row's ``shards`` cell as a list of file names (None when not recorded)."""
    if value is None or (isinstance(value, float) and np.isnan(value)) or value is pd.NA:
        return None
    if isinstance(value, (list, tuple)):
        return [str(v) for v in value]
    return [str(v) for v in json.loads(str(value))]
