"""The priors of each model as leaderboard columns: ``param_count`` and ``width`` (recorded by EMBED in
the manifest: ``param_count`` and ``dim``) and ``prior/<name>`` (the zoo entry's ``prior:`` values).

Conventions (every prior is higher-is-better, the confound rule) are those of
:mod:`zoorank.stats.priors`. Cost O(rows of the manifest) once per RANK.
"""

from __future__ import annotations

from collections.abc import Sequence
from typing import Any

import numpy as np
import pandas as pd

from zoorank.stats.priors import PARAMS, PRIOR_PREFIX, WIDTH, is_prior_column


def model_priors(models: Sequence[Any], manifest: pd.DataFrame | None) -> pd.DataFrame:
    """One row per model: ``model_id``, ``param_count``, ``width`` and ``prior/<name>`` (float64; NaN
    where unknown).

    ``param_count`` and ``width`` come from the model's ``done`` manifest rows (the largest value
    over its datasets and views: a model's width is the same on each; a row written before
    parameter counts were recorded has none). ``prior/<name>`` columns are the union of the
    models' ``prior:`` names, sorted.
    """
    ids = [m.model_id for m in models]
    out = pd.DataFrame({"model_id": ids})
    for col, source in ((PARAMS, "param_count"), (WIDTH, "dim")):
        values = pd.Series(np.nan, index=ids, dtype=np.float64)
        if manifest is not None and not manifest.empty and source in manifest:
            done = manifest[(manifest["status"] == "done") & manifest["model_id"].isin(ids)]
            got = pd.to_numeric(done[source], errors="coerce").astype(np.float64)
            best = got.groupby(done["model_id"]).max()
            values.loc[best.index] = best.to_numpy()
        out[col] = values.to_numpy()
    priors = {m.model_id: dict(getattr(getattr(m, "spec", None), "prior", None) or {})
              for m in models}
    for name in sorted({k for p in priors.values() for k in p}):
        out[f"{PRIOR_PREFIX}{name}"] = np.array(
            [priors[m].get(name, np.nan) for m in ids], dtype=np.float64)
    return out


def with_priors(board: pd.DataFrame, priors: pd.DataFrame) -> pd.DataFrame:
    """``board`` with the prior columns of ``priors`` (:func:`model_priors`) joined on model_id."""
    board = board.copy()
    table = priors.set_index("model_id")
    for col in [c for c in priors.columns if is_prior_column(c)]:
        board[col] = board["model_id"].map(table[col]).to_numpy(dtype=np.float64)
    return board

