"""A model flagged ``collapsed`` never ranks above an unflagged one (issue 30): a zoo of real small
torch encoders of digits where one has its last layer zeroed (a constant map: perfect alignment),
ranked by alignment through the RANK stage's own leaderboard and decision code."""

from __future__ import annotations

import json

import numpy as np
import pandas as pd
import pytest
import torch
from sklearn.datasets import load_digits

from zoorank.config.loading import parse_config
from zoorank.stats.ranks import flagged_last
from zoorank.store.schema import METRICS_COLUMNS

N = 300
DATASET = "digits"


def _encoders() -> dict[str, torch.nn.Module]:
    """Seeded linear encoders of the 64 pixels; ``zeroed`` is ``wide`` with its weight zeroed (a
    constant map: every image → the bias)."""
    torch.manual_seed(0)
    out = {"wide": torch.nn.Linear(64, 24), "narrow": torch.nn.Linear(64, 4),
           "tiny": torch.nn.Linear(64, 2)}
    zeroed = torch.nn.Linear(64, 24)
    zeroed.load_state_dict(out["wide"].state_dict())
    with torch.no_grad():
        zeroed.weight.zero_()
    out["zeroed"] = zeroed
    return out


def _shifted(X: np.ndarray) -> np.ndarray:
    """The augmented view: each 8 × 8 digit shifted one pixel to the right."""
    return np.roll(X.reshape(-1, 8, 8), 1, axis=2).reshape(-1, 64)


def _zoo(tmp_path, primary: str):
    """(config, metric rows, fold rows, health rows) of the four encoders, computed by the
    product's metric functions."""
    from zoorank.metrics.label_free.geometry import alignment
    from zoorank.metrics.label_free.rankme import rankme
    from zoorank.stats.health import embedding_health
    from zoorank.stats.uncertainty import fold_assignment

    X = load_digits().data[:N].astype(np.float32) / 16
    cfg = {"store": str(tmp_path / "store"), "seed": 0,
           "datasets": [{"name": DATASET, "source": "sklearn_digits", "limit": N}],
           "models": [{"id": m, "source": "python", "name": "fixtures:unused"} for m in _encoders()],
           "views": [{"name": "clean"}, {"name": "shift", "samples": N, "per_sample": 2}],
           "metrics": ["alignment", "rankme"], "rank": {"primary_metric": primary}}
    config = parse_config(cfg)
    ids = np.arange(N)
    folds_of = fold_assignment(ids, config.score.resample_folds, config.score.resample_fraction,
                               config.seed)
    rows, folds, health = [], [], []
    with torch.no_grad():
        for mid, enc in _encoders().items():
            Z = enc(torch.from_numpy(X)).numpy().astype(np.float64)
            Z2 = enc(torch.from_numpy(_shifted(X))).numpy().astype(np.float64)
            values = {"alignment": (alignment(Z, Z2),
                                    [alignment(Z[folds_of == k], Z2[folds_of == k])
                                     for k in range(config.score.resample_folds)]),
                      "rankme": (rankme(Z), [rankme(Z[folds_of == k])
                                             for k in range(config.score.resample_folds)])}
            for metric, (value, per_fold) in values.items():
                rows.append({"model_id": mid, "dataset": DATASET, "metric": metric,
                             "value": value, "params": json.dumps({}), "n": N,
                             "dim": Z.shape[1], "seed": 0, "zoorank_version": "test",
                             "fingerprint": f"{mid}-{metric}"})
                folds += [{"model_id": mid, "dataset": DATASET, "metric": metric, "fold": k,
                           "value": v, "fingerprint": "f"} for k, v in enumerate(per_fold)]
            health.append({"model_id": mid, "dataset": DATASET, **embedding_health(Z)})
    return (config, pd.DataFrame(rows, columns=METRICS_COLUMNS), pd.DataFrame(folds),
            pd.DataFrame(health))


def _decided(tmp_path, primary: str) -> pd.DataFrame:
    from zoorank.decide.decision import decide
    from zoorank.rank.board import build_leaderboard
    from zoorank.zoo import resolve_models

    config, metrics, folds, health = _zoo(tmp_path, primary)
    board, settings = build_leaderboard(config, resolve_models(config), metrics, pd.DataFrame())
    # the premise: alignment alone puts the constant map first (0, its ideal)
    if primary == "alignment":
        assert board["model_id"].iloc[0] == "zeroed"
        assert board.set_index("model_id").loc["zeroed", f"{DATASET}/alignment"] == 0.0
    board, _ = decide(config, board, settings, metrics, folds, health)
    return board.set_index("model_id")


@pytest.mark.parametrize("primary", ["alignment", "rankme"])
def test_a_collapsed_encoder_ranks_below_every_unflagged_one(tmp_path, primary):
    board = _decided(tmp_path, primary)
    assert board.loc["zeroed", "flags"].split(",")[0] == "collapsed"
    healthy = board.drop(index="zeroed")
    assert (healthy["flags"] == "").all()
    assert board.loc["zeroed", "rank"] == len(board)
    assert (healthy["rank"] < board.loc["zeroed", "rank"]).all()
    assert sorted(healthy["rank"]) == [1.0, 2.0, 3.0]
    assert list(board.index)[-1] == "zeroed"  # the table is sorted by the new rank
    # no part in p(best) or the top set: the unflagged models' p(best) sums to 1
    assert board.loc["zeroed", "p_best"] == 0.0 and not board.loc["zeroed", "in_top_set"]
    assert healthy["p_best"].sum() == pytest.approx(1.0)
    assert board["in_top_set"].any()


def test_flagged_last_closed_form():
    rank = np.array([1.0, 2.0, 3.0, 4.0, np.nan, 2.0])
    flagged = np.array([True, False, False, True, False, False])
    # unflagged ranks 2, 3, 2 → 1.5, 3, 1.5; flagged 1, 4 → 4, 5 (order kept) or 4.5, 4.5
    np.testing.assert_array_equal(flagged_last(rank, flagged),
                                  [4.0, 1.5, 3.0, 5.0, np.nan, 1.5])
    np.testing.assert_array_equal(flagged_last(rank, flagged, order_flagged=False),
                                  [4.5, 1.5, 3.0, 4.5, np.nan, 1.5])
    np.testing.assert_array_equal(flagged_last(rank, flagged, method="min"),
                                  [4.0, 1.0, 3.0, 5.0, np.nan, 1.0])
    # nothing flagged: the order is unchanged
    np.testing.assert_array_equal(flagged_last([3.0, 1.0, 2.0], [False] * 3), [3.0, 1.0, 2.0])
    with pytest.raises(ValueError, match="flagged"):
        flagged_last([1.0, 2.0], [True])
