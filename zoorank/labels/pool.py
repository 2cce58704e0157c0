"""One dataset's pool as ``zoorank ask`` / ``zoorank label`` see it: the clean embeddings of the
models that may be best (rows aligned on the samples every model holds), the labels known so far
and the label-free p(best) of the leaderboard (the prior before any label).

Only the models that may be best are held: the leaderboard's label-free top set plus a bounded
margin, i.e. the first :func:`pool_limit` models (``max(2 × |top set|, 16)``; the environment
variable ``ZOORANK_POOL_MODELS`` or ``load_pool(max_models=)`` sets another number) in order of
label-free p(best), then leaderboard rank. A model outside them could only become the labels'
leader by beating every model of the top set and of the margin on the few labels, which the
label-free ranking gives little chance. Embeddings are held in float32 (as stored), so reading is
O(K · n · d) memory for K ≤ :func:`pool_limit` models of n samples, whatever the zoo's size. A
command builds its pool once (:func:`load_pool`); ``zoorank label`` takes the merged labels into
it without reading the embeddings again (:func:`with_labels`).
"""

from __future__ import annotations

import os
from dataclasses import dataclass, replace

import numpy as np
import pandas as pd

from zoorank.catalog import Catalog, class_names
from zoorank.catalog.context import RunContext
from zoorank.config import RunConfig
from zoorank.errors import InputError

#: the least number of models a pool holds (when the zoo has that many): the margin around a
#: small top set.
POOL_MIN_MODELS = 16
#: environment variable that sets the pool's number of models (an integer ≥ 1).
ENV_POOL_MODELS = "ZOORANK_POOL_MODELS"


def pool_limit(top_set: int, max_models: int | None = None) -> int:
    """How many models a pool holds: ``max_models``, else ``$ZOORANK_POOL_MODELS``, else
    ``max(2 × top_set, POOL_MIN_MODELS)``."""
    if max_models is None and os.environ.get(ENV_POOL_MODELS, "").strip():
        text = os.environ[ENV_POOL_MODELS].strip()
        if not text.isdigit() or int(text) < 1:
            raise InputError(f"{ENV_POOL_MODELS}: {text!r} is not a number of models (≥ 1)")
        max_models = int(text)
    if max_models is not None:
        if max_models < 1:
            raise InputError(f"max_models: {max_models} (a pool needs at least one model)")
        return int(max_models)
    return max(2 * top_set, POOL_MIN_MODELS)


@dataclass
class Pool:
    dataset: str
    classes: tuple[str, ...]
    sample_id: np.ndarray  # (n,) the pool's samples, sorted
    source: list[str]  # (n,) a readable reference to each image
    model_ids: list[str]  # (M,) the models that may be best (module note), catalog order
    Zs: list[np.ndarray]  # M × (n, d_m) float32, rows aligned with sample_id
    labelled: np.ndarray  # positions in the pool with a label (own or given)
    codes: np.ndarray  # their class indices
    prior: np.ndarray  # label-free p(best) of the M models (sums to 1)
    free_top_set: list[str]  # the leaderboard's top set (label-free)
    catalog: Catalog
    models_total: int = 0  # models with fresh clean embeddings, of which the pool holds M
    #: (M, n, K) the heads' class probabilities when every model has one (classifier zoos,
    #: :func:`zoorank.labels.head_predictions.with_head_predictions`), else None
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


def may_be_best(board: pd.DataFrame | None, model_ids: list[str],
                max_models: int | None = None) -> list[str]:
    """The models of ``model_ids`` a pool holds (module note): the label-free top set first, then
    by p(best) (higher first), leaderboard rank (lower first) and id, the first
    :func:`pool_limit` of them. Without a leaderboard, the first ones by id."""
    if board is None or board.empty:
        return sorted(model_ids)[:pool_limit(0, max_models)]
    by_id = board.drop_duplicates("model_id").set_index("model_id").reindex(model_ids)
    in_top = (by_id["in_top_set"].fillna(False).astype(bool) if "in_top_set" in by_id
              else pd.Series(False, by_id.index))
    p = by_id["p_best"].astype(float) if "p_best" in by_id else pd.Series(np.nan, by_id.index)
    rank = by_id["rank"].astype(float) if "rank" in by_id else pd.Series(np.nan, by_id.index)
    order = pd.DataFrame({"top": ~in_top.to_numpy(), "p": -p.fillna(-1.0).to_numpy(),
                          "rank": rank.fillna(np.inf).to_numpy(), "id": model_ids})
    order = order.sort_values(["top", "p", "rank", "id"], kind="stable")
    return order["id"].head(pool_limit(int(in_top.sum()), max_models)).tolist()


def load_pool(config: RunConfig, dataset: str | None = None, max_models: int | None = None,
              catalog: Catalog | None = None, context: RunContext | None = None) -> Pool:
    """The pool of ``dataset`` (default: the config's first) in ``config.store``: the models that
    may be best (:func:`may_be_best`; ``max_models``: see :func:`pool_limit`), their clean
    embeddings read one model at a time and kept in float32. ``catalog``: the command's own, when
    it has built one."""
    from zoorank.decide.leaderboard import read_leaderboard

    context = RunContext.of(config if context is None else context, catalog)
    store, catalog = context.store, context.catalog
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
    every = [m.model_id for m in catalog.models if (name, clean, m.model_id) in fresh]
    if not every:
        raise InputError(f"no embeddings of dataset {name!r} in {store.name}; run "
                         "`zoorank embed` (or `zoorank run`) first")
    board, _ = read_leaderboard(store)
    chosen = set(may_be_best(board, every, max_models))
    models = [m for m in every if m in chosen]  # the catalog's order
    frames = {}
    for m in models:
        emb = store.read_embeddings(name, clean, m)
        keep = emb.view_index == 0
        frames[m] = (np.asarray(emb.sample_id[keep], dtype=np.int64),
                     np.asarray(emb.embedding[keep], dtype=np.float32))
        del emb
    common = np.asarray(index.sample_id, dtype=np.int64)
    for ids, _ in frames.values():
        common = np.intersect1d(common, ids)
    Zs = []
    for m in models:
        ids, Z = frames.pop(m)
        pos = pd.Series(np.arange(len(ids)), index=ids)
        Zs.append(np.ascontiguousarray(Z[pos.loc[common].to_numpy()]))
    at = pd.Series(np.arange(len(index.sample_id)), index=index.sample_id).loc[common].to_numpy()
    label = (index.label.to_numpy(dtype=object)[at] if index.label is not None
             else np.full(len(common), None, dtype=object))
    has = np.array([v is not None and not pd.isna(v) for v in label], dtype=bool)
    names = index.source_names()
    prior, top = _prior(board, models)
    return Pool(name, classes, common, [names[i] for i in at], models, Zs,
                np.flatnonzero(has), label[has].astype(np.int64), prior, top, catalog,
                models_total=len(every))


def with_labels(pool: Pool, given: pd.DataFrame) -> Pool:
    """``pool`` with the labels of ``given`` (the labels table of its dataset: sample_id, label =
    a class name) added where a pool sample has none yet (a known label is never overridden); the
    embeddings are shared, not read again."""
    known = dict(zip(pool.labelled.tolist(), pool.codes.tolist()))
    code = {c: i for i, c in enumerate(pool.classes)}
    pos = np.searchsorted(pool.sample_id, given["sample_id"].to_numpy(dtype=np.int64))
    for p, sid, lab in zip(pos, given["sample_id"].to_numpy(dtype=np.int64),
                           given["label"].astype(str)):
        if p < len(pool.sample_id) and pool.sample_id[p] == sid and lab in code:
            known.setdefault(int(p), code[lab])
    labelled = np.array(sorted(known), dtype=np.int64)
    return replace(pool, labelled=labelled,
                   codes=np.array([known[p] for p in labelled.tolist()], dtype=np.int64))
