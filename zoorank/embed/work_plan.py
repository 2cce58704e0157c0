"""Planning the EMBED stage's work (pure): chunks, slices, devices, verification.

What the stage should produce (entries and their fingerprints) is :mod:`zoorank.catalog.entries`,
re-exported here.
"""

from __future__ import annotations

from collections import defaultdict
from collections.abc import Sequence

import numpy as np

from zoorank.catalog import Entry
from zoorank.config import EmbedOptions
from zoorank.zoo import ResolvedModel

#: a chunk is split into slices only while each slice keeps this many rows of its smallest entry.
SLICE_MIN_ROWS = 4096


def chunk_models(models: Sequence[ResolvedModel], options: EmbedOptions) -> list[list[ResolvedModel]]:
    """Split models into actor-sized chunks: ``models_per_actor`` each, else by memory budget.

    A model larger than the budget gets a chunk of its own; the order of ``models`` is kept.
    """
    if options.models_per_actor is not None:
        k = options.models_per_actor
        return [list(models[i : i + k]) for i in range(0, len(models), k)]
    from zoorank.zoo import estimate_model_bytes  # imports torch: only when there is work

    budget = options.actor_memory_gb * 1024**3
    chunks: list[list[ResolvedModel]] = []
    used = 0.0
    for m in models:
        try:
            size = float(estimate_model_bytes(m))
        except Exception:  # a model that cannot be sized fails later, in its actor, with a reason
            size = 0.0
        if chunks and used + size <= budget:
            chunks[-1].append(m)
            used += size
        else:
            chunks.append([m])
            used = size
    return chunks


def slices_for(chunks: int, workers: int, smallest_entry_rows: int, parts: int) -> int:
    """Slices per chunk: spread ``workers`` over ``chunks``, keeping ≥ SLICE_MIN_ROWS per slice."""
    by_rows = max(1, smallest_entry_rows // SLICE_MIN_ROWS)
    return max(1, min(workers // max(1, chunks), by_rows, max(1, parts)))


def verify_rows(sample_id: np.ndarray, view_index: np.ndarray, expected: np.ndarray, q: int
                ) -> str | None:
    """Why the rows of an entry are not exactly ``expected`` samples × view_index 0..q-1 (or None).
    """
    n = len(expected) * q
    if len(sample_id) != n:
        return f"incomplete: {len(sample_id)} rows on disk, {n} expected"
    order = np.lexsort((view_index, sample_id))
    sid, vi = sample_id[order], view_index[order]
    want_sid = np.repeat(np.sort(expected), q)
    want_vi = np.tile(np.arange(q, dtype=np.int64), len(expected))
    if not np.array_equal(sid, want_sid) or not np.array_equal(vi.astype(np.int64), want_vi):
        return "rows on disk are not one row per (sample_id, view_index 0..q-1) of the samples"
    return None



def choose_device(option: str, gpus_now: float, gpus_possible: float) -> str:
    """``auto`` → ``cuda`` when the cluster has GPUs or its autoscaler can add some, else ``cpu``."""
    if option != "auto":
        return option
    return "cuda" if gpus_now > 0 or gpus_possible > 0 else "cpu"


def chunk_entries(group: list[Entry], options: EmbedOptions) -> list[list[Entry]]:
    models = list({e.model.model_id: e.model for e in group}.values())
    chunks = chunk_models(models, options)
    by_model: dict[str, list[Entry]] = defaultdict(list)
    for e in group:
        by_model[e.model.model_id].append(e)
    return [[e for m in chunk for e in by_model[m.model_id]] for chunk in chunks]
