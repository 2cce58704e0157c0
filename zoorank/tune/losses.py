"""The SSL objectives of the reference trainers, as plain functions of torch tensors.

* SimCLR (Chen et al. 2020): NT-Xent / InfoNCE over the 2N views of a batch.
* VICReg (Bardes et al. 2022): invariance + variance + covariance, in the official code's
  normalisation (variance hinge averaged over both branches, covariance summed over both).
* BYOL (Grill et al. 2020): symmetric normalised-MSE between the online prediction and the EMA
  target's projection, and the EMA update itself.
"""

from __future__ import annotations

import torch
import torch.nn.functional as F
from torch import nn

__all__ = ["byol_loss", "ema_update", "info_nce_loss", "vicreg_loss"]


def info_nce_loss(z1: torch.Tensor, z2: torch.Tensor, temperature: float) -> torch.Tensor:
    """NT-Xent: mean over the 2N anchors of −log softmax of the positive among the 2N − 1 others.

    Rows of ``z1`` and ``z2`` (N × d) are two views of the same N images; similarities are cosines
    divided by ``temperature``; the anchor itself is excluded from the denominator.
    """
    z = F.normalize(torch.cat([z1, z2]).float(), dim=1)
    n = z1.shape[0]
    logits = z @ z.T / temperature
    logits = logits.masked_fill(torch.eye(2 * n, dtype=torch.bool, device=z.device), float("-inf"))
    targets = torch.cat([torch.arange(n, 2 * n), torch.arange(0, n)]).to(z.device)
    return F.cross_entropy(logits, targets)


def _off_diagonal(m: torch.Tensor) -> torch.Tensor:
    return m.flatten()[:-1].view(m.shape[0] - 1, m.shape[0] + 1)[:, 1:].flatten()


def vicreg_loss(
    z1: torch.Tensor,
    z2: torch.Tensor,
    inv_weight: float = 25.0,
    var_weight: float = 25.0,
    cov_weight: float = 1.0,
    gamma: float = 1.0,
    eps: float = 1e-4,
) -> tuple[torch.Tensor, dict[str, float]]:
    """VICReg loss and its three unweighted terms.

    * invariance: mean squared error between the two views' embeddings;
    * variance: mean over dimensions of relu(γ − sqrt(Var + eps)) (unbiased variance), averaged
      over the two branches;
    * covariance: Σ of squared off-diagonal covariances / d, summed over the two branches.

    Returns ``(λ·inv + μ·var + ν·cov, {"invariance", "variance", "covariance"})``.
    """
    z1, z2 = z1.float(), z2.float()
    n, d = z1.shape
    invariance = F.mse_loss(z1, z2)
    variance = z1.new_zeros(())
    covariance = z1.new_zeros(())
    for z in (z1, z2):
        zc = z - z.mean(dim=0)
        std = torch.sqrt(zc.var(dim=0) + eps)
        variance = variance + torch.mean(F.relu(gamma - std)) / 2
        cov = zc.T @ zc / (n - 1)
        covariance = covariance + _off_diagonal(cov).pow(2).sum() / d
    loss = inv_weight * invariance + var_weight * variance + cov_weight * covariance
    terms = {
        "invariance": float(invariance.detach()),
        "variance": float(variance.detach()),
        "covariance": float(covariance.detach()),
    }
    return loss, terms


def byol_loss(
    p1: torch.Tensor, p2: torch.Tensor, t1: torch.Tensor, t2: torch.Tensor
) -> torch.Tensor:
    """Symmetric BYOL loss: mean of 2 − 2·cos(p1, t2) + 2 − 2·cos(p2, t1) over the batch.

    ``p*`` are online predictions, ``t*`` target projections (gradients are stopped here).
    """

    def term(p: torch.Tensor, t: torch.Tensor) -> torch.Tensor:
        return 2 - 2 * F.cosine_similarity(p.float(), t.detach().float(), dim=-1)

    return (term(p1, t2) + term(p2, t1)).mean()


@torch.no_grad()
def ema_update(target: nn.Module, online: nn.Module, decay: float) -> None:
    """θ_target ← decay·θ_target + (1 − decay)·θ_online for parameters; buffers are copied."""
    for t, o in zip(target.parameters(), online.parameters(), strict=True):
        t.mul_(decay).add_(o.detach(), alpha=1 - decay)
    for t, o in zip(target.buffers(), online.buffers(), strict=True):
        t.copy_(o)
