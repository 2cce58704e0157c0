"""The SSL losses against direct formulas written out in NumPy on tiny batches."""

from __future__ import annotations

import numpy as np
import pytest
import torch
from torch import nn

from zoorank.tune.losses import byol_loss, ema_update, info_nce_loss, vicreg_loss


def _batch(n: int, d: int, seed: int) -> tuple[np.ndarray, np.ndarray]:
    rng = np.random.default_rng(seed)
    return rng.standard_normal((n, d)), rng.standard_normal((n, d))


def nt_xent_by_hand(a: np.ndarray, b: np.ndarray, t: float) -> float:
    """Chen et al. eq. (1), averaged over all 2N anchors, with explicit loops."""
    z = np.concatenate([a, b])
    z = z / np.linalg.norm(z, axis=1, keepdims=True)
    n2 = len(z)
    n = n2 // 2
    total = 0.0
    for i in range(n2):
        positive = (i + n) % n2
        num = np.exp(z[i] @ z[positive] / t)
        den = sum(np.exp(z[i] @ z[k] / t) for k in range(n2) if k != i)
        total += -np.log(num / den)
    return total / n2


@pytest.mark.parametrize("temperature", [0.1, 0.5, 1.0])
def test_info_nce_equals_the_nt_xent_formula(temperature):
    a, b = _batch(5, 4, seed=1)
    got = info_nce_loss(torch.tensor(a), torch.tensor(b), temperature)
    assert float(got) == pytest.approx(nt_xent_by_hand(a, b, temperature), rel=1e-5)


def test_info_nce_is_lowest_when_views_agree_and_images_differ():
    rng = np.random.default_rng(0)
    a = np.eye(4) * 3
    noise = rng.standard_normal((4, 4))
    aligned = info_nce_loss(torch.tensor(a), torch.tensor(a), 0.1)
    shuffled = info_nce_loss(torch.tensor(a), torch.tensor(noise), 0.1)
    assert float(aligned) < float(shuffled)


def test_vicreg_terms_equal_their_definitions():
    a, b = _batch(6, 3, seed=2)
    eps, gamma = 1e-4, 1.0
    inv = np.mean((a - b) ** 2)
    var = sum(np.mean(np.maximum(0.0, gamma - np.sqrt(z.var(axis=0, ddof=1) + eps))) / 2
              for z in (a, b))
    cov = 0.0
    for z in (a, b):
        c = np.cov(z, rowvar=False, ddof=1)
        cov += (np.sum(c**2) - np.sum(np.diag(c) ** 2)) / z.shape[1]
    loss, terms = vicreg_loss(torch.tensor(a), torch.tensor(b), 25.0, 15.0, 2.0)
    assert terms["invariance"] == pytest.approx(inv, rel=1e-5)
    assert terms["variance"] == pytest.approx(var, rel=1e-5)
    assert terms["covariance"] == pytest.approx(cov, rel=1e-5)
    assert float(loss) == pytest.approx(25 * inv + 15 * var + 2 * cov, rel=1e-5)


def test_vicreg_variance_term_vanishes_for_spread_embeddings_and_not_for_collapsed():
    rng = np.random.default_rng(3)
    spread = torch.tensor(rng.standard_normal((64, 8)) * 5)
    collapsed = torch.zeros(64, 8, dtype=torch.float64)
    _, t_spread = vicreg_loss(spread, spread)
    _, t_collapsed = vicreg_loss(collapsed, collapsed)
    assert t_spread["variance"] == 0.0
    # relu(1 − sqrt(0 + eps)) per dimension, averaged over the two branches
    assert t_collapsed["variance"] == pytest.approx(1 - np.sqrt(1e-4), rel=1e-6)


def test_byol_loss_is_the_squared_distance_of_normalised_vectors():
    rng = np.random.default_rng(4)
    p1, p2, t1, t2 = (rng.standard_normal((5, 6)) for _ in range(4))

    def unit(x):
        return x / np.linalg.norm(x, axis=1, keepdims=True)

    expected = np.mean(
        np.sum((unit(p1) - unit(t2)) ** 2, axis=1) + np.sum((unit(p2) - unit(t1)) ** 2, axis=1)
    )
    got = byol_loss(*(torch.tensor(x) for x in (p1, p2, t1, t2)))
    assert float(got) == pytest.approx(expected, rel=1e-6)


def test_byol_loss_sends_no_gradient_to_the_target():
    t = torch.randn(4, 3, requires_grad=True)
    p = torch.randn(4, 3, requires_grad=True)
    byol_loss(p, p, t, t).backward()
    assert t.grad is None and p.grad is not None


def test_ema_update_is_a_convex_combination_and_copies_buffers():
    torch.manual_seed(0)
    online, target = nn.BatchNorm1d(3), nn.BatchNorm1d(3)
    with torch.no_grad():
        online.weight.copy_(torch.tensor([1.0, 2.0, 3.0]))
        target.weight.copy_(torch.tensor([-1.0, 0.0, 5.0]))
        online.running_mean.copy_(torch.tensor([7.0, 8.0, 9.0]))
    ema_update(target, online, decay=0.9)
    assert torch.allclose(target.weight, torch.tensor([0.9 * -1 + 0.1 * 1, 0.2, 0.9 * 5 + 0.3]))
    assert torch.equal(target.running_mean, online.running_mean)
    # decay 1 keeps the target, decay 0 copies the online network
    before = target.weight.clone()
    ema_update(target, online, decay=1.0)
    assert torch.equal(target.weight, before)
    ema_update(target, online, decay=0.0)
    assert torch.equal(target.weight, online.weight)
