"""Writing an EMBED slice's entries: rows buffered per (view, model) and written as few, large,
immutable ``part-<slice>-<k>.parquet`` shards (:meth:`zoorank.store.Store.write_shard`), sorted by
(sample_id, view_index); on an object store the last shards of a slice go out in parallel.
The worker that computes the rows is :mod:`zoorank.embed.embedder`.
"""

from __future__ import annotations

from collections import defaultdict
from concurrent.futures import ThreadPoolExecutor

import numpy as np

from zoorank.store import Store

#: an entry's buffered rows are written once they reach this many bytes (else at the slice's end).
PART_BYTES = 256 * 1024**2
#: shards written at once when a slice closes on an object store (each write is one request
#: whose latency, not its bytes, is the cost).
WRITE_THREADS = 8


class EntryWriter:
    """Buffers rows per (view, model) and writes them as few, large ``part-*.parquet`` files."""

    def __init__(self, store: Store, dataset: str, slice_index: int,
                 part_bytes: int = PART_BYTES) -> None:
        self.store, self.dataset, self.slice_index = store, dataset, slice_index
        self.part_bytes = part_bytes
        self.buffers: dict[tuple[str, str], list[tuple[np.ndarray, np.ndarray, np.ndarray,
                                                        np.ndarray | None]]] = defaultdict(list)
        self.sizes: dict[tuple[str, str], int] = defaultdict(int)
        self.parts: dict[tuple[str, str], int] = defaultdict(int)
        #: the immutable shard files written per (view, model), reported to the driver.
        self.files: dict[tuple[str, str], list[str]] = defaultdict(list)

    def add(self, key: tuple[str, str], sample_id: np.ndarray, view_index: np.ndarray,
            embedding: np.ndarray, logits: np.ndarray | None = None) -> None:
        self.buffers[key].append((sample_id, view_index, embedding, logits))
        self.sizes[key] += embedding.nbytes + (0 if logits is None else logits.nbytes)
        if self.sizes[key] >= self.part_bytes:
            self.flush(key)

    def drop(self, key: tuple[str, str]) -> None:
        self.buffers.pop(key, None)
        self.sizes.pop(key, None)

    def flush(self, key: tuple[str, str]) -> None:
        chunks = self.buffers.pop(key, [])
        self.sizes.pop(key, None)
        if not chunks:
            return
        sid = np.concatenate([c[0] for c in chunks])
        vi = np.concatenate([c[1] for c in chunks])
        emb = np.concatenate([c[2] for c in chunks])
        with_logits = [c[3] is not None for c in chunks]
        if any(with_logits) and not all(with_logits):
            raise ValueError(f"entry {key}: some batches have logits, others not")
        logits = np.concatenate([c[3] for c in chunks]) if all(with_logits) else None
        order = np.lexsort((vi, sid))
        name = f"{self.slice_index:04d}-{self.parts[key]:04d}"
        self.parts[key] += 1
        view, model_id = key
        self.files[key].append(self.store.write_shard(
            self.dataset, view, model_id, name, sid[order], vi[order], emb[order],
            None if logits is None else logits[order]))

    def close(self) -> None:
        """Write what is buffered; on an object store the shards (a request each) in parallel."""
        keys = list(self.buffers)
        if self.store.is_local or len(keys) < 2:
            for key in keys:
                self.flush(key)
            return
        with ThreadPoolExecutor(max_workers=WRITE_THREADS) as pool:
            list(pool.map(self.flush, keys))  # list(): a failed write raises here
