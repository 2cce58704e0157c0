"""The shortlist rule (zoorank.stats.shortlist_rule): hand-computed cases and invariants."""

from __future__ import annotations

import numpy as np
import pytest

from zoorank.stats.shortlist_rule import check_rule, holds_near_best, near_best, shortlist_mask

NAN = float("nan")


def picked(scores, rule):
    return np.flatnonzero(shortlist_mask(scores, rule)).tolist()


def test_rank_count_keeps_the_first_k_by_score():
    scores = [0.1, 0.9, 0.5, 0.7, 0.3, 0.2]
    assert picked(scores, {"kind": "rank_count", "k": 2}) == [1, 3]
    assert picked(scores, {"kind": "rank_count", "k": 1}) == [1]


def test_rank_count_keeps_every_tie_at_the_cut_off():
    # k = 2 reaches the value 0.5, held by three models: all three are kept without a cap
    scores = [0.9, 0.5, 0.5, 0.5, 0.1, 0.0]
    assert picked(scores, {"kind": "rank_count", "k": 2, "max_fraction": 1.0}) == [0, 1, 2, 3]
    # with the cap (⌊6/2⌋ = 3): the leader, then the ties in the input's order
    assert picked(scores, {"kind": "rank_count", "k": 2}) == [0, 1, 2]
    assert picked([0.5, 0.5, 0.5, 0.5, 0.1, 0.0], {"kind": "rank_count", "k": 1}) == [0, 1, 2]
    assert picked([0.1, 0.5, 0.9, 0.5], {"kind": "rank_count", "k": 2}) == [1, 2]


def test_rank_fraction_rounds_up_and_is_capped_at_half():
    scores = np.arange(10.0)  # best is index 9
    # ⌈0.3 · 10⌉ = 3 (no rounding slip from 0.3 · 10 = 3.0000000000000004)
    assert picked(scores, {"kind": "rank_fraction", "fraction": 0.3}) == [7, 8, 9]
    assert picked(scores, {"kind": "rank_fraction", "fraction": 0.05}) == [9]
    assert picked(scores, {"kind": "rank_fraction", "fraction": 0.9}) == [5, 6, 7, 8, 9]
    # 7 ranked models: the cap is ⌊3.5⌋ = 3
    assert len(picked(np.arange(7.0), {"kind": "rank_fraction", "fraction": 1.0})) == 3


def test_nan_is_never_shortlisted_and_n_counts_finite_scores():
    scores = [NAN, 0.2, NAN, 0.8, 0.5, NAN]
    # 3 ranked: half is ⌈0.5 · 3⌉ = 2 wanted, cap ⌊1.5⌋ = 1
    assert picked(scores, {"kind": "rank_fraction", "fraction": 0.5}) == [3]
    assert picked(scores, {"kind": "rank_count", "k": 10}) == [3]
    assert picked([NAN, NAN], {"kind": "rank_count", "k": 1}) == []


def test_direction_is_the_callers_a_rank_enters_negated():
    ranks = np.array([3.0, 1.0, 2.0, 4.0])
    assert picked(-ranks, {"kind": "rank_count", "k": 2}) == [1, 2]


def test_band_in_pp_keeps_the_edge():
    acc = [0.85, 0.83, 0.8299, 0.70]
    assert picked(acc, {"kind": "band", "width": 2.0, "units": "pp", "max_fraction": 1.0}) == [0, 1]
    assert picked(acc, {"kind": "band", "width": 0.0, "units": "pp"}) == [0]


def test_band_in_sd_and_relative_units():
    scores = np.array([10.0, 9.0, 6.0, 2.0])  # mean 6.75, sd (ddof 0) = sqrt(38.75 / 4)
    sd = float(np.std(scores))
    assert sd == pytest.approx(np.sqrt(9.6875))
    # 1.0 sd keeps values ≥ 10 − 3.11 = 6.89: indices 0, 1; 1.5 sd keeps ≥ 5.33, capped at 2
    assert picked(scores, {"kind": "band", "width": 1.0, "units": "sd"}) == [0, 1]
    assert picked(scores, {"kind": "band", "width": 1.5, "units": "sd", "max_fraction": 1.0}) == [0, 1, 2]
    # relative: 0.1 × |10| = 1 keeps ≥ 9
    assert picked(scores, {"kind": "band", "width": 0.1, "units": "relative"}) == [0, 1]


def test_the_leader_is_always_kept():
    rng = np.random.default_rng(0)
    for rule in ({"kind": "rank_count", "k": 1}, {"kind": "rank_fraction", "fraction": 0.05},
                 {"kind": "band", "width": 0.0, "units": "sd"}):
        s = rng.normal(size=9)
        assert shortlist_mask(s, rule)[int(np.argmax(s))]


@pytest.mark.parametrize("family,values", [
    ("rank_count", [1, 2, 3, 4, 5, 8]),
    ("rank_fraction", [0.05, 0.1, 0.2, 0.3, 0.5]),
    ("band_sd", [0.0, 0.1, 0.3, 0.5, 1.0, 2.0]),
    ("band_pp", [0.0, 0.5, 1.0, 2.0, 5.0, 20.0]),
])
def test_the_shortlist_grows_with_the_rules_parameter(family, values):
    rng = np.random.default_rng(1)
    for _ in range(20):
        s = rng.uniform(0.2, 0.9, size=rng.integers(2, 30))
        s[rng.random(s.size) < 0.1] = np.nan
        s[rng.random(s.size) < 0.2] = 0.5  # ties
        masks = []
        for v in values:
            rule = ({"kind": "rank_count", "k": v} if family == "rank_count" else
                    {"kind": "rank_fraction", "fraction": v} if family == "rank_fraction" else
                    {"kind": "band", "width": v, "units": family[-2:]})
            masks.append(shortlist_mask(s, rule))
        for small, large in zip(masks, masks[1:]):
            assert not (small & ~large).any()  # nested: a larger parameter drops nobody


def test_rank_rules_are_invariant_to_a_monotone_transform():
    rng = np.random.default_rng(2)
    for _ in range(20):
        s = rng.normal(size=15)
        s[3] = np.nan
        for rule in ({"kind": "rank_count", "k": 4}, {"kind": "rank_fraction", "fraction": 0.35}):
            base = shortlist_mask(s, rule)
            assert (shortlist_mask(np.exp(3 * s) + 7, rule) == base).all()
            assert (shortlist_mask(np.arctan(s), rule) == base).all()


def test_band_is_invariant_to_a_shift_and_sd_band_to_a_scale():
    rng = np.random.default_rng(3)
    for _ in range(20):
        s = rng.uniform(0.3, 0.8, size=12)
        pp = {"kind": "band", "width": 3.0, "units": "pp", "max_fraction": 1.0}
        assert (shortlist_mask(s + 0.125, pp) == shortlist_mask(s, pp)).all()
        sd = {"kind": "band", "width": 0.5, "units": "sd", "max_fraction": 1.0}
        assert (shortlist_mask(4.0 * s - 2.0, sd) == shortlist_mask(s, sd)).all()


def test_the_size_never_exceeds_the_cap():
    rng = np.random.default_rng(4)
    for n in range(1, 40):
        s = rng.normal(size=n)
        for rule in ({"kind": "rank_count", "k": 40}, {"kind": "rank_fraction", "fraction": 1.0},
                     {"kind": "band", "width": 100.0, "units": "sd"}):
            size = int(shortlist_mask(s, rule).sum())
            assert size == max(1, n // 2)


def test_near_best_and_hits_read_the_whole_zoo():
    truth = [0.800, 0.797, 0.790, NAN, 0.805]
    # best 0.805: within 0.5 pp are 0.805 and 0.800 (0.5 pp exactly, kept)
    assert near_best(truth).tolist() == [True, False, False, False, True]
    assert holds_near_best([True, False, False, False, False], truth)
    assert not holds_near_best([False, True, True, True, False], truth)
    # the best model need not be shortlistable: an unranked best still sets the bar
    assert not holds_near_best([False, True, True, False, False], truth, tolerance_pp=0.5)
    assert holds_near_best([False, True, False, False, False], truth, tolerance_pp=1.0)


@pytest.mark.parametrize("rule,message", [
    ({"kind": "top"}, "unknown kind"),
    ({"kind": "rank_count", "k": 0}, "k must be"),
    ({"kind": "rank_count", "k": 1.5}, "k must be"),
    ({"kind": "rank_fraction", "fraction": 0.0}, "fraction must be"),
    ({"kind": "band", "width": -1.0, "units": "pp"}, "width must be"),
    ({"kind": "band", "width": 1.0, "units": "bits"}, "units must be"),
    ({"kind": "rank_count", "k": 2, "max_fraction": 0.0}, "max_fraction"),
])
def test_bad_rules_name_the_problem(rule, message):
    with pytest.raises(ValueError, match=message):
        check_rule(rule)


def test_bad_scores_name_the_problem():
    with pytest.raises(ValueError, match="1-D"):
        shortlist_mask([[1.0, 2.0]], {"kind": "rank_count", "k": 1})
    with pytest.raises(ValueError, match="Inf"):
        shortlist_mask([1.0, np.inf], {"kind": "rank_count", "k": 1})
