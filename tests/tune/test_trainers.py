"""Reference SSL trainers on real (tiny) digits: determinism, resuming, export through the zoo."""

from __future__ import annotations

import numpy as np
import pytest
import torch

from zoorank.config import DatasetSpec, ModelSpec
from zoorank.data import load_samples
from zoorank.tune.config import TrialParams
from zoorank.tune.trainers import BACKBONE_FILE, SSLTrainer, decode_images, preprocess
from zoorank.zoo import Geometry, load_model, resolve_models

MEAN, STD = (0.5, 0.5, 0.5), (0.25, 0.25, 0.25)
KWARGS = {"width": 8, "depth": 2}


@pytest.fixture(scope="module", autouse=True)
def one_thread():
    """Trials run with one torch thread; on a busy 2-core machine more threads only contend."""
    before = torch.get_num_threads()
    torch.set_num_threads(1)
    yield
    torch.set_num_threads(before)


@pytest.fixture(scope="module")
def images():
    table = load_samples(DatasetSpec(name="digits", source="sklearn_digits", limit=96), seed=0)
    return decode_images(table.images)


def make(images, epochs=2, **params) -> SSLTrainer:
    p = TrialParams(batch_size=32, proj_hidden=32, proj_dim=16, **params)
    return SSLTrainer(p, "small_cnn", KWARGS, images, Geometry(8, "bilinear", 1.0), MEAN, STD,
                      "simclr", epochs, device="cpu")


def state(trainer: SSLTrainer) -> dict[str, torch.Tensor]:
    out = {f"online.{k}": v.clone() for k, v in trainer.online.state_dict().items()}
    if trainer.target is not None:
        out.update({f"target.{k}": v.clone() for k, v in trainer.target.state_dict().items()})
    return out


def assert_same(a: dict, b: dict) -> None:
    assert a.keys() == b.keys()
    for k in a:
        assert torch.equal(a[k], b[k]), k


@pytest.mark.parametrize("method", ["simclr", "vicreg", "byol"])
def test_training_is_deterministic_for_a_seed(images, method):
    runs = []
    for _ in range(2):
        t = make(images, method=method, seed=3)
        t.train_steps(3)
        runs.append(state(t))
    assert_same(runs[0], runs[1])
    other = make(images, method=method, seed=4)
    other.train_steps(3)
    differs = [k for k in runs[0] if not torch.equal(runs[0][k], state(other)[k])]
    assert differs, "a different seed must give different weights"


@pytest.mark.parametrize("method", ["simclr", "byol"])
def test_resuming_from_a_checkpoint_continues_the_same_run(images, method, tmp_path):
    straight = make(images, method=method, seed=1)
    straight.train_steps(4)
    first = make(images, method=method, seed=1)
    first.train_steps(2)
    first.save(tmp_path)
    resumed = make(images, method=method, seed=1)
    resumed.load(tmp_path)
    assert resumed.step == 2
    resumed.train_steps(2)
    assert_same(state(straight), state(resumed))


@pytest.mark.parametrize("method", ["simclr", "vicreg", "byol"])
def test_each_method_lowers_its_loss_on_a_fixed_batch(images, method):
    t = make(images, epochs=50, method=method, lr=3e-3)
    v1, v2 = t.views(0)
    x1, x2 = t._input(v1), t._input(v2)

    def loss() -> float:
        t.online.train()
        with torch.no_grad():
            return float(t.loss(x1, x2)[0])

    before = loss()
    t.optimizer.param_groups[0]["lr"] = 3e-3
    for _ in range(15):
        value, _ = t.loss(x1, x2)
        t.optimizer.zero_grad()
        value.backward()
        t.optimizer.step()
    assert np.isfinite(before) and loss() < before


def test_byol_target_follows_the_online_network_by_ema(images):
    t = make(images, method="byol", ema=0.75)
    target_before = [p.clone() for p in t.target.parameters()]
    t.train_step()
    online_after = list(t.student.parameters())
    for tb, ta, o in zip(target_before, t.target.parameters(), online_after):
        assert torch.allclose(ta, 0.75 * tb + 0.25 * o, atol=1e-7)


def test_the_lr_follows_a_cosine_from_lr_to_zero(images):
    t = make(images, epochs=3, lr=0.2)
    total = t.total_steps
    assert t.lr_at(0) == pytest.approx(0.2)
    assert t.lr_at(total // 2) == pytest.approx(0.1 * (1 + np.cos(np.pi * (total // 2) / total)))
    assert t.lr_at(total) == pytest.approx(0.0, abs=1e-12)


def test_an_exported_backbone_loads_through_the_zoo_with_identical_features(images, tmp_path):
    from zoorank.config.loading import parse_config

    t = make(images, method="vicreg", seed=2)
    t.train_steps(3)
    t.save_backbone(tmp_path / BACKBONE_FILE)
    spec = ModelSpec(id="vicreg-s2", source="python", name="zoorank.tune.models:small_cnn",
                     model_kwargs=KWARGS, checkpoint=str(tmp_path / BACKBONE_FILE),
                     input_size=8, mean=MEAN, std=STD, interpolation="bilinear", crop_pct=1.0)
    config = parse_config({"datasets": [{"name": "digits", "source": "sklearn_digits"}],
                           "models": [spec.model_dump(mode="json")]})
    (resolved,) = resolve_models(config)
    assert resolved.geometry == Geometry(8, "bilinear", 1.0)
    model = load_model(resolved)
    batch = np.stack(images[:20])
    with torch.no_grad():
        ours, _ = t.embed(batch)
        theirs = model(preprocess(batch, resolved.normalization.mean, resolved.normalization.std))
    np.testing.assert_allclose(theirs.numpy(), ours, rtol=1e-5, atol=1e-6)
