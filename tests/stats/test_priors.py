"""Priors and confounds on per-model vectors: Kendall's τ-b over the models both sides rank, and the
pairs whose |τ| reaches the threshold over enough models."""

from __future__ import annotations

import math

import numpy as np
import pytest

from zoorank.stats.priors import confounds, is_prior_column, prior_tau


def test_prior_tau_hand_case_and_the_metrics_direction():
    # one discordant pair of six: τ = (5 − 1) / 6
    assert prior_tau([1, 2, 3, 4], [1, 3, 2, 4]) == (pytest.approx(2 / 3), 4)
    assert prior_tau([1, 2, 3, 4], [1, 3, 2, 4], direction=-1)[0] == pytest.approx(-2 / 3)


def test_prior_tau_uses_the_models_both_sides_have_and_is_nan_when_undefined():
    tau, n = prior_tau([1, np.nan, 2, 3], [10, 20, np.nan, 30])
    assert (tau, n) == (pytest.approx(1.0), 2)
    assert math.isnan(prior_tau([1, 1, 1], [1, 2, 3])[0])
    assert prior_tau([1.0, np.nan], [2.0, 3.0]) == (pytest.approx(math.nan, nan_ok=True), 1)
    with pytest.raises(ValueError, match="differ in length"):
        prior_tau([1, 2], [1, 2, 3])


def test_confounds_keep_pairs_at_the_threshold_over_enough_models():
    width = np.arange(6.0)
    metrics = {"grows": (width * 2, 1), "shrinks": (-width, 1), "noise": (np.array([3, 1, 4, 1, 5, 9.0]), 1)}
    found = confounds(metrics, {"width": width}, threshold=0.8, min_models=5)
    assert [(f["metric"], round(f["tau"], 12), f["n"]) for f in found] == [
        ("grows", 1.0, 6), ("shrinks", -1.0, 6)]
    assert confounds(metrics, {"width": width}, min_models=7) == []
    with pytest.raises(ValueError, match="threshold"):
        confounds(metrics, {"width": width}, threshold=0)


def test_prior_columns_are_the_recorded_priors_and_prior_prefixed_ones():
    assert is_prior_column("param_count") and is_prior_column("width")
    assert is_prior_column("prior/imagenet_top1") and not is_prior_column("digits/rankme")
