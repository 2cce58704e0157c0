"""The samples a decode found undecodable, per dataset and content digest: a store table
(:func:`zoorank.store.layout.undecodable_table`: content_digest, sample_id) that every decode
appends to, so readers take the union. A sample index carries the ones of its content
(:func:`zoorank.data.sources.index_samples`); EMBED records new ones
(:mod:`zoorank.embed.viewcache`).
"""

from __future__ import annotations

from typing import TYPE_CHECKING, Any

import numpy as np
import pandas as pd

from zoorank.store.layout import undecodable_file, undecodable_table

if TYPE_CHECKING:
    from zoorank.store import Store


def _undecodable_rows(content_digest: str, ids: Any) -> pd.DataFrame:
    ids = np.asarray(list(ids), dtype=np.int64)
    return pd.DataFrame({"content_digest": pd.Series([content_digest] * len(ids), dtype=object),
                         "sample_id": ids})


def _migrate_undecodable(store: Store, dataset: str) -> None:
    """Move a store's old ``undecodable.json`` (``{content_digest: [ids]}``) into the table."""
    if not store.exists(undecodable_file(dataset)):
        return
    try:
        known = store.read_json(undecodable_file(dataset))
    except (OSError, ValueError):  # unreadable: those ids are found again by the next decode
        known = {}
    frames = [_undecodable_rows(str(d), ids) for d, ids in
              (known.items() if isinstance(known, dict) else []) if isinstance(ids, list)]
    if frames:
        store.append_rows(undecodable_table(dataset), pd.concat(frames, ignore_index=True))
    store.delete(undecodable_file(dataset))


def known_undecodable(store: Store | None, dataset: str, content_digest: str) -> np.ndarray:
    """Sorted sample_ids of this content that a decode found undecodable (empty when none known).

    Kept in the table :func:`zoorank.store.layout.undecodable_table` (content_digest, sample_id;
    appended to by every decode, so readers take the union). ``O(rows)`` of the table.
    """
    if store is None:
        return np.zeros(0, np.int64)
    _migrate_undecodable(store, dataset)
    rows = store.read_frame(undecodable_table(dataset), columns=["content_digest", "sample_id"])
    ids = rows.loc[rows["content_digest"] == content_digest, "sample_id"]
    return np.unique(ids.to_numpy(dtype=np.int64))


def record_undecodable(store: Store, dataset: str, content_digest: str, ids: Any) -> bool:
    """Add ``ids`` to the undecodable samples known for this content; True when that set grew.

    Decoding is deterministic for given bytes, so the set only grows as more samples of a content
    are decoded; rows of other content digests are kept apart by their digest. One append commit:
    two embeds recording at once both land (a read-merge-rewrite could lose one's ids).
    """
    before = known_undecodable(store, dataset, content_digest)
    new = np.setdiff1d(np.asarray(list(ids), dtype=np.int64), before)
    if len(new) == 0:
        return False
    store.append_rows(undecodable_table(dataset), _undecodable_rows(content_digest, new))
    return True
