"""EMBED's decode groups: every (dataset, geometry) group of the entries to compute is decoded once
into the view cache (:mod:`zoorank.embed.viewcache`), keyed by its content, geometry, views and seed."""

from __future__ import annotations

import hashlib
import logging
import uuid
from collections import defaultdict
from typing import Any

import numpy as np

from zoorank.catalog import EMBED_VERSION, Entry, plan_entries
from zoorank.config import RunConfig, ViewSpec
from zoorank.config.digests import fingerprint
from zoorank.data.sample_reader import UnreadableError
from zoorank.data.sources import SampleIndex
from zoorank.data.views import ViewGeometry, ViewPlan
from zoorank.embed import viewcache
from zoorank.embed.entry_rows import pending_row
from zoorank.errors import InputError
from zoorank.store import Store
from zoorank.zoo import Geometry, ResolvedModel

log = logging.getLogger("zoorank.embed")


def _group_plans(entries: list[Entry]) -> list[ViewPlan]:
    views: dict[str, ViewSpec] = {}
    needed: dict[str, set[int]] = defaultdict(set)
    for e in entries:
        views[e.view.name] = e.view
        needed[e.view.name].update(e.samples.tolist())
    return [ViewPlan(v.name, v.recipe_name, v.per_sample,
                     np.asarray(sorted(needed[v.name]), np.int64), v.is_clean)
            for v in views.values()]


def _cache_key(index: SampleIndex, geometry: Geometry, plans: list[ViewPlan], seed: int) -> str:
    return fingerprint(
        EMBED_VERSION, index.content_digest, vars(geometry), seed,
        [(p.name, p.recipe, p.per_sample, p.is_clean,
          hashlib.sha256(np.ascontiguousarray(p.samples, "<i8").tobytes()).hexdigest())
         for p in plans])


Groups = dict[tuple[str, Geometry], list[Entry]]
Caches = dict[tuple[str, Geometry], tuple[str, dict[str, Any]]]


def decode_groups(store: Store, config: RunConfig, indexes: dict[str, SampleIndex],
                   todo: list[Entry], writer_id: str,
                   ) -> tuple[Groups, Caches, list[dict[str, Any]]]:
    """Decode every (dataset, geometry) group of ``todo`` into the view cache (or reuse it).

    A group with samples whose bytes could not be read (after pyarrow's own attempts) is left out: its entries
    come back as failed manifest rows with the reason (the next run tries them again), never as
    entries with fewer samples.
    """
    specs = {s.name: s for s in config.datasets}
    groups: dict[tuple[str, Geometry], list[Entry]] = defaultdict(list)
    for e in todo:
        groups[(e.dataset, e.model.geometry)].append(e)
    caches: dict[tuple[str, Geometry], tuple[str, dict[str, Any]]] = {}
    unread: list[dict[str, Any]] = []
    for (dataset, geometry), entries in groups.items():
        plans = _group_plans(entries)
        # one cache per run: a concurrent run on the same store decodes and drops its own
        key = f"{_cache_key(indexes[dataset], geometry, plans, config.seed)}-{uuid.uuid4().hex[:8]}"
        needed = np.unique(np.concatenate([p.samples for p in plans]))
        try:
            cache = viewcache.build(store, indexes[dataset], needed, plans,
                                    ViewGeometry(geometry.input_size, geometry.interpolation,
                                                 geometry.crop_pct), config.seed, key)
        except UnreadableError as err:
            unread += [{**pending_row(e), "status": "failed", "error": str(err)} for e in entries]
            continue
        caches[(dataset, geometry)] = (key, cache)
        if cache["bad"] and specs[dataset].on_bad_image == "fail":
            viewcache.drop(store, dataset, key, writer_id)
            raise InputError(f"{cache['first_error']} (on_bad_image: fail)")
        log.info("embed: decoded %s %spx: %d view rows in %d parts (%.1f s%s)", dataset,
                 geometry.input_size, cache["rows"], len(cache["parts"]), cache["seconds"],
                 ", reused" if cache["reused"] else "")

    return {k: v for k, v in groups.items() if k in caches}, caches, unread


def with_undecodable(store: Store, config: RunConfig, models: list[ResolvedModel],
                      indexes: dict[str, SampleIndex], todo: list[Entry], groups: Groups,
                      precision: str) -> tuple[list[Entry], Groups]:
    """``todo`` and ``groups`` re-fingerprinted when this run's decode found undecodable samples
    not known when they were planned (the set is part of each entry's dataset selection)."""
    import dataclasses

    from zoorank.data.undecodable import known_undecodable

    changed = False
    for spec in config.datasets:
        index = indexes[spec.name]
        now = np.intersect1d(known_undecodable(store, spec.name, index.content_digest),
                             index.sample_id)
        if not np.array_equal(now, index.undecodable):
            indexes[spec.name] = dataclasses.replace(index, undecodable=now)
            changed = True
    if not changed:
        return todo, groups
    fresh = {e.key: e for e in plan_entries(config, models, indexes, precision)}
    return ([fresh[e.key] for e in todo],
            {g: [fresh[e.key] for e in entries] for g, entries in groups.items()})
