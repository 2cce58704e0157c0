"""Fold rows and health rows for a store written by ``rank_fixtures.write_store`` (no Ray): what
SCORE would write, computed with the same functions (``zoorank.score.fold_rows``,
``zoorank.oracle.resample``'s fingerprints, ``zoorank.stats.health``)."""

from __future__ import annotations

import numpy as np
import pandas as pd
from rank_fixtures import embeddings

from zoorank.store import Store


def write_fold_and_health_rows(store: Store, config, n: int = 300) -> None:
    from zoorank.catalog import build_catalog
    from zoorank.oracle import resample
    from zoorank.score import fold_rows
    from zoorank.stats.health import embedding_health

    catalog = build_catalog(config)
    manifest = catalog.fresh_manifest(store.read_manifest())
    metrics = catalog.fresh_metrics(store, manifest)
    names = fold_rows.resampled_metrics(config)
    entries = {(r.dataset, r.model_id): str(r.fingerprint)
               for r in manifest.itertuples(index=False) if r.status == "done"}
    folds, health = [], []
    for i, ds in enumerate(d.name for d in config.datasets):
        ids, _, models = embeddings(n, offset=i * n)
        for mid, Z in models.items():
            values = fold_rows.fold_values(ids, Z, None, None, names, config.score, config.seed)
            rows = metrics[(metrics["model_id"] == mid) & (metrics["dataset"] == ds)]
            for r in rows.itertuples(index=False):
                if r.metric in values and np.isfinite(r.value):
                    folds += fold_rows.fold_rows(
                        mid, ds, r.metric, values[r.metric],
                        resample.fold_fingerprint(r.fingerprint, config.score))
            health.append({"model_id": mid, "dataset": ds, **embedding_health(Z),
                           "fingerprint": resample.health_fingerprint(entries[(ds, mid)])})
    store.replace_table(resample.RESAMPLES, pd.DataFrame(folds))
    store.replace_table(resample.HEALTH, pd.DataFrame(health))


def ranked_board(root, datasets: tuple[str, ...]) -> tuple[pd.DataFrame, dict]:
    """A store of ``rank_fixtures.write_store`` over ``datasets`` under ``root``, with its fold and
    health rows, ranked without an oracle: (the board RANK returns, the leaderboard's settings)."""
    from rank_fixtures import config_dict, write_store

    from zoorank.config.loading import parse_config
    from zoorank.decide.leaderboard import read_leaderboard_settings
    from zoorank.rank import write_rank_outputs
    from zoorank.zoo import resolve_models

    write_store(str(root), datasets=datasets)
    config = parse_config(config_dict(str(root), datasets=datasets))
    store = Store(str(root))
    write_fold_and_health_rows(store, config)
    board = write_rank_outputs(config, store, resolve_models(config), store.read_metrics(),
                               pd.DataFrame(), show=False)
    return board, read_leaderboard_settings(store)
