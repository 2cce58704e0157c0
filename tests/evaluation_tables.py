"""Constructed per-model tables whose protocol answers are known by hand."""

import numpy as np
import pandas as pd

TRUTH = np.array([0.5, 0.6, 0.7, 0.8, 0.9, 1.0])


def ordering(pick: int) -> np.ndarray:
    """Metric values (higher = better) that pick model ``pick`` and then follow the truth."""
    v = TRUTH.copy()
    v[pick] = 2.0
    return v


def sweep_table(n_units: int = 5) -> pd.DataFrame:
    """``n_units`` units of one zoo of six models each (truth 0.5 … 1.0, best = the last):
    rankme picks a model 9 pp from the best everywhere; rankme_proj picks the best on every unit
    but the last, where it picks a model 40 pp from it (truth 0.6)."""
    rows = []
    for u in range(n_units):
        rankme = ordering(5)
        rankme[5], rankme[4] = 1.0, 3.0  # picks truth 0.9 ...
        truth = TRUTH.copy()
        truth[4] = 0.91  # ... which is 9 pp from the best
        proj = ordering(1) if u == n_units - 1 else ordering(5)
        for i in range(6):
            rows.append({"unit": f"u{u}", "zoo": f"z{u}", "model_id": f"m{i}", "truth": truth[i],
                         "rankme": rankme[i], "rankme_proj": proj[i], "board": "embeddings",
                         "kind": "hyperparameter sweep", "epochs": [1, 1, 2, 2, 3, 3][i],
                         "width": [8, 16, 8, 16, 8, 16][i]})
    return pd.DataFrame(rows)
