"""The loss-data reducers (SDL, εSC, MDL) on hand-computed curves."""

from __future__ import annotations

import math

import numpy as np
import pytest

from zoorank.metrics._checks import DegenerateInputWarning
from zoorank.metrics.few_label.loss_data_costs import esc, mdl, sdl

# ----------------------------------------------------------------------------------- helpers


NS = [10, 20, 40]


LOSSES = [2.0, 1.0, 0.05]


def test_sdl_mdl_esc_hand_case_at_eps_0_1():
    # SDL = 10·1.9 + 10·0.9 + 20·0 ; MDL = 10·2 + 10·1 + 20·0.05 ; first n with loss <= 0.1.
    assert sdl(NS, LOSSES, 0.1) == pytest.approx(28.0)
    assert sdl(NS, LOSSES, 0.1, return_bound=True) == (pytest.approx(28.0), False)
    assert mdl(NS, LOSSES) == pytest.approx(31.0)
    assert esc(NS, LOSSES, 0.1) == 40
    assert esc(NS, LOSSES, 0.1, return_bound=True) == (40, False)


def test_sdl_and_esc_at_eps_0_01_are_flagged_bounds():
    value, bounded = sdl(NS, LOSSES, 0.01, return_bound=True)
    assert value == pytest.approx(19.9 + 9.9 + 0.8)  # 30.6, reported "> 30.6"
    assert bounded
    with pytest.warns(DegenerateInputWarning, match="lower bound"):
        assert sdl(NS, LOSSES, 0.01) == pytest.approx(30.6)
    assert esc(NS, LOSSES, 0.01, return_bound=True) == (40, True)  # "> 40"
    with pytest.warns(DegenerateInputWarning, match="never reaches"):
        assert esc(NS, LOSSES, 0.01) == math.inf


def test_sdl_equals_mdl_minus_n_eps_when_loss_stays_above_eps():
    ns = np.array([10, 15, 24, 38, 60])
    losses = np.array([2.3, 1.9, 1.4, 1.1, 0.88])
    eps = 0.1
    value, bounded = sdl(ns, losses, eps, return_bound=True)
    assert bounded
    assert value == pytest.approx(mdl(ns, losses) - ns[-1] * eps)


def test_left_edge_convention_codes_each_chunk_with_the_previous_model():
    first = math.log(10)  # uniform code over 10 classes for (0, 10]
    # chunks (0,10] (10,20] (20,40] coded at losses log 10, 2.0, 1.0
    assert mdl(NS, LOSSES, edge="left", first_chunk_loss=first) == pytest.approx(
        10 * first + 10 * 2.0 + 20 * 1.0
    )
    assert sdl(NS, LOSSES, 0.1, edge="left", first_chunk_loss=first) == pytest.approx(
        10 * (first - 0.1) + 10 * 1.9 + 20 * 0.9
    )
    with pytest.raises(ValueError, match="first_chunk_loss"):
        mdl(NS, LOSSES, edge="left")


def test_curve_reducers_validate_their_input():
    with pytest.raises(ValueError, match="increasing"):
        mdl([10, 10, 40], LOSSES)
    with pytest.raises(ValueError, match="NaN"):
        sdl(NS, [2.0, np.nan, 0.05], 0.1)
    with pytest.raises(ValueError, match="entries"):
        esc(NS, LOSSES[:2], 0.1)
    with pytest.raises(ValueError, match="eps"):
        sdl(NS, LOSSES, -0.1)
    with pytest.raises(ValueError, match="edge"):
        mdl(NS, LOSSES, edge="middle")
