"""The per-model label-free suite: coverage, recorded settings and errors, collapse diagnostics."""

from __future__ import annotations

import math

import numpy as np
import pytest

from zoorank.config import DEFAULT_METRICS, LABEL_FREE_METRICS, ScoreOptions
from zoorank.metrics.label_free.rankme import rankme
from zoorank.metrics.primary import primary_candidates
from zoorank.metrics.suite import (
    CONFIG_METRICS,
    METRIC_DIRECTIONS,
    duplicate_fraction,
    ensemble_reliability,
    label_free_suite,
    numerical_rank,
    per_model_metrics,
    ranking_value,
    select_samples,
)


@pytest.fixture(scope="module")
def embedding(digits):
    """Digits pixels through a seeded random ReLU projection (1797 × 48) and 200 × 5 noisy views."""
    images, _ = digits
    rng = np.random.default_rng(0)
    w = rng.normal(size=(64, 48))
    pixels = images.reshape(len(images), -1)
    clean = np.maximum(pixels @ w, 0.0).astype(np.float32)
    noisy = pixels[:200, None, :] + rng.normal(0.0, 1.0, (200, 5, 64))
    views = np.maximum(noisy @ w, 0.0).astype(np.float32)
    return clean, views


def _by_metric(rows):
    return {r["metric"]: r for r in rows}


def test_suite_returns_every_requested_metric_with_finite_values_and_settings(embedding):
    clean, views = embedding
    options = ScoreOptions(mle_k=10, cl_chunk_size=500)
    rows = _by_metric(label_free_suite(clean, views, DEFAULT_METRICS, options, seed=3))
    assert list(rows) == per_model_metrics(DEFAULT_METRICS)
    for name, row in rows.items():
        assert math.isfinite(row["value"]), (name, row["params"])
        assert "error" not in row["params"]
        assert row["dim"] == 48
        assert row["n"] == (200 if row["params"]["view"] == "augmented" else 1797)
    assert rows["mle_id"]["params"]["k"] == 10 and rows["mle_id"]["params"]["normalize"]
    assert rows["twonn_id"]["params"]["normalize"] is True
    cl = rows["cluster_learnability"]["params"]
    assert (cl["n_clusters"], cl["chunk_size"], cl["seed"]) == (round(math.sqrt(1797)), 500, 3)
    assert rows["lidar"]["params"]["delta"] == options.lidar_delta
    assert rows["rankme"]["value"] == pytest.approx(rankme(clean, eps=options.eps))


@pytest.mark.parametrize("mode", ["absolute", "relative"])
def test_lidar_delta_mode_is_applied_and_recorded(embedding, mode):
    from zoorank.metrics.label_free.lidar import lidar

    clean, views = embedding
    options = ScoreOptions(lidar_delta=0.1, lidar_delta_mode=mode)
    (row,) = label_free_suite(clean, views, ["lidar"], options)
    assert row["params"]["delta_mode"] == mode and row["params"]["delta"] == 0.1
    assert row["value"] == pytest.approx(lidar(views, delta=0.1, delta_mode=mode), rel=1e-12)
    # Σ_w's mean eigenvalue is far from 1 here, so the two modes differ
    other = "absolute" if mode == "relative" else "relative"
    assert row["value"] != pytest.approx(lidar(views, delta=0.1, delta_mode=other), rel=1e-3)


def test_collapsed_embedding_records_errors_and_scores_lowest(embedding):
    clean, views = embedding
    constant = np.full_like(clean, 0.5)
    healthy = _by_metric(label_free_suite(clean, views, DEFAULT_METRICS))
    collapsed = _by_metric(
        label_free_suite(constant, np.full_like(views, 0.5), DEFAULT_METRICS)
    )
    for row in collapsed.values():
        assert math.isfinite(row["value"]) or row["params"]["error"]  # never an unrecorded NaN
    assert "warnings" in collapsed["lidar"]["params"]  # the documented sentinel, with its warning
    for name in ("rankme", "rankme_aug", "lidar", "numerical_rank"):
        assert collapsed[name]["value"] < healthy[name]["value"], name
    # TwoNN is undefined on a constant embedding: NaN with the reason (the rank stage puts it last).
    assert math.isnan(collapsed["twonn_id"]["value"])
    assert "duplicates" in collapsed["twonn_id"]["params"]["error"]
    # One cluster would make CL a trivial (best) 1.0: recorded as undefined instead.
    assert math.isnan(collapsed["cluster_learnability"]["value"])
    assert "collapsed" in collapsed["cluster_learnability"]["params"]["error"]
    assert collapsed["duplicate_fraction"]["value"] == pytest.approx(1796 / 1797)
    assert healthy["duplicate_fraction"]["value"] == 0.0


def test_missing_views_are_recorded_errors_and_other_metrics_continue(embedding):
    clean, _ = embedding
    rows = _by_metric(label_free_suite(clean, None, ["lidar", "alignment", "rankme"]))
    for name in ("lidar", "alignment"):
        assert math.isnan(rows[name]["value"])
        assert "augmented" in rows[name]["params"]["error"]
    assert math.isfinite(rows["rankme"]["value"])


def test_nan_input_is_a_recorded_error_for_every_metric(embedding):
    clean, views = embedding
    bad = clean.copy()
    bad[3, 4] = np.nan
    rows = label_free_suite(bad, views, ["rankme", "twonn_id", "collapse"])
    assert [r["metric"] for r in rows] == ["rankme", "twonn_id", "numerical_rank",
                                           "duplicate_fraction"]
    for row in rows:
        assert math.isnan(row["value"]) and "NaN" in row["params"]["error"]


def test_directions_cover_every_emitted_metric():
    assert set(CONFIG_METRICS) == set(LABEL_FREE_METRICS)
    emitted = set(per_model_metrics(LABEL_FREE_METRICS)) | {"clid", "clid_family", "nc"}
    assert emitted <= set(METRIC_DIRECTIONS)
    assert set(METRIC_DIRECTIONS.values()) <= {-1, 1}
    assert METRIC_DIRECTIONS["alignment"] == METRIC_DIRECTIONS["uniformity"] == -1
    # alpha-ReQ is ranked by its distance to the ideal exponent 1.
    assert ranking_value("alpha_req", 1.2) > ranking_value("alpha_req", 0.5)
    assert ranking_value("alpha_req", 0.75) == ranking_value("alpha_req", 1.25) == -0.25
    assert ranking_value("uniformity", -3.0) > ranking_value("uniformity", -1.0)


def test_numerical_rank_matches_numpy_matrix_rank_at_float32_precision():
    rng = np.random.default_rng(0)
    low = (rng.normal(size=(300, 7)) @ rng.normal(size=(7, 40))).astype(np.float32)
    assert numerical_rank(low) == np.linalg.matrix_rank(low) == 7
    wide = rng.normal(size=(20, 50)).astype(np.float32)
    assert numerical_rank(wide) == np.linalg.matrix_rank(wide) == 20
    assert numerical_rank(np.zeros((5, 3))) == 0


def test_duplicate_fraction_counts_repeated_rows():
    Z = np.array([[1.0, 2.0], [1.0, 2.0], [0.0, 1.0], [-0.0, 1.0], [3.0, 3.0]])
    assert duplicate_fraction(Z) == pytest.approx(2 / 5)


def test_select_samples_depends_only_on_ids_and_seed():
    ids = np.arange(1000, 3000, 2)
    first = ids[select_samples(ids, 100, seed=5)]
    shuffled = np.random.default_rng(0).permutation(ids)
    again = shuffled[select_samples(shuffled, 100, seed=5)]
    assert len(first) == 100 and set(first) == set(again)
    assert set(first) <= set(ids[select_samples(ids, 300, seed=5)])  # nested subsets
    assert set(first) != set(ids[select_samples(ids, 100, seed=6)])
    assert len(select_samples(ids, None, seed=5)) == len(ids)


def test_ensemble_reliability_of_rotated_copies(embedding):
    clean, _ = embedding
    rng = np.random.default_rng(1)
    members = [clean @ np.linalg.qr(rng.normal(size=(48, 48)))[0] for _ in range(3)]
    ids = np.arange(len(clean)) + 100
    options = ScoreOptions(nc_k=100, nc_reference_size=500)
    table, params = ensemble_reliability(members, ids, options, seed=0)
    assert params["reference_size"] == 500 and params["k"] == 10  # 2% of the reference set
    assert len(table["sample_id"]) == len(ids) - 500
    reference = set(ids[select_samples(ids, 500, seed=0)])
    assert reference.isdisjoint(table["sample_id"])
    assert np.allclose(table["nc"], 1.0)  # Theorem 1: NC is invariant to rotations
    assert (table["feature_variance"] > 0).all()
    norms = np.linalg.norm(clean.astype(np.float64), axis=1)
    keep = np.isin(ids, table["sample_id"])
    assert np.allclose(table["embedding_norm"], norms[keep], rtol=1e-5)


def test_ensemble_reliability_records_baselines_it_cannot_compute(embedding):
    clean, _ = embedding
    members = [clean, clean[:, :30]]  # different widths: feature variance is undefined
    table, params = ensemble_reliability(members, np.arange(len(clean)), ScoreOptions(), seed=0)
    assert len(table["feature_variance"]) > 0 and np.isnan(table["feature_variance"]).all()
    assert "width" in params["errors"]["feature_variance"]
    assert ((table["nc"] >= 0) & (table["nc"] <= 1)).all()


@pytest.mark.parametrize("error", [FloatingPointError("overflow in exp"),
                                   RuntimeError("faiss: Error in void faiss::Clustering"),
                                   MemoryError("Unable to allocate 20.0 GiB")])
def test_any_exception_of_one_metric_is_recorded_and_the_others_go_on(embedding, monkeypatch,
                                                                      error):
    from dataclasses import replace

    from zoorank.metrics import registry

    def fails(Z, **settings):
        raise error

    monkeypatch.setitem(registry.REGISTRY, "twonn_id",
                        replace(registry.REGISTRY["twonn_id"], compute=fails))
    clean, views = embedding
    rows = {r["metric"]: r for r in label_free_suite(clean, views, ["rankme", "twonn_id",
                                                                    "uniformity"])}
    assert math.isnan(rows["twonn_id"]["value"])
    assert rows["twonn_id"]["params"]["error"] == f"{type(error).__name__}: {error}"
    assert math.isfinite(rows["rankme"]["value"]) and math.isfinite(rows["uniformity"]["value"])


def test_the_registry_is_the_one_table_config_rank_and_tune_read():
    from zoorank.config.loading import parse_config
    from zoorank.decide.leaderboard import ranking_vector
    from zoorank.metrics import registry
    from zoorank.tune.objective import FLOOR

    assert LABEL_FREE_METRICS == registry.CONFIG_NAMES
    for name, entry in registry.label_free().items():
        assert entry.direction in (-1, 1) and entry.inputs in ("clean", "augmented", "ensemble",
                                                               "pool", "logits")
        assert ranking_vector(name, np.array([1.0]))[1] == (-1 if entry.target else
                                                            entry.direction)
        # a metric with a computation is what SCORE runs; the others are pool/ensemble scores
        assert (name in per_model_metrics(LABEL_FREE_METRICS)) == (entry.compute is not None)
    assert FLOOR == {n: e.tune_floor for n, e in registry.REGISTRY.items()
                     if e.tune_floor is not None}
    assert set(registry.tune_metrics()) <= set(FLOOR)
    base = {"datasets": [{"name": "d", "source": "sklearn_digits"}],
            "models": [{"source": "timm", "name": "resnet18"}],
            "views": [{"name": "clean"}, {"name": "a", "recipe": "simclr", "per_sample": 2},
                      {"name": "b", "recipe": "simclr", "per_sample": 2}]}
    for name in primary_candidates(LABEL_FREE_METRICS, ["a", "b"]):
        assert parse_config({**base, "rank": {"primary_metric": name}}).primary_metric == name
    assert "lidar@b" in primary_candidates(LABEL_FREE_METRICS, ["a", "b"])
    assert ranking_vector("alignment@b", np.array([1.0]))[1] == -1
    # the default primary metric is the registry's first preference the config computes; one that
    # needs an augmented view is skipped when the config has none
    assert parse_config({**base, "metrics": ["lidar", "alignment"]}).primary_metric == "alignment"
    clean_only = {**base, "views": [{"name": "clean"}], "metrics": ["lidar", "rankme"]}
    assert parse_config(clean_only).primary_metric == "rankme"
