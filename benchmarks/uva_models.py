"""Model code for the third-party CIFAR-10 checkpoints in ``../shared/zoos/uva_cifar10`` (UvA deep
learning course, tutorials 5 and 9; see that folder's README): what a user brings as their own
``source: python`` model. Written from the README's facts and the checkpoints' key shapes
(``zoorank inspect FILE``); loading is strict.

* ``resnet`` / ``resnet_preact``: tutorial 5's ResNet (c_hidden [16, 32, 64], 3 × 3 blocks, ReLU);
  features = the pooled 64-d output before the final linear layer (kept so loading is strict).
* ``autoencoder_encoder(latent_dim)``: tutorial 9's encoder; the latent is the embedding.
"""

from __future__ import annotations

import torch
from torch import nn


class _ResNetBlock(nn.Module):
    def __init__(self, c_in: int, subsample: bool, c_out: int):
        super().__init__()
        self.net = nn.Sequential(
            nn.Conv2d(c_in, c_out, 3, padding=1, stride=2 if subsample else 1, bias=False),
            nn.BatchNorm2d(c_out), nn.ReLU(),
            nn.Conv2d(c_out, c_out, 3, padding=1, bias=False), nn.BatchNorm2d(c_out))
        self.downsample = nn.Conv2d(c_in, c_out, 1, stride=2) if subsample else None
        self.act_fn = nn.ReLU()

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        z = self.net(x)
        return self.act_fn(z + (self.downsample(x) if self.downsample is not None else x))


class _PreActResNetBlock(nn.Module):
    def __init__(self, c_in: int, subsample: bool, c_out: int):
        super().__init__()
        self.net = nn.Sequential(
            nn.BatchNorm2d(c_in), nn.ReLU(),
            nn.Conv2d(c_in, c_out, 3, padding=1, stride=2 if subsample else 1, bias=False),
            nn.BatchNorm2d(c_out), nn.ReLU(),
            nn.Conv2d(c_out, c_out, 3, padding=1, bias=False))
        self.downsample = nn.Sequential(nn.BatchNorm2d(c_in), nn.ReLU(),
                                        nn.Conv2d(c_in, c_out, 1, stride=2, bias=False)) \
            if subsample else None

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        z = self.net(x)
        return z + (self.downsample(x) if self.downsample is not None else x)


class _ResNet(nn.Module):
    def __init__(self, preact: bool, c_hidden=(16, 32, 64), num_blocks=(3, 3, 3),
                 num_classes: int = 10):
        super().__init__()
        if preact:
            self.input_net = nn.Sequential(nn.Conv2d(3, c_hidden[0], 3, padding=1, bias=False))
        else:
            self.input_net = nn.Sequential(nn.Conv2d(3, c_hidden[0], 3, padding=1, bias=False),
                                           nn.BatchNorm2d(c_hidden[0]), nn.ReLU())
        block = _PreActResNetBlock if preact else _ResNetBlock
        blocks = []
        for i, count in enumerate(num_blocks):
            for b in range(count):
                subsample = b == 0 and i > 0
                blocks.append(block(c_hidden[i - 1 if subsample else i], subsample, c_hidden[i]))
        self.blocks = nn.Sequential(*blocks)
        self.output_net = nn.Sequential(nn.AdaptiveAvgPool2d((1, 1)), nn.Flatten(),
                                        nn.Linear(c_hidden[-1], num_classes))

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        return self.output_net[:2](self.blocks(self.input_net(x)))  # features, not logits


def resnet() -> nn.Module:
    return _ResNet(preact=False)


def resnet_preact() -> nn.Module:
    return _ResNet(preact=True)


class _Encoder(nn.Module):
    def __init__(self, latent_dim: int):
        super().__init__()
        self.net = nn.Sequential(
            nn.Conv2d(3, 32, 3, padding=1, stride=2), nn.GELU(),
            nn.Conv2d(32, 32, 3, padding=1), nn.GELU(),
            nn.Conv2d(32, 64, 3, padding=1, stride=2), nn.GELU(),
            nn.Conv2d(64, 64, 3, padding=1), nn.GELU(),
            nn.Conv2d(64, 64, 3, padding=1, stride=2), nn.GELU(),
            nn.Flatten(), nn.Linear(1024, latent_dim))

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        return self.net(x)


def autoencoder_encoder(latent_dim: int) -> nn.Module:
    return _Encoder(latent_dim)
