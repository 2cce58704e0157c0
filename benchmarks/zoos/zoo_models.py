"""Model code of the validation zoos trained here (``build_validation_zoos.py``): what a user brings
as a ``source: python`` model (``name: zoo_models:<factory>``, ``benchmarks/zoos`` on the path).

* :class:`SweepNet` — a supervised classifier of ``depth`` conv-BN-ReLU stages (widths w, 2w, 4w, …,
  a 2 × 2 max-pool after each stage but the last), global average pool, linear head. It follows the
  python-model head convention: ``forward_features`` (the pooled features), ``forward_head`` (the
  logits), ``forward`` = their composition.
* :class:`ConvAutoencoder` — a convolutional autoencoder (encoder: ``depth`` stride-2 conv stages
  then a linear map to ``latent_dim``; decoder: the mirror image). zoorank embeds with the encoder
  alone (:func:`ae_encoder`, loaded with ``state_dict_prefix: encoder.``); the latent is the
  embedding.
"""

from __future__ import annotations

import torch
from torch import nn


def _stage(c_in: int, c_out: int) -> list[nn.Module]:
    return [nn.Conv2d(c_in, c_out, 3, padding=1, bias=False), nn.BatchNorm2d(c_out), nn.ReLU()]


class BodyHead(nn.Module):
    """A classifier as a ``body`` (image → features) and a linear ``head`` (features → logits),
    set by the subclass: the python-model head convention, ``forward`` = their composition."""

    body: nn.Module
    head: nn.Module

    def forward_features(self, x: torch.Tensor) -> torch.Tensor:
        return self.body(x)

    def forward_head(self, features: torch.Tensor) -> torch.Tensor:
        return self.head(features)

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        return self.forward_head(self.forward_features(x))


class SweepNet(BodyHead):
    """A classifier of ``depth`` stages of base width ``width`` (module docstring)."""

    def __init__(self, width: int = 16, depth: int = 2, num_classes: int = 10):
        super().__init__()
        layers: list[nn.Module] = []
        c_in = 3
        for i in range(depth):
            c_out = width * 2 ** i
            layers += _stage(c_in, c_out)
            if i < depth - 1:
                layers.append(nn.MaxPool2d(2))
            c_in = c_out
        self.body = nn.Sequential(*layers, nn.AdaptiveAvgPool2d(1), nn.Flatten())
        self.head = nn.Linear(c_in, num_classes)


class _Encoder(nn.Module):
    def __init__(self, latent_dim: int, width: int, depth: int, size: int):
        super().__init__()
        layers: list[nn.Module] = []
        c_in = 3
        for i in range(depth):
            c_out = width * 2 ** i
            layers += [nn.Conv2d(c_in, c_out, 3, stride=2, padding=1), nn.ReLU()]
            c_in = c_out
        self.net = nn.Sequential(*layers, nn.Flatten())
        self.side = -(-size // 2 ** depth)
        self.channels = c_in
        self.fc = nn.Linear(c_in * self.side ** 2, latent_dim)

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        return self.fc(self.net(x))


class _Decoder(nn.Module):
    def __init__(self, latent_dim: int, width: int, depth: int, size: int, side: int):
        super().__init__()
        self.side, self.size = side, size
        self.channels = width * 2 ** (depth - 1)
        self.fc = nn.Linear(latent_dim, self.channels * side ** 2)
        layers: list[nn.Module] = []
        c_in = self.channels
        for i in reversed(range(depth)):
            c_out = width * 2 ** (i - 1) if i > 0 else 3
            layers.append(nn.ConvTranspose2d(c_in, c_out, 3, stride=2, padding=1, output_padding=1))
            if i > 0:
                layers.append(nn.ReLU())
            c_in = c_out
        self.net = nn.Sequential(*layers)

    def forward(self, z: torch.Tensor) -> torch.Tensor:
        x = self.fc(z).view(-1, self.channels, self.side, self.side)
        return self.net(x)[..., :self.size, :self.size]


class ConvAutoencoder(nn.Module):
    """Encoder and decoder (module docstring); ``forward`` reconstructs its input."""

    def __init__(self, latent_dim: int = 32, width: int = 16, depth: int = 2, size: int = 28):
        super().__init__()
        self.encoder = _Encoder(latent_dim, width, depth, size)
        self.decoder = _Decoder(latent_dim, width, depth, size, self.encoder.side)

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        return self.decoder(self.encoder(x))


def sweep_net(width: int = 16, depth: int = 2, num_classes: int = 10) -> SweepNet:
    """zoorank's factory of :class:`SweepNet` (``name: zoo_models:sweep_net``)."""
    return SweepNet(width, depth, num_classes)


def ae_encoder(latent_dim: int = 32, width: int = 16, depth: int = 2, size: int = 28) -> nn.Module:
    """zoorank's factory of a :class:`ConvAutoencoder`'s encoder (``name: zoo_models:ae_encoder``,
    ``state_dict_prefix: encoder.``)."""
    return _Encoder(latent_dim, width, depth, size)


def _uva_features(self: nn.Module, x: torch.Tensor) -> torch.Tensor:
    return type(self).forward(self, x)  # uva_models' forward: the pooled features


def _uva_logits(self: nn.Module, features: torch.Tensor) -> torch.Tensor:
    return self.output_net[-1](features)  # the checkpoint's own final linear layer


def uva_classifier(arch: str) -> nn.Module:
    """A UvA CIFAR-10 classifier of ``uva_models`` (``resnet``, ``resnet_preact``, ``googlenet``,
    ``densenet``) with the python-model head convention: ``forward_features`` = its pooled features,
    ``forward_head`` = its final linear layer (``output_net``'s last module). The module and its
    state dict are ``uva_models``' own, so the checkpoint loads strictly."""
    import types

    import uva_models

    net = getattr(uva_models, arch)()
    net.forward_features = types.MethodType(_uva_features, net)
    net.forward_head = types.MethodType(_uva_logits, net)
    return net
