"""p(best | labels)'s pick-change probability (zoorank.metrics.active.label_posterior) and CODA's label
draws that feed it on classifier zoos (zoorank.metrics.active.coda.coda_draw_labels): closed cases and
frequencies."""

from __future__ import annotations

import math

import numpy as np

from zoorank.metrics.active import coda
from zoorank.metrics.active.label_posterior import labelled_p_best, pick_change_probability


def test_a_batch_cannot_change_a_settled_pick_and_always_changes_a_wrong_one():
    # model 0 right on all 60 labels, models 1 and 2 on none: 5 more labels, whatever they are,
    # leave model 0 the argmax; naming model 1 today's pick, every draw "changes" it
    correct = np.zeros((60, 3))
    correct[:, 0] = 1.0
    rng = np.random.default_rng(0)
    drawn = rng.integers(0, 2, size=(8, 5, 3)).astype(np.float64)
    assert int(np.argmax(labelled_p_best(correct, population=200))) == 0
    assert pick_change_probability(correct, drawn, 0, population=200) == 0.0
    assert pick_change_probability(correct, drawn, 1, population=200) == 1.0
    assert math.isnan(pick_change_probability(correct, np.zeros((8, 0, 3)), 0))
    assert math.isnan(pick_change_probability(correct, np.zeros((0, 5, 3)), 0))


def test_the_change_is_counted_per_draw():
    # two models tied on 10 labels (each right on 5, on different images); draw 0 makes model 1
    # right on 40 more images and model 0 on none, draw 1 the reverse: with 10 + 40 labels of a
    # pool of 50 (every image), p(best) is the observed accuracies, so draw 0 moves the pick to
    # model 1 and draw 1 keeps model 0: one change in two draws
    correct = np.zeros((10, 2))
    correct[:5, 0] = 1.0
    correct[5:, 1] = 1.0
    drawn = np.zeros((2, 40, 2))
    drawn[0, :, 1] = 1.0
    drawn[1, :, 0] = 1.0
    assert pick_change_probability(correct, drawn, 0, population=50) == 0.5


def test_coda_label_draws_follow_its_class_estimate():
    rng = np.random.default_rng(1)
    P = rng.dirichlet(np.ones(4), size=(3, 30))
    prior = coda.coda_prior(P)
    at, y = np.array([0, 1, 2]), np.array([3, 0, 1])
    batch = np.array([5, 9, 17])
    q, _ = coda.coda_class_posterior(coda.coda_posterior(prior, at, y), prior.predictions)
    draws = coda.coda_draw_labels(prior, at, y, batch, draws=20000, seed=3)
    assert draws.shape == (20000, 3) and draws.min() >= 0 and draws.max() <= 3
    for j, i in enumerate(batch):
        freq = np.bincount(draws[:, j], minlength=4) / 20000
        se = np.sqrt(q[i] * (1 - q[i]) / 20000)
        assert (np.abs(freq - q[i]) <= 4 * se + 1e-12).all()
    # seeded
    np.testing.assert_array_equal(draws[:5], coda.coda_draw_labels(prior, at, y, batch, 20000,
                                                                   seed=3)[:5])
