"""Model code for the third-party CIFAR-10 checkpoints in ``../shared/zoos/uva_cifar10`` (UvA deep
learning course, tutorials 5 and 9; see that folder's README): what a user brings as their own
``source: python`` model. Written from the README's facts and the checkpoints' key shapes
(``zoorank inspect FILE``); loading is strict.

* ``resnet`` / ``resnet_preact``: tutorial 5's ResNet (c_hidden [16, 32, 64], 3 × 3 blocks, ReLU);
  features = the pooled 64-d output before the final linear layer (kept so loading is strict).
* ``googlenet``: tutorial 5's GoogleNet (3×3 stem to 64 channels, 8 inception blocks in 3 stages
  at 32, 16 and 8 px); features = the pooled 128-d output before the final linear layer.
* ``densenet``: tutorial 5's DenseNet (num_layers [6, 6, 6, 6], bn_size 2, growth_rate 16, ReLU;
  transitions halve the channels and the resolution); features = the 184-d output of the final
  BatchNorm + ReLU, pooled, before the final linear layer.
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


def _conv_bn(c_in: int, c_out: int, kernel: int) -> list[nn.Module]:
    return [nn.Conv2d(c_in, c_out, kernel, padding=kernel // 2), nn.BatchNorm2d(c_out), nn.ReLU()]


class _InceptionBlock(nn.Module):
    """Four branches concatenated on channels: 1×1; 1×1 → 3×3; 1×1 → 5×5; 3×3 max-pool → 1×1."""

    def __init__(self, c_in: int, red3: int, red5: int, out1: int, out3: int, out5: int,
                 out_max: int):
        super().__init__()
        self.conv_1x1 = nn.Sequential(*_conv_bn(c_in, out1, 1))
        self.conv_3x3 = nn.Sequential(*_conv_bn(c_in, red3, 1), *_conv_bn(red3, out3, 3))
        self.conv_5x5 = nn.Sequential(*_conv_bn(c_in, red5, 1), *_conv_bn(red5, out5, 5))
        self.max_pool = nn.Sequential(nn.MaxPool2d(3, stride=1, padding=1),
                                      *_conv_bn(c_in, out_max, 1))

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        return torch.cat([self.conv_1x1(x), self.conv_3x3(x), self.conv_5x5(x), self.max_pool(x)],
                         dim=1)


#: (c_in, reduce 3×3, reduce 5×5, out 1×1, out 3×3, out 5×5, out max) per inception block; None =
#: a 3×3 stride-2 max-pool between stages (the checkpoint's block indices 2 and 7 hold no weights)
_GOOGLENET_BLOCKS: tuple[tuple[int, ...] | None, ...] = (
    (64, 32, 16, 16, 32, 8, 8), (64, 32, 16, 24, 48, 12, 12), None,
    (96, 32, 16, 24, 48, 12, 12), (96, 32, 16, 16, 48, 16, 16), (96, 32, 16, 16, 48, 16, 16),
    (96, 32, 16, 32, 48, 24, 24), None,
    (128, 48, 16, 32, 64, 16, 16), (128, 48, 16, 32, 64, 16, 16))


class _GoogleNet(nn.Module):
    def __init__(self, num_classes: int = 10):
        super().__init__()
        self.input_net = nn.Sequential(*_conv_bn(3, 64, 3))
        self.inception_blocks = nn.Sequential(*(
            nn.MaxPool2d(3, stride=2, padding=1) if b is None else _InceptionBlock(*b)
            for b in _GOOGLENET_BLOCKS))
        self.output_net = nn.Sequential(nn.AdaptiveAvgPool2d((1, 1)), nn.Flatten(),
                                        nn.Linear(128, num_classes))

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        return self.output_net[:2](self.inception_blocks(self.input_net(x)))  # features


def googlenet() -> nn.Module:
    return _GoogleNet()


class _DenseLayer(nn.Module):
    """BN-ReLU-1×1 conv to bn_size·growth, BN-ReLU-3×3 conv to growth; output = [new, input]."""

    def __init__(self, c_in: int, bn_size: int, growth: int):
        super().__init__()
        self.net = nn.Sequential(
            nn.BatchNorm2d(c_in), nn.ReLU(), nn.Conv2d(c_in, bn_size * growth, 1, bias=False),
            nn.BatchNorm2d(bn_size * growth), nn.ReLU(),
            nn.Conv2d(bn_size * growth, growth, 3, padding=1, bias=False))

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        return torch.cat([self.net(x), x], dim=1)


class _DenseBlock(nn.Module):
    def __init__(self, c_in: int, num_layers: int, bn_size: int, growth: int):
        super().__init__()
        self.block = nn.Sequential(*(_DenseLayer(c_in + i * growth, bn_size, growth)
                                     for i in range(num_layers)))

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        return self.block(x)


class _TransitionLayer(nn.Module):
    def __init__(self, c_in: int, c_out: int):
        super().__init__()
        self.transition = nn.Sequential(nn.BatchNorm2d(c_in), nn.ReLU(),
                                        nn.Conv2d(c_in, c_out, 1, bias=False),
                                        nn.AvgPool2d(2, stride=2))

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        return self.transition(x)


class _DenseNet(nn.Module):
    def __init__(self, num_layers=(6, 6, 6, 6), bn_size: int = 2, growth: int = 16,
                 num_classes: int = 10):
        super().__init__()
        c = bn_size * growth
        self.input_net = nn.Sequential(nn.Conv2d(3, c, 3, padding=1))
        blocks: list[nn.Module] = []
        for i, n in enumerate(num_layers):
            blocks.append(_DenseBlock(c, n, bn_size, growth))
            c += n * growth
            if i < len(num_layers) - 1:
                blocks.append(_TransitionLayer(c, c // 2))
                c //= 2
        self.blocks = nn.Sequential(*blocks)
        self.output_net = nn.Sequential(nn.BatchNorm2d(c), nn.ReLU(), nn.AdaptiveAvgPool2d((1, 1)),
                                        nn.Flatten(), nn.Linear(c, num_classes))

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        return self.output_net[:4](self.blocks(self.input_net(x)))  # features, not logits


def densenet() -> nn.Module:
    return _DenseNet()


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
