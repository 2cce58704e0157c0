"""The ``failed`` table: (model, dataset) entries that failed or are missing, with the reason."""

from __future__ import annotations

from collections.abc import Mapping, Sequence

import pandas as pd

from zoorank.config import RunConfig
from zoorank.decide.leaderboard import FAILED_COLUMNS


def failed_models(config: RunConfig, manifest: pd.DataFrame, model_ids: Sequence[str],
                   metrics: pd.DataFrame,
                   wanted: Mapping[str, Sequence[str]] | None = None) -> pd.DataFrame:
    """Failed or missing (model, dataset) entries with the reason, from a fresh manifest.

    O(manifest rows + metric rows + n · datasets) (set lookups per model)."""
    names = {d.name for d in config.datasets}
    rows = []
    reasons = {"failed": None, "pending": "embedding interrupted (pending): rerun `zoorank embed`",
               "stale": "embeddings are stale (made under another config or version): rerun "
                        "`zoorank embed`"}
    bad = manifest[manifest["status"].isin(list(reasons)) & manifest["model_id"].isin(model_ids)
                   & manifest["dataset"].isin(names)]
    for r in bad.itertuples(index=False):
        rows.append({"model_id": r.model_id, "dataset": r.dataset, "view": r.view,
                     "stage": "embed", "error": reasons[r.status] or str(r.error)})
    failed_keys = {(r["model_id"], r["dataset"]) for r in rows}
    scored = set(zip(metrics["model_id"], metrics["dataset"])) if not metrics.empty else set()
    embedded = set(zip(manifest["model_id"], manifest["dataset"]))
    for ds in config.datasets:
        for mid in model_ids:
            if (mid, ds.name) in failed_keys or (mid, ds.name) in scored:
                continue
            if wanted is not None and ds.name not in wanted.get(mid, (ds.name,)):
                continue  # not ranked on this dataset (the model entry's datasets:)
            if (mid, ds.name) in embedded:
                rows.append({"model_id": mid, "dataset": ds.name, "view": "", "stage": "score",
                             "error": "no metrics for the current config (run `zoorank score`)"})
            else:
                rows.append({"model_id": mid, "dataset": ds.name, "view": "", "stage": "embed",
                             "error": "no embeddings in the store (embed not run)"})
    return pd.DataFrame(rows, columns=FAILED_COLUMNS)

