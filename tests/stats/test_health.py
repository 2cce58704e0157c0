"""Health statistics and flags of one model's embeddings."""

import numpy as np
import pytest

from zoorank.stats.health import BLOCKING, HealthThresholds, embedding_health, health_flags


def _gaussian(n=400, d=32, seed=0):
    return np.random.default_rng(seed).normal(size=(n, d)).astype(np.float32)


def test_healthy_gaussian_embeddings_have_no_flags():
    stats = embedding_health(_gaussian())
    assert stats["non_finite_fraction"] == 0 and stats["duplicate_fraction"] == 0
    assert stats["relative_spread"] > 0.9
    assert health_flags(stats) == []


def test_constant_embeddings_are_flagged_collapsed_and_blocking():
    Z = np.tile(np.linspace(1, 2, 16, dtype=np.float32), (200, 1))
    stats = embedding_health(Z)
    assert stats["relative_spread"] == 0.0
    assert stats["duplicate_fraction"] == 199 / 200
    flags = health_flags(stats)
    assert flags == ["collapsed"] and set(flags) <= BLOCKING


def test_all_zero_embeddings_are_collapsed():
    assert health_flags(embedding_health(np.zeros((50, 8)))) == ["collapsed"]


def test_embeddings_on_a_line_are_dimensionally_collapsed():
    t = np.random.default_rng(1).normal(size=(300, 1))
    Z = t * np.ones((1, 64)) + 3.0  # rank 1 after centring, with spread
    stats = embedding_health(Z)
    assert stats["effective_rank"] < 1.01
    assert health_flags(stats) == ["dim_collapsed"]


def test_low_effective_rank_fraction_is_dimensionally_collapsed():
    rng = np.random.default_rng(2)
    Z = rng.normal(size=(1000, 3)) @ rng.normal(size=(3, 512))  # rank 3 of min(n, d) = 512
    stats = embedding_health(Z)
    assert health_flags(stats) == ["dim_collapsed"]
    assert health_flags(stats, thresholds=HealthThresholds(rank_fraction=0.001)) == []


def test_non_finite_rows_and_duplicates_and_failed_metrics_are_flagged():
    Z = _gaussian(100)
    Z[:30] = Z[30]  # 30 of 100 rows repeat row 30
    Z[99, 0] = np.nan
    stats = embedding_health(Z)
    assert stats["non_finite_fraction"] == pytest.approx(0.01)
    assert stats["duplicate_fraction"] == pytest.approx(30 / 99)
    assert health_flags(stats, ["lidar", "clid", "lidar"]) == [
        "non_finite", "duplicates", "failed:clid", "failed:lidar"]
