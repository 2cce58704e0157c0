"""The loss-data curve on digits: it falls with n, each point depends only on its size and seed,
and it feeds the reducers."""

from __future__ import annotations

import math

import numpy as np
import pytest
import torch
from few_label_cases import digits_split

from zoorank.metrics.few_label.loss_data import loss_data_curve
from zoorank.metrics.few_label.loss_data_costs import mdl, sdl

# ----------------------------------------------------------------------------------- helpers


def test_loss_data_curve_decreases_with_n_on_digits(digits):
    Xtr, ytr, Xte, yte = digits_split(digits)
    ns, losses, per_seed = loss_data_curve(
        Xtr, ytr, Xte, yte, [640, 20, 160, 40], seeds=[0, 1], train_steps=300,
        return_per_seed=True,
    )
    np.testing.assert_array_equal(ns, [20, 40, 160, 640])
    assert per_seed.shape == (4, 2)
    np.testing.assert_allclose(losses, per_seed.mean(axis=1))
    assert np.all(np.diff(losses) < 0), losses
    assert losses[-1] < 0.5 < math.log(10) < losses[0] + 1.0


def test_loss_data_curve_point_depends_only_on_its_size_and_seed(digits):
    Xtr, ytr, Xte, yte = digits_split(digits)
    threads = torch.get_num_threads()
    _, alone = loss_data_curve(Xtr, ytr, Xte, yte, [300], seeds=[3], train_steps=50)
    assert torch.get_num_threads() == threads  # a temporary single-thread setting is restored
    _, together = loss_data_curve(Xtr, ytr, Xte, yte, [30, 300], seeds=[3, 4], train_steps=50)
    _, again = loss_data_curve(Xtr, ytr, Xte, yte, [300], seeds=[3], train_steps=50)
    assert again[0] == alone[0]  # deterministic
    per = loss_data_curve(Xtr, ytr, Xte, yte, [30, 300], seeds=[3, 4], train_steps=50,
                          return_per_seed=True)[2]
    assert per[1, 0] == pytest.approx(alone[0], rel=1e-5)
    assert together[1] == pytest.approx(per[1].mean())


def test_loss_data_curve_mlp_probe_learns_and_feeds_the_reducers(digits):
    Xtr, ytr, Xte, yte = digits_split(digits)
    ns, losses = loss_data_curve(
        torch.tensor(Xtr), torch.tensor(ytr), Xte, yte, [20, 600], seeds=1,
        probe="mlp", hidden_dim=32, train_steps=200, lr=1e-3,
    )
    assert losses[1] < losses[0]
    assert mdl(ns, losses) > sdl(ns, losses, 0.1, return_bound=True)[0] > 0
