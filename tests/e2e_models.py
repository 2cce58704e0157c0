"""A zoo whose ordering is known by construction, for the end-to-end test.

One small CNN architecture in four states, plus a pixel baseline, each saved as a TorchScript file
(self-contained: Ray workers load it without importing test code):

* ``random``: the CNN at a seeded random initialisation;
* ``trained``: the same CNN after a few epochs of supervised cross-entropy on digits, seen through
  the exact clean view the EMBED stage makes (``zoorank.data.views.clean_view``, ImageNet normalisation);
* ``collapsed``: the same CNN whose last layer has zero weights and a constant bias, so every image
  maps to one vector;
* ``pixels``: a seeded random Gaussian projection of the normalised pixels;
* ``rot-<i>``: ``trained`` followed by a random orthogonal map R_i (a seed ensemble whose members
  agree up to rotation: cosine neighbourhoods are identical, so NC = 1 for every point).
"""

from __future__ import annotations

from pathlib import Path

import numpy as np
import torch
from torch import nn

INPUT_SIZE = 16
DIM = 32
MEAN = (0.485, 0.456, 0.406)
STD = (0.229, 0.224, 0.225)


class SmallCNN(nn.Module):
    """(B, 3, 16, 16) → (B, DIM): two conv blocks, global average pooling, a linear layer."""

    def __init__(self, width: int = 16, dim: int = DIM):
        super().__init__()
        self.features = nn.Sequential(
            nn.Conv2d(3, width, 3, padding=1), nn.ReLU(),
            nn.Conv2d(width, 2 * width, 3, stride=2, padding=1), nn.ReLU(),
            nn.AdaptiveAvgPool2d(1), nn.Flatten(),
        )
        self.proj = nn.Linear(2 * width, dim)

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        return self.proj(self.features(x))


class PixelProjection(nn.Module):
    def __init__(self, dim: int = DIM, seed: int = 0):
        super().__init__()
        gen = torch.Generator().manual_seed(seed)
        d_in = 3 * INPUT_SIZE * INPUT_SIZE
        self.register_buffer("P", torch.randn(d_in, dim, generator=gen) / d_in**0.5)

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        return x.flatten(1) @ self.P


class Rotated(nn.Module):
    def __init__(self, base: nn.Module, R: torch.Tensor):
        super().__init__()
        self.base = base
        self.register_buffer("R", R)

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        return self.base(x) @ self.R.T


def digits_inputs() -> tuple[torch.Tensor, torch.Tensor]:
    """All 1797 digits as the EMBED stage's clean view (16 px, bilinear, no crop), normalised."""
    from sklearn.datasets import load_digits

    from zoorank.data.images import decode_image
    from zoorank.data.views import clean_view
    from zoorank.zoo import Geometry

    d = load_digits()
    geometry = Geometry(input_size=INPUT_SIZE, interpolation="bilinear", crop_pct=1.0)
    images = np.rint(d.images * (255.0 / 16.0)).astype(np.uint8)
    views = np.stack([clean_view(decode_image(img), geometry) for img in images])
    x = torch.from_numpy(views).permute(0, 3, 1, 2).float() / 255.0
    x = (x - torch.tensor(MEAN).view(1, 3, 1, 1)) / torch.tensor(STD).view(1, 3, 1, 1)
    return x, torch.from_numpy(d.target).long()


def train(model: SmallCNN, epochs: int = 8, seed: int = 0) -> SmallCNN:
    """A few epochs of supervised cross-entropy on digits through a linear head (seconds on CPU)."""
    torch.manual_seed(seed)
    x, y = digits_inputs()
    head = nn.Linear(DIM, 10)
    params = list(model.parameters()) + list(head.parameters())
    opt = torch.optim.Adam(params, lr=3e-3)
    for _ in range(epochs):
        for idx in torch.randperm(len(x)).split(64):
            opt.zero_grad()
            loss = nn.functional.cross_entropy(head(model(x[idx])), y[idx])
            loss.backward()
            opt.step()
    return model.eval()


def _save(model: nn.Module, path: Path) -> str:
    model = model.eval()
    with torch.no_grad():
        traced = torch.jit.trace(model, torch.zeros(2, 3, INPUT_SIZE, INPUT_SIZE))
    torch.jit.save(traced, str(path))
    return str(path)


def build_zoo(directory: Path, n_rotated: int = 2) -> dict[str, str]:
    """Write the zoo's TorchScript files; returns model id → file."""
    directory.mkdir(parents=True, exist_ok=True)
    torch.manual_seed(0)
    random = SmallCNN().eval()
    torch.manual_seed(0)
    trained = train(SmallCNN())
    torch.manual_seed(0)
    collapsed = SmallCNN().eval()
    with torch.no_grad():
        collapsed.proj.weight.zero_()
        collapsed.proj.bias.copy_(torch.linspace(-1, 1, DIM))
    files = {
        "random": _save(random, directory / "random.pt"),
        "trained": _save(trained, directory / "trained.pt"),
        "collapsed": _save(collapsed, directory / "collapsed.pt"),
        "pixels": _save(PixelProjection(), directory / "pixels.pt"),
    }
    gen = torch.Generator().manual_seed(1)
    for i in range(n_rotated):
        q, r = torch.linalg.qr(torch.randn(DIM, DIM, generator=gen))
        R = q * torch.sign(torch.diagonal(r))
        files[f"rot-{i}"] = _save(Rotated(trained, R), directory / f"rot-{i}.pt")
    return files
