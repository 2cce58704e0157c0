"""The default primary metric (``zoorank.metrics.primary``): preference order, the augmented-view
rule and the per-dataset choice by coverage (issue 17)."""

from __future__ import annotations

from zoorank.metrics.primary import (
    DEFAULT_COVERAGE,
    PRIMARY_PREFERENCE,
    default_for_coverage,
    default_order,
    default_primary,
)
from zoorank.metrics.registry import REGISTRY, config_names


def test_default_order_follows_the_preference_and_skips_augmented_metrics_without_a_view():
    every = config_names()
    order = default_order(every)
    assert order[: len(PRIMARY_PREFERENCE)] == [m for m in PRIMARY_PREFERENCE if m in order]
    assert all(REGISTRY[m].primary for m in order)
    clean = default_order(every, augmented=False)
    assert clean == [m for m in order if REGISTRY[m].inputs != "augmented"]
    assert {"lidar", "rankme_aug", "alignment"} <= set(order) - set(clean)
    assert default_primary(["lidar", "rankme"], augmented=False) == "rankme"
    assert default_primary(["lidar", "rankme"]) == PRIMARY_PREFERENCE[
        min(PRIMARY_PREFERENCE.index("lidar"), PRIMARY_PREFERENCE.index("rankme"))]
    assert default_primary([], augmented=False) is None


def test_default_for_coverage_takes_the_first_metric_that_ranks_nearly_the_whole_zoo():
    order = ["nc", "cluster_learnability", "rankme"]
    # a zoo of seed ensembles: NC ranks every model, so NC orders it
    assert default_for_coverage(order, {"nc": 12, "cluster_learnability": 12, "rankme": 12}) == "nc"
    # no ensembles: NC ranks nobody, the next metric orders it
    assert default_for_coverage(order, {"cluster_learnability": 8, "rankme": 8}) == \
        "cluster_learnability"
    # half the zoo in ensembles: NC would leave half unranked, so it is passed over
    assert default_for_coverage(order, {"nc": 6, "cluster_learnability": 12, "rankme": 12}) == \
        "cluster_learnability"
    # one model a metric failed on does not move the default (coverage 19/20 ≥ DEFAULT_COVERAGE)
    assert 19 / 20 >= DEFAULT_COVERAGE
    assert default_for_coverage(order, {"nc": 19, "cluster_learnability": 20, "rankme": 20}) == "nc"
    assert default_for_coverage(order, {}) is None
    assert default_for_coverage(order, {"nc": 0}) is None
