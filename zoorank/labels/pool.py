"""One dataset's pool as ``zoorank ask`` / ``zoorank label`` see it: the models' clean embeddings
(rows aligned on the samples every model holds), the labels known so far and the label-free
p(best) of the leaderboard (the prior before any label).

Reading is O(M · n · d) for M models with fresh clean embeddings of n samples.
"""

from __future__ import annotations

from dataclasses import dataclass

import numpy as np
import pandas as pd

from zoorank.catalog import Catalog, build_catalog, class_names
from zoorank.config import RunConfig
from zoorank.errors import InputError
from zoorank.store import Store


@dataclass
class Pool:
    dataset: str
    classes: tuple[str, ...]
    sample_id: np.ndarray  # (n,) the pool's samples, sorted
    source: list[str]  # (n,) a readable reference to each image
    model_ids: list[str]  # (M,)
    Zs: list[np.ndarray]  # M × (n, d_m), rows aligned with sample_id
    labelled: np.ndarray  # positions in the pool with a label (own or given)
    codes: np.ndarray  # their class indices
    prior: np.ndarray  # label-free p(best) of the M models (sums to 1)
    free_top_set: list[str]  # the leaderboard's top set (label-free)
    catalog: Catalog
    #: (M, n, K) the heads' class probabilities when every model has one (classifier zoos,
    #: :func:`zoorank.labels.heads.with_head_predictions`), else None
    predictions: np.ndarray | None = None

    def known(self) -> dict[int, str]:
        """sample_id → class name of every labelled pool sample."""
        return {int(self.sample_id[p]): self.classes[int(c)]
                for p, c in zip(self.labelled, self.codes)}


def pick_dataset(config: RunConfig, name: str | None) -> str:
    names = [d.name for d in config.datasets]
    if name is None:
        return names[0]
    if name not in names:
        raise InputError(f"--dataset: {name!r} is not a dataset of the config "
                         f"({', '.join(names)})")
    return name


def _prior(board: pd.DataFrame | None, model_ids: list[str]) -> tuple[np.ndarray, list[str]]:
    """The leaderboard's p(best) over ``model_ids`` (renormalised; uniform when missing) and its
    top set."""
    m = len(model_ids)
    if board is None or board.empty or "p_best" not in board:
        return np.full(m, 1.0 / m), []
    by_id = board.set_index("model_id")
    p = by_id["p_best"].reindex(model_ids).to_numpy(dtype=np.float64)
    top = [str(x) for x in by_id.index[by_id.get("in_top_set", pd.Series(False, by_id.index))
                                       .fillna(False).astype(bool)]]
    if not np.isfinite(p).any() or np.nansum(p) <= 0:  # no resampled rows: the top set, evenly
        p = np.array([1.0 if x in top else 0.0 for x in model_ids])
        if p.sum() == 0:
            p = np.ones(m)
    p = np.where(np.isfinite(p), p, 0.0) + 1e-3  # a model outside the top set may still win
    return p / p.sum(), top


def load_pool(config: RunConfig, dataset: str | None = None) -> Pool:
    """The pool of ``dataset`` (default: the config's first) in ``config.store``."""
    from zoorank.leaderboard import read_leaderboard

    catalog = build_catalog(config)
    store = Store(config.store)
    name = pick_dataset(config, dataset)
    spec = next(d for d in config.datasets if d.name == name)
    index = catalog.indexes[name]
    classes = class_names(spec, index)
    if not classes:
        raise InputError(f"datasets.{name}.classes: the dataset has no class names of its own; "
                         "list them in the config (classes: [cat, dog, ...])")
    if config.clean_view is None:
        raise InputError("views: zoorank ask needs a clean view (views: [{name: clean}])")
    clean = config.clean_view.name
    fresh = catalog.fresh_entries(catalog.fresh_manifest(store.read_manifest()))
    models = [m.model_id for m in catalog.models if (name, clean, m.model_id) in fresh]
    if not models:
        raise InputError(f"no embeddings of dataset {name!r} in {store.name}; run "
                         "`zoorank embed` (or `zoorank run`) first")
    frames = {}
    for m in models:
        emb = store.read_embeddings(name, clean, m)
        keep = emb.view_index == 0
        frames[m] = (np.asarray(emb.sample_id[keep], dtype=np.int64), emb.embedding[keep])
    common = np.asarray(index.sample_id, dtype=np.int64)
    for ids, _ in frames.values():
        common = np.intersect1d(common, ids)
    Zs = []
    for ids, Z in frames.values():
        pos = pd.Series(np.arange(len(ids)), index=ids)
        Zs.append(np.asarray(Z[pos.loc[common].to_numpy()], dtype=np.float64))
    at = pd.Series(np.arange(len(index.sample_id)), index=index.sample_id).loc[common].to_numpy()
    label = (index.label.to_numpy(dtype=object)[at] if index.label is not None
             else np.full(len(common), None, dtype=object))
    has = np.array([v is not None and not pd.isna(v) for v in label])
    names = index.source_names()
    board, _ = read_leaderboard(store)
    prior, top = _prior(board, models)
    return Pool(name, classes, common, [names[i] for i in at], models, Zs,
                np.flatnonzero(has), label[has].astype(np.int64), prior, top, catalog)
