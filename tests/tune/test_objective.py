"""The label-free objective: a fixed probe set, and the metrics a trial reports on it."""

from __future__ import annotations

import warnings

import numpy as np
import pytest
import torch

from zoorank.config import DatasetSpec
from zoorank.data import load_samples
from zoorank.data.images import decode_image
from zoorank.data.views import clean_view, make_views
from zoorank.metrics import registry
from zoorank.metrics.label_free.clid import cluster_learnability
from zoorank.metrics.label_free.geometry import twonn_id
from zoorank.metrics.label_free.lidar import lidar
from zoorank.metrics.label_free.rankme import rankme
from zoorank.tune.config import ObjectiveSpec, TrialParams
from zoorank.tune.objective import FLOOR, build_probe_set, evaluate_probe, score_features
from zoorank.tune.trainers import SSLTrainer, decode_images
from zoorank.zoo import Geometry

GEOMETRY = Geometry(8, "bilinear", 1.0)


@pytest.fixture(scope="module")
def table():
    return load_samples(DatasetSpec(name="digits", source="sklearn_digits", limit=200), seed=0)


def test_the_probe_set_is_fixed_by_its_seed_and_made_by_the_view_recipes(table):
    a = build_probe_set(table, 16, 3, "simclr", GEOMETRY, seed=5)
    b = build_probe_set(table, 16, 3, "simclr", GEOMETRY, seed=5)
    c = build_probe_set(table, 16, 3, "simclr", GEOMETRY, seed=6)
    np.testing.assert_array_equal(a.views, b.views)
    assert not np.array_equal(a.sample_id, c.sample_id)
    assert a.views.shape == (16, 3, 8, 8, 3) and a.clean.shape == (16, 8, 8, 3)
    # the i-th sample's views are the data module's views of that sample, in view_index order
    pos = int(np.flatnonzero(table.sample_id == a.sample_id[3])[0])
    img = decode_image(table.images[pos])
    np.testing.assert_array_equal(a.clean[3], clean_view(img, GEOMETRY))
    for j, view in enumerate(make_views(img, int(a.sample_id[3]), "simclr", GEOMETRY, 3, 5)):
        np.testing.assert_array_equal(a.views[3, j], view)


def test_score_features_match_the_metric_functions():
    rng = np.random.default_rng(0)
    clean = rng.standard_normal((60, 8))
    views = clean[:, None, :] + 0.3 * rng.standard_normal((60, 4, 8))
    out = score_features(views, clean, ["lidar", "rankme", "rankme_aug", "clid"], seed=1)
    assert out["lidar"] == lidar(views)
    assert out["rankme"] == rankme(clean)
    assert out["rankme_aug"] == rankme(views.reshape(-1, 8))
    cl, id_ = cluster_learnability(clean, seed=1), twonn_id(clean, normalize=True)
    assert (out["cluster_learnability"], out["twonn_id"]) == (cl, id_)
    assert out["clid"] == pytest.approx(100 * cl + id_)


def test_etran_energy_is_an_objective_computed_by_its_registration():
    from zoorank.metrics import etran_energy

    rng = np.random.default_rng(1)
    clean = rng.standard_normal((400, 8))
    views = clean[:, None, :] + 0.3 * rng.standard_normal((400, 2, 8))
    assert ObjectiveSpec(metric="etran_energy").metrics == ["etran_energy"]
    out = score_features(views, clean, ["etran_energy", "rankme"])
    assert out["etran_energy"] == etran_energy(clean)
    assert out["etran_energy"] == registry.info("etran_energy").run(clean)[0]
    assert score_features(np.full((30, 2, 4), np.nan), None, ["etran_energy"]) == {
        "etran_energy": FLOOR["etran_energy"]}


def test_collapsed_features_score_the_floor_and_non_finite_ones_too():
    collapsed = np.ones((30, 3, 5))
    with warnings.catch_warnings():
        warnings.simplefilter("ignore")
        out = score_features(collapsed, collapsed[:, 0], ["lidar", "rankme"])
    assert out == {"lidar": 1.0, "rankme": pytest.approx(1.0, abs=1e-4)}
    broken = np.full((30, 3, 5), np.nan)
    assert score_features(broken, None, ["lidar"]) == {"lidar": FLOOR["lidar"]}


def test_evaluate_probe_scores_the_trainers_own_embeddings(table):
    torch.set_num_threads(1)
    probe = build_probe_set(table, 48, 4, "simclr", GEOMETRY, seed=0)
    params = TrialParams(method="simclr", batch_size=32, proj_hidden=32, proj_dim=16)
    trainer = SSLTrainer(params, "small_cnn", {"width": 8, "depth": 2},
                         decode_images(table.images), GEOMETRY, (0.5,) * 3, (0.25,) * 3, "simclr",
                         epochs=1)
    trainer.train_steps(2)
    out = evaluate_probe(trainer, probe, ObjectiveSpec(metric="lidar", report=["rankme"],
                                                       features="both"))
    rep, proj = trainer.embed(probe.views.reshape(-1, 8, 8, 3), projector=True)
    assert out["lidar"] == pytest.approx(lidar(rep.reshape(48, 4, -1)), rel=1e-6)
    assert out["projector_lidar"] == pytest.approx(lidar(proj.reshape(48, 4, -1)), rel=1e-6)
    assert out["rankme"] == pytest.approx(rankme(trainer.embed(probe.clean)[0]), rel=1e-6)
    assert 0 < out["probe_embed_seconds"] <= out["objective_seconds"]
    assert out["degenerate"] == 0.0
    relative = evaluate_probe(trainer, probe, ObjectiveSpec(metric="lidar", lidar_delta=0.1,
                                                            lidar_delta_mode="relative"))
    assert relative["lidar"] == pytest.approx(
        lidar(rep.reshape(48, 4, -1), delta=0.1, delta_mode="relative"), rel=1e-6)
    assert relative["lidar"] != pytest.approx(out["lidar"], rel=1e-3)
