"""Backbones, projectors and predictors of the reference SSL trainers.

The backbone factories here are what exported trials name in their zoo entries
(``source: python``, ``name: "zoorank.tune.models:<factory>"``, ``model_kwargs``), so the embed
stage rebuilds exactly the module a trial trained: a factory takes only JSON-able keyword
arguments, returns an ``nn.Module`` mapping a normalised NCHW float batch to pooled features
``(batch, d)``, and exposes ``num_features = d``. Weights are never downloaded
(timm ``pretrained=False``).
"""

from __future__ import annotations

from typing import Any

import torch
from torch import nn

__all__ = ["SmallCNN", "build_backbone", "mlp", "small_cnn", "timm_backbone"]


class SmallCNN(nn.Module):
    """A plain conv net for 8×8 to 32×32 images: ``depth`` stages of 3×3 conv–BN–ReLU.

    Stage 0 keeps the resolution with ``width`` channels; every later stage halves it and doubles
    the channels; global average pooling gives ``num_features = width · 2^(depth−1)``.
    """

    def __init__(self, width: int = 32, depth: int = 3, in_chans: int = 3):
        super().__init__()
        if width < 1 or depth < 1:
            raise ValueError(f"small_cnn needs width >= 1 and depth >= 1, got {width}, {depth}")
        layers: list[nn.Module] = []
        channels = in_chans
        for stage in range(depth):
            out = width * 2**stage
            stride = 1 if stage == 0 else 2
            layers += [
                nn.Conv2d(channels, out, 3, stride=stride, padding=1, bias=False),
                nn.BatchNorm2d(out),
                nn.ReLU(inplace=True),
            ]
            channels = out
        self.features = nn.Sequential(*layers)
        self.pool = nn.AdaptiveAvgPool2d(1)
        self.num_features = channels

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        return torch.flatten(self.pool(self.features(x)), 1)


def small_cnn(width: int = 32, depth: int = 3, in_chans: int = 3) -> SmallCNN:
    """Factory of :class:`SmallCNN` (zoo entries: ``zoorank.tune.models:small_cnn``)."""
    return SmallCNN(width=width, depth=depth, in_chans=in_chans)


def timm_backbone(name: str, small_stem: bool = True, **kwargs: Any) -> nn.Module:
    """A timm architecture without its classifier (``num_classes=0``), randomly initialised.

    ``small_stem`` gives ResNet-style nets the CIFAR stem (SimCLR appendix B.9): a 3×3 stride-1
    first convolution and no max-pool, so 32-px inputs keep their resolution. Architectures
    without a ``conv1``/``maxpool`` stem are left as timm builds them.
    """
    import timm

    model = timm.create_model(name, pretrained=False, num_classes=0, **kwargs)
    conv1 = getattr(model, "conv1", None)
    if small_stem and isinstance(conv1, nn.Conv2d) and hasattr(model, "maxpool"):
        model.conv1 = nn.Conv2d(conv1.in_channels, conv1.out_channels, 3, 1, 1, bias=False)
        model.maxpool = nn.Identity()
    return model


#: factory names (``zoorank.tune.models:<factory>``) of the backbones a tune config can name.
FACTORIES = {"small_cnn": small_cnn, "timm_backbone": timm_backbone}


def build_backbone(factory: str, model_kwargs: dict[str, Any]) -> nn.Module:
    """The backbone of a trial, exactly as the embed stage rebuilds it from the zoo entry."""
    model = FACTORIES[factory](**model_kwargs)
    if not hasattr(model, "num_features"):
        raise TypeError(f"backbone {factory}({model_kwargs}) has no 'num_features'")
    return model


def mlp(
    in_dim: int, hidden: int, out_dim: int, layers: int = 2, last_bn: bool = False
) -> nn.Sequential:
    """Projector / predictor head: (Linear–BN–ReLU) × (layers − 1), then Linear (+ BN)."""
    if layers < 1:
        raise ValueError(f"an MLP head needs at least one layer, got {layers}")
    mods: list[nn.Module] = []
    dim = in_dim
    for _ in range(layers - 1):
        mods += [nn.Linear(dim, hidden), nn.BatchNorm1d(hidden), nn.ReLU(inplace=True)]
        dim = hidden
    mods.append(nn.Linear(dim, out_dim))
    if last_bn:
        mods.append(nn.BatchNorm1d(out_dim, affine=False))
    return nn.Sequential(*mods)
