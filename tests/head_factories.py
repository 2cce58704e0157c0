"""Python-factory classifiers for the head tests (``source: python``, ``name: head_factories:...``).

``tests/`` is on ``sys.path`` under pytest (rootdir conftest), and Ray workers inherit it.
"""

from __future__ import annotations

import torch
from torch import nn


class HeadedCNN(nn.Module):
    """A tiny classifier following the ``head`` attribute convention: ``forward`` returns the
    logits ``head(backbone(x))``; the features are the head's input."""

    def __init__(self, width: int = 8, classes: int = 10, sequential: bool = False) -> None:
        super().__init__()
        self.backbone = nn.Sequential(
            nn.Conv2d(3, width, 3, padding=1), nn.ReLU(),
            nn.Conv2d(width, width, 3, stride=2, padding=1), nn.ReLU(),
            nn.AdaptiveAvgPool2d(1), nn.Flatten(),
        )
        linear = nn.Linear(width, classes)
        # a Sequential head declares no out_features: its width is known after a forward only
        self.head = nn.Sequential(linear) if sequential else linear

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        return self.head(self.backbone(x))


def headed_cnn(width: int = 8, classes: int = 10, sequential: bool = False) -> nn.Module:
    """Seeded (the zoo seeds every build; this seeds the test's own copy the same way)."""
    return HeadedCNN(width, classes, sequential)


def timm_classifier(name: str = "resnet10t", classes: int = 10) -> nn.Module:
    """A timm classifier returned by a python factory (the ``forward_features``/``forward_head``
    convention)."""
    import timm

    return timm.create_model(name, pretrained=False, num_classes=classes)
