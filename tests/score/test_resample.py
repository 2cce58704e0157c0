"""Resampled metric rows (rank uncertainty) and health rows written by SCORE (zoorank.oracle.resample)."""

from __future__ import annotations

import numpy as np
import pandas as pd
import pytest
import scipy.stats
from test_score import scored  # noqa: F401  (the module's scored store fixture)

from zoorank.catalog import build_catalog
from zoorank.metrics.label_free.rankme import rankme
from zoorank.oracle import resample
from zoorank.score import fold_rows, run_score
from zoorank.stats.health import health_flags
from zoorank.stats.uncertainty import fold_assignment

pytestmark = pytest.mark.timeout(600)


def _folds(store) -> pd.DataFrame:
    return store.read_frame(resample.RESAMPLES)


def test_every_ranked_metric_with_a_value_has_one_row_per_fold(scored):  # noqa: F811
    config, store = scored["config"], scored["store"]
    F = config.score.resample_folds
    folds = _folds(store)
    catalog = build_catalog(config)
    metrics = catalog.fresh_metrics(store, catalog.fresh_manifest(store.read_manifest()))
    ranked = set(fold_rows.resampled_metrics(config)) | {"nc", "clid", "clid_family"}
    finite = metrics[metrics["metric"].isin(ranked) & metrics["value"].notna()]
    counts = folds.groupby(["model_id", "dataset", "metric"]).size()
    for r in finite.itertuples(index=False):
        assert counts.get((r.model_id, r.dataset, r.metric)) == F, (r.model_id, r.metric)
    assert len(resample.fresh_resamples(store, metrics, config.score)) == len(folds)
    # diagnostics are not resampled
    assert not folds["metric"].isin(["numerical_rank", "duplicate_fraction"]).any()


def test_fold_values_equal_the_metric_on_the_fold_images(scored):  # noqa: F811
    config, store = scored["config"], scored["store"]
    clean, _ = scored["arrays"]["proj-a"]
    ids = scored["ids"]
    assign = fold_assignment(ids, config.score.resample_folds, config.score.resample_fraction,
                             config.seed)
    folds = _folds(store).set_index(["model_id", "metric", "fold"])["value"]
    for k in (0, config.score.resample_folds - 1):
        expected = rankme(clean[assign == k].astype(np.float64), eps=config.score.eps)
        assert folds[("proj-a", "rankme", k)] == pytest.approx(expected, rel=1e-6)


def test_clid_folds_are_pool_zscores_of_the_cl_and_id_folds(scored):  # noqa: F811
    folds = _folds(scored["store"])
    one = folds[(folds["fold"] == 0)].set_index(["model_id", "metric"])["value"]
    pool = [m for m in one.xs("clid", level="metric").index]
    cl = np.array([one[(m, "cluster_learnability")] for m in pool])
    id_ = np.array([one[(m, "twonn_id")] for m in pool])
    expected = scipy.stats.zscore(cl) + scipy.stats.zscore(id_)
    assert np.allclose([one[(m, "clid")] for m in pool], expected)


def test_nc_folds_are_fold_means_of_the_stored_per_sample_nc(scored):  # noqa: F811
    folds = _folds(scored["store"])
    nc = folds[folds["metric"] == "nc"]
    assert set(nc["model_id"]) == {"rot-0", "rot-1", "rot-2"}
    assert np.allclose(nc["value"], 1.0)  # rotated copies: NC is 1 on every fold


def test_constant_model_is_flagged_collapsed_and_healthy_ones_are_not(scored):  # noqa: F811
    health = scored["store"].read_frame(resample.HEALTH).set_index("model_id")
    assert health_flags(health.loc["collapsed"].to_dict()) == ["collapsed"]
    for mid in ("proj-a", "rot-0"):
        assert health_flags(health.loc[mid].to_dict()) == []


def test_rerun_recomputes_no_fold_or_health_row(scored):  # noqa: F811
    store = scored["store"]
    before = (_folds(store).sort_values(resample.RESAMPLES_KEY).reset_index(drop=True),
              store.read_frame(resample.HEALTH).sort_values(["model_id"]).reset_index(drop=True))
    version = store.table_version(resample.RESAMPLES)
    run_score(scored["config"])
    assert store.table_version(resample.RESAMPLES) == version
    after = _folds(store).sort_values(resample.RESAMPLES_KEY).reset_index(drop=True)
    pd.testing.assert_frame_equal(before[0], after)
