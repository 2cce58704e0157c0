"""The pre-registered bars of benchmarks/science/stop_heldout.py and shift_heldout.py, and the
choice rule of stop_tuning.py, on hand-made cases whose verdict follows from the rule's words."""

from __future__ import annotations

import sys
from pathlib import Path

import numpy as np
import pytest

sys.path.insert(0, str(Path(__file__).resolve().parents[2] / "benchmarks" / "science"))

import calibration as cal  # noqa: E402
import shift_heldout as SH  # noqa: E402
import stop_heldout as SO  # noqa: E402
import stop_tuning as ST  # noqa: E402


def _lab(fires: int, right: int, reps: int = 50) -> dict:
    return {"fires": fires, "right": right, "reps": reps}


def test_the_stopping_claim_needs_twenty_stops_ninety_percent_right_and_no_bad_zoo():
    # 19 stops, all right: too few to judge, not met
    met, text = SO.claim([("a", _lab(10, 10)), ("b", _lab(9, 9))])
    assert not met and "too small to judge" in text
    # 20 stops, 18 right = 0.90 exactly: met (the bar is >= 0.90)
    assert SO.claim([("a", _lab(10, 9)), ("b", _lab(10, 9))])[0]
    # 30 stops, 27 right (0.90) but one zoo 3 of 5 (0.6 < 0.8, with >= 5 stops): not met
    met, text = SO.claim([("a", _lab(25, 24)), ("b", _lab(5, 3))])
    assert not met and "b" in text
    # a zoo of 4 stops, 2 right, is below the 5 stops that zoo bar needs: met on the pool (27/30)
    assert SO.claim([("a", _lab(26, 25)), ("b", _lab(4, 2))])[0]
    # exactly 0.80 on a zoo of 5 is not under the bar
    assert SO.claim([("a", _lab(20, 20)), ("b", _lab(5, 4))])[0]


def test_the_tuning_rule_picks_the_smallest_widening_all_right_with_no_near_tied_stop():
    def res(stops_by_w):
        return {"g": {z: {"stops": {w: {"fires": f, "right": r} for w, (f, r) in per.items()}}
                      for z, per in stops_by_w.items()}}

    widen = {w: (0, 0) for w in ST.WIDENINGS}
    # at 1 a wrong stop on graded; at 1.5 all right but a (right) stop on 2 tied best; at 2 clean
    results = res({"graded (1 pp steps)": {**widen, 1.0: (3, 2)},
                   "2 tied best": {**widen, 1.0: (2, 2), 1.5: (1, 1)},
                   "clear winner (5 pp ahead)": {w: (100, 100) for w in ST.WIDENINGS}})
    assert ST.chosen(results, "g") == 2.0
    # a wrong stop at every widening: none
    bad = res({"graded (1 pp steps)": {w: (2, 1) for w in ST.WIDENINGS}})
    assert ST.chosen(bad, "g") is None


def _domain(taus: dict[str, float], regrets: dict[str, float]) -> dict:
    return {"rows": {k: {"tau": t, "regret": regrets.get(k, 0.0), "mae": 0.0}
                     for k, t in taus.items()}}


def test_the_shift_hypotheses_on_two_hand_made_domains():
    # means over the two domains: nuclear (0.6+0.4)/2 = 0.5, consensus 0.45, cot 0.6;
    # regret: nuclear 2, embedding board 5 (half 2.5)
    d1 = _domain({"nuclear_norm_accuracy": 0.6, "consensus_agreement": 0.5, "cot_accuracy": 0.7,
                  "emb:rankme": 0.2}, {"nuclear_norm_accuracy": 1.0, "emb:rankme": 4.0})
    d2 = _domain({"nuclear_norm_accuracy": 0.4, "consensus_agreement": 0.4, "cot_accuracy": 0.5,
                  "emb:rankme": 0.3}, {"nuclear_norm_accuracy": 3.0, "emb:rankme": 6.0})
    results = {"x": d1, "y": d2}
    v = SH.verdicts(results, ["x", "y"], "nuclear_norm_accuracy", "cot_accuracy", "emb:rankme")
    assert [met for _, met, _ in v] == [True, True, True]
    assert "nuclear_norm_accuracy 2.0 pp vs rankme 5.0 pp" in v[2][2]
    # the embedding board's regret falls to 2.5 (half 1.25 < 2.0): H3 fails; consensus ahead: H1
    d2["rows"]["emb:rankme"]["regret"] = 1.0
    d2["rows"]["consensus_agreement"]["tau"] = 0.6  # mean 0.55: above nuclear, below COT
    v = SH.verdicts(results, ["x", "y"], "nuclear_norm_accuracy", "cot_accuracy", "emb:rankme")
    assert [met for _, met, _ in v] == [False, True, False]


def test_held_out_zoos_are_the_embedding_zoos_only():
    assert cal.tuned_or_held_out("demo (12 encoders, resampled)") == "held out"
    assert cal.tuned_or_held_out("cifar10 (24 encoders, resampled)") == "held out"
    assert cal.tuned_or_held_out("uva classifiers (4, resampled)") == "tuned on"
    assert cal.tuned_or_held_out("2 tied best") == "tuned on"


def test_the_held_out_shift_domains_are_none_of_the_in_sample_ones():
    B = SH.B
    assert not set(B.HELDOUT_CORRUPTIONS) & set(B.CORRUPTIONS)
    assert len(set(B.HELDOUT_CORRUPTIONS)) == 15
    # the new types are types the in-sample set never used; the new severities reuse its types
    in_types = {c for c, _ in B.CORRUPTIONS}
    assert not {c for c, _ in B.HELDOUT_NEW_TYPES} & in_types
    assert {c for c, _ in B.HELDOUT_NEW_SEVERITIES} == in_types


@pytest.mark.parametrize("zoo", SO.new_settings(), ids=lambda z: z.name)
def test_the_new_simulated_settings_are_none_of_the_tuned_ones(zoo):
    tuned = cal.simulated_zoos()
    assert all(len(zoo.accuracies) != len(t.accuracies) or zoo.rho != t.rho
               or not np.allclose(zoo.accuracies, t.accuracies) for t in tuned)
