"""Metrics the config makes impossible are skipped, not failed (:mod:`zoorank.catalog.applicability`):
what each metric needs is read from the registry's inputs, SCORE plans no row for them and says so
in one line, and the health flags name only metrics that ran and failed."""

from __future__ import annotations

import math

import pandas as pd
import pytest

from zoorank.catalog.applicability import inapplicable_metrics, skipped_line
from zoorank.catalog.scoring import ModelInfo, plan_score, pool_metrics
from zoorank.config import RunConfig
from zoorank.decide.decision import model_flags
from zoorank.metrics import registry


def _config(views: list[dict], metrics: list[str] | None = None) -> RunConfig:
    data = {"datasets": [{"name": "d", "source": "sklearn_digits"}],
            "models": [{"id": "a", "source": "timm", "name": "resnet10t"}], "views": views}
    if metrics is not None:
        data["metrics"] = metrics
    return RunConfig.model_validate(data)


CLEAN = [{"name": "clean"}]
BOTH = [{"name": "clean"}, {"name": "simclr", "samples": 10, "per_sample": 2}]
AUGMENTED = [{"name": "simclr", "samples": 10, "per_sample": 2}]


def _augmented(config: RunConfig) -> set[str]:
    """The configured metrics whose registry entry reads augmented views (the suite's view)."""
    return {m for m in registry.expand(config.metrics) if registry.info(m).inputs == "augmented"}


def test_without_an_augmented_view_the_augmented_metrics_are_skipped_in_one_line():
    config = _config(CLEAN, ["rankme", "lidar", "rankme_aug", "alignment", "twonn_id"])
    grouped = [ModelInfo("a", group="g"), ModelInfo("b", group="g")]
    skipped = inapplicable_metrics(config, grouped)
    assert set(skipped) == _augmented(config) == {"lidar", "rankme_aug", "alignment"}
    line = skipped_line(config, grouped)
    assert line.startswith("skipped ") and line.count("; ") == 0
    assert line.endswith("they need an augmented view (views: clean)")
    assert set(line.removeprefix("skipped ").split(": ")[0].split(", ")) == set(skipped)
    # with the view, nothing is skipped
    assert skipped_line(_config(BOTH, list(config.metrics)), grouped) is None


def test_without_the_clean_view_clean_metrics_and_pools_over_them_are_skipped():
    config = _config(AUGMENTED, ["rankme", "lidar", "clid"])
    skipped = inapplicable_metrics(config)
    # clid combines cluster_learnability and twonn_id, both on the clean view
    assert set(skipped) == {"rankme", "cluster_learnability", "twonn_id", "clid", "clid_family"}
    assert skipped["rankme"] == "the clean view (views: simclr)"
    assert pool_metrics(config) == []


def test_an_ensemble_metric_needs_two_models_sharing_a_group_and_a_dataset():
    config = _config(CLEAN, ["rankme", "nc"])
    assert inapplicable_metrics(config, [ModelInfo("a"), ModelInfo("b", group="g")]) == {
        "nc": "a seed ensemble (two or more models with one group)"}
    assert inapplicable_metrics(config, [ModelInfo("a", group="g"),
                                         ModelInfo("b", group="g")]) == {}
    line = skipped_line(config, [ModelInfo("a")])
    assert line == "skipped nc: it needs a seed ensemble (two or more models with one group)"


def test_score_plans_no_row_for_a_skipped_metric():
    config = _config(CLEAN, ["rankme", "lidar", "alignment"])
    manifest = pd.DataFrame([{"dataset": "d", "view": "clean", "model_id": "a",
                              "status": "done", "fingerprint": "f", "shards": None}])
    plan = plan_score(config, [ModelInfo("a")], manifest, pd.DataFrame(columns=["model_id"]))
    (task,) = plan.model_tasks
    assert task.metrics == ("rankme",)


def test_flags_name_the_metrics_that_ran_and_failed_only():
    board = pd.DataFrame({"model_id": ["ok", "bad"]})
    rows = [("ok", "rankme", 3.0), ("bad", "rankme", math.nan), ("bad", "twonn_id", 2.0)]
    metrics = pd.DataFrame([{"model_id": m, "dataset": "d", "metric": k, "value": v}
                            for m, k, v in rows])
    flags = model_flags(board, metrics, pd.DataFrame(), ["d"])
    # a skipped metric has no row: no flag; a NaN row is a failure
    assert flags == {"ok": {"d": []}, "bad": {"d": ["failed:rankme"]}}


@pytest.mark.parametrize("views", [CLEAN, BOTH])
def test_the_default_metrics_skip_exactly_what_the_views_cannot_give(views):
    config = _config(views)
    skipped = inapplicable_metrics(config, [ModelInfo("a", group="g", family="f"),
                                            ModelInfo("b", group="g", family="f")])
    assert set(skipped) == (_augmented(config) if views == CLEAN else set())
