"""The public probe API (zoorank.probe): the probe set EMBED makes, metrics of a user's model, flags.

Reference values come from the data and metric functions called directly, and from a real
``zoorank run`` on the exported checkpoint (Ray, one small model).
"""

from __future__ import annotations

import re
from pathlib import Path

import numpy as np
import pytest
import torch

from zoorank.config import ScoreOptions
from zoorank.config.loading import parse_config
from zoorank.data import load_samples
from zoorank.data.images import decode_image
from zoorank.data.views import clean_view, make_views
from zoorank.metrics.suite import label_free_suite
from zoorank.probe import DEFAULT_METRICS, build_probe_set, embed_images, evaluate
from zoorank.tune.models import small_cnn

README = Path(__file__).resolve().parents[1] / "docs" / "tutorials" / "label-free-tune.md"
DIGITS = {"name": "digits", "source": "sklearn_digits", "limit": 300}


@pytest.fixture(scope="module")
def probe():
    return build_probe_set(DIGITS, input_size=8, samples=64, per_sample=4, seed=3,
                           interpolation="bilinear")


@pytest.fixture(scope="module")
def cnn():
    torch.manual_seed(0)
    return small_cnn(width=8, depth=2)


def test_probe_set_is_the_embed_views_of_the_seeded_subset(probe):
    table = load_samples(probe.dataset, 3)
    assert probe.sample_id.tolist() == table.sample_id.tolist()  # every sample's clean view
    assert probe.views.shape == (64, 4, 8, 8, 3) and probe.clean.shape == (300, 8, 8, 3)
    position = {int(s): i for i, s in enumerate(table.sample_id)}
    for k in (0, 17, 63):
        sid = int(probe.view_ids[k])
        img = decode_image(table.images[position[sid]])
        expected = make_views(img, sid, "simclr", probe.geometry, 4, 3)
        assert all(np.array_equal(probe.views[k, i], expected[i]) for i in range(4))
        assert np.array_equal(probe.clean[position[sid]], clean_view(img, probe.geometry))


def test_probe_set_is_fixed_by_its_seed(probe):
    again = build_probe_set(DIGITS, input_size=8, samples=64, per_sample=4, seed=3,
                            interpolation="bilinear")
    other = build_probe_set(DIGITS, input_size=8, samples=64, per_sample=4, seed=4,
                            interpolation="bilinear")
    assert np.array_equal(again.views, probe.views) and np.array_equal(again.view_ids,
                                                                       probe.view_ids)
    assert not np.array_equal(other.view_ids, probe.view_ids)


def test_clean_samples_caps_clean_rows_with_the_score_stage_subset():
    from zoorank.metrics.suite import select_samples

    p = build_probe_set(DIGITS, input_size=8, samples=32, per_sample=2, seed=0, clean_samples=50)
    table = load_samples(p.dataset, 0)
    assert p.sample_id.tolist() == table.sample_id[select_samples(table.sample_id, 50, 0)].tolist()


def test_evaluate_equals_the_score_suite_on_hand_made_features(probe, cnn):
    mean = torch.tensor(probe.mean).view(1, 3, 1, 1)
    std = torch.tensor(probe.std).view(1, 3, 1, 1)

    def features(images):
        x = torch.from_numpy(images).permute(0, 3, 1, 2).float() / 255.0
        with torch.no_grad():
            return cnn.eval()((x - mean) / std).numpy()

    clean = features(probe.clean)
    views = features(probe.views.reshape(-1, 8, 8, 3)).reshape(64, 4, -1)
    expected = {r["metric"]: r["value"]
                for r in label_free_suite(clean, views, DEFAULT_METRICS, ScoreOptions(), 3)}
    result = evaluate(cnn, probe)
    assert set(DEFAULT_METRICS) <= set(result.metrics)
    for name in DEFAULT_METRICS:
        assert result.metrics[name] == pytest.approx(expected[name], rel=1e-4, abs=1e-6), name
    assert result.metrics["clid_raw"] == pytest.approx(
        100 * expected["cluster_learnability"] + expected["twonn_id"])
    assert result.healthy and (result.n, result.q, result.dim) == (64, 4, cnn.num_features)


def test_a_callable_a_training_module_and_a_float64_module_give_the_same_scores(probe, cnn):
    names = ["rankme", "lidar", "uniformity"]
    reference = evaluate(cnn, probe, metrics=names)
    training = _copy(cnn).train()
    from_training = evaluate(training, probe, metrics=names)
    assert training.training  # evaluate puts the mode back
    as_callable = evaluate(lambda x: cnn(x), probe, metrics=names)
    double = evaluate(_copy(cnn).double(), probe, metrics=names)
    for name in names:
        for other in (from_training, as_callable, double):
            assert other.metrics[name] == pytest.approx(reference.metrics[name], rel=1e-4), name


def _copy(module):
    import copy

    return copy.deepcopy(module)


def test_bf16_autocast_scores_close_to_fp32(probe, cnn):
    fp32 = evaluate(cnn, probe, metrics=["rankme", "rankme_aug"])
    bf16 = evaluate(cnn, probe, metrics=["rankme", "rankme_aug"], precision="bf16")
    assert bf16.metrics["rankme"] == pytest.approx(fp32.metrics["rankme"], rel=0.05)


def test_feature_maps_and_tuples_are_pooled_as_the_zoo_pools_them(probe, cnn):
    images = probe.clean[:10]
    flat = embed_images(cnn, images, probe.mean, probe.std)
    maps = embed_images(lambda x: (cnn.features(x),), images, probe.mean, probe.std)
    np.testing.assert_allclose(maps, flat, rtol=1e-5, atol=1e-6)


def test_collapsed_and_nonfinite_models_are_flagged(probe):
    collapsed = evaluate(lambda x: torch.ones(len(x), 16), probe)
    assert collapsed.flags["collapsed"] and collapsed.flags["low_rank"]
    assert collapsed.metrics["duplicate_fraction"] == pytest.approx(299 / 300)
    assert collapsed.metrics["rankme"] == pytest.approx(1.0, abs=1e-3)  # one direction
    nan = evaluate(lambda x: torch.full((len(x), 4), float("nan")), probe)
    assert nan.flags["nonfinite"] and all(np.isnan(v) for v in nan.metrics.values())
    assert set(nan.errors) == set(nan.metrics)


@pytest.mark.slow
@pytest.mark.timeout(600)
def test_zoorank_run_on_the_exported_checkpoint_reproduces_the_probe_scores(
        ray_session, tmp_path, probe, cnn):
    from safetensors.torch import save_file

    from zoorank.pipeline import run_all
    from zoorank.store import Store

    save_file(cnn.state_dict(), str(tmp_path / "cnn.safetensors"))
    model = {"id": "cnn", "source": "python", "name": "zoorank.tune.models:small_cnn",
             "checkpoint": str(tmp_path / "cnn.safetensors"),
             "model_kwargs": {"width": 8, "depth": 2}}
    config = parse_config(probe.run_config([model], str(tmp_path / "store")))
    run_all(config)
    stored = Store(config.store).read_metrics()
    stored = stored[(stored.model_id == "cnn") & (stored.dataset == "digits")]
    values = dict(zip(stored.metric, stored.value))
    result = evaluate(cnn, probe)
    for name in DEFAULT_METRICS:
        assert values[name] == pytest.approx(result.metrics[name], rel=1e-4, abs=1e-6), name


def test_readme_probe_example_runs(tmp_path, monkeypatch):
    text = README.read_text()
    blocks = re.findall(r"```python\n(.*?)```", text, flags=re.S)
    example = next(b for b in blocks if "build_probe_set" in b and "evaluate(" in b)
    monkeypatch.chdir(tmp_path)
    namespace: dict = {}
    exec(compile(example, "README.md", "exec"), namespace)
    assert "result" in namespace and namespace["result"].metrics["rankme"] > 1.0
