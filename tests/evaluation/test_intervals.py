"""Intervals over units, against hand computations and constructed cases."""

import math

import numpy as np
import pytest
from scipy.stats import beta

from zoorank.evaluation import clopper_pearson_lower, paired_difference, summary, wilson


def test_clopper_pearson_all_hits_is_alpha_root():
    # every unit a hit: P(X >= n | p) = p^n = 1 - 0.9  =>  p = 0.1^(1/n)
    for n in (1, 3, 12, 30):
        assert clopper_pearson_lower(n, n) == pytest.approx(0.1 ** (1 / n), rel=1e-9)


def test_clopper_pearson_matches_the_beta_quantile():
    # the exact one-sided lower bound is the 10% quantile of Beta(k, n - k + 1)
    for k, n in ((7, 10), (1, 5), (19, 24)):
        assert clopper_pearson_lower(k, n) == pytest.approx(beta.ppf(0.1, k, n - k + 1), rel=1e-7)
    assert clopper_pearson_lower(0, 10) == 0.0
    assert clopper_pearson_lower(0, 0) is None


def test_wilson_by_hand():
    k, n, z = 8, 10, 1.6448536269514722
    p = k / n
    centre = (p + z * z / (2 * n)) / (1 + z * z / n)
    half = z / (1 + z * z / n) * math.sqrt(p * (1 - p) / n + z * z / (4 * n * n))
    lo, hi = wilson(k, n)
    assert lo == pytest.approx(centre - half, rel=1e-9)
    assert hi == pytest.approx(centre + half, rel=1e-9)


def test_summary_of_known_values_drops_non_finite():
    s = summary([1.0, 2.0, 3.0, 4.0, np.nan, np.inf])
    assert s == {"median": 2.5, "p90": pytest.approx(3.7), "mean": 2.5, "n": 4}
    assert summary([]) == {"median": None, "p90": None, "mean": None, "n": 0}


def test_paired_bootstrap_excludes_zero_on_a_clear_case_and_includes_it_on_a_null():
    rng = np.random.default_rng(5)
    base = rng.uniform(2, 10, 24)
    clear = paired_difference(base - 3 + rng.normal(0, 0.5, 24), base, seed=1)
    assert clear["n"] == 24 and clear["interval_90"][1] < 0 < -clear["interval_90"][0]
    assert clear["mean_diff_pp"] == pytest.approx(-3, abs=0.4)
    # a symmetric null: differences +-1 in equal number, mean exactly 0
    null = paired_difference(base + np.tile([1.0, -1.0], 12), base, seed=1)
    lo, hi = null["interval_90"]
    assert null["mean_diff_pp"] == pytest.approx(0, abs=1e-12) and lo < 0 < hi


def test_paired_difference_is_seeded_and_drops_unpaired_units():
    a, b = np.array([1.0, 2.0, np.nan, 4.0]), np.array([0.0, np.nan, 1.0, 1.0])
    one, two = paired_difference(a, b, seed=3), paired_difference(a, b, seed=3)
    assert one == two and one["n"] == 2 and one["mean_diff_pp"] == pytest.approx(2.0)
    assert paired_difference([np.nan], [1.0])["interval_90"] is None
    with pytest.raises(ValueError, match="differ in shape"):
        paired_difference([1.0], [1.0, 2.0])
