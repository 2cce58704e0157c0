"""A user's own SimCLR loop on scikit-learn's digits, searched by the Tune benchmark through
``zoorank.integrations.ray_tune.search`` exactly as a user would.

Nothing here is zoorank's but the backbone factory (so exported checkpoints rebuild anywhere)
and the ``report`` it is handed. Each epoch it reports the backbone with the training loss and,
as a user with a labelled validation split would log, the kNN accuracy of the backbone on held
labels (``knn_accuracy``: the truth the benchmark compares with; the label-free objective never
reads it).
"""

from __future__ import annotations

import numpy as np
import torch
import torch.nn.functional as F

from zoorank.tune.models import mlp, small_cnn

MEAN = (0.485, 0.456, 0.406)
STD = (0.229, 0.224, 0.225)
BACKBONE = {"source": "python", "name": "zoorank.tune.models:small_cnn",
            "model_kwargs": {"width": 16, "depth": 2}}


def digits() -> tuple[torch.Tensor, np.ndarray]:
    """(N, 3, 8, 8) uint8 digits (grey repeated on RGB) and their labels."""
    from sklearn.datasets import load_digits

    data = load_digits()
    images = np.clip(np.rint(data.images * 255.0 / 16.0), 0, 255).astype(np.uint8)
    return torch.from_numpy(images)[:, None].repeat(1, 3, 1, 1), data.target


def normalise(x: torch.Tensor) -> torch.Tensor:
    mean = torch.tensor(MEAN).view(1, 3, 1, 1)
    std = torch.tensor(STD).view(1, 3, 1, 1)
    return (x.float() / 255.0 - mean) / std


def augment(x: torch.Tensor, generator: torch.Generator, strength: float) -> torch.Tensor:
    """Random shifts (pad 1 + crop), flips and brightness (± ``strength``) → normalised floats."""
    n = x.shape[0]
    xf = F.pad(x.float() / 255.0, (1, 1, 1, 1))
    dx, dy = torch.randint(0, 3, (2,), generator=generator).tolist()
    xf = xf[:, :, dy:dy + 8, dx:dx + 8]
    flip = torch.rand(n, generator=generator) < 0.5
    xf = torch.where(flip[:, None, None, None], xf.flip(3), xf)
    xf = xf * (1 - strength + 2 * strength * torch.rand(n, 1, 1, 1, generator=generator))
    return normalise(xf.clamp(0, 1) * 255.0)


def info_nce(z1: torch.Tensor, z2: torch.Tensor, temperature: float) -> torch.Tensor:
    z = F.normalize(torch.cat([z1, z2]), dim=1)
    n = z1.shape[0]
    logits = (z @ z.T / temperature).masked_fill(torch.eye(2 * n, dtype=torch.bool), float("-inf"))
    targets = torch.cat([torch.arange(n, 2 * n), torch.arange(0, n)])
    return F.cross_entropy(logits, targets)


def held_knn(backbone: torch.nn.Module, images: torch.Tensor, labels: np.ndarray) -> float:
    """kNN accuracy (k = 20, cosine) of a seeded half of the images against the other half."""
    from zoorank.metrics import knn_accuracy

    backbone.eval()
    with torch.no_grad():
        feats = backbone(normalise(images)).double().numpy()
    backbone.train()
    order = np.random.default_rng(0).permutation(len(labels))
    half = len(order) // 2
    return float(knn_accuracy(feats[order[:half]], labels[order[:half]],
                              feats[order[half:]], labels[order[half:]], k=20))


def train(config: dict, report) -> None:
    """SimCLR on digits with SGD; ``report(backbone, ...)`` after every epoch."""
    torch.set_num_threads(1)
    images, labels = digits()
    torch.manual_seed(config.get("seed", 0))
    backbone = small_cnn(**BACKBONE["model_kwargs"])
    projector = mlp(backbone.num_features, 64, 32)
    params = list(backbone.parameters()) + list(projector.parameters())
    opt = torch.optim.SGD(params, lr=config["lr"], momentum=0.9, weight_decay=5e-4)
    generator = torch.Generator().manual_seed(config.get("seed", 0))
    batch = config.get("batch_size", 128)
    strength = config.get("strength", 0.4)
    for epoch in range(config["epochs"]):
        order = torch.randperm(len(images), generator=generator)
        total, steps = 0.0, 0
        for i in range(0, len(images) - batch + 1, batch):
            x = images[order[i:i + batch]]
            z1 = projector(backbone(augment(x, generator, strength)))
            z2 = projector(backbone(augment(x, generator, strength)))
            loss = info_nce(z1, z2, config["temperature"])
            opt.zero_grad()
            loss.backward()
            opt.step()
            total, steps = total + float(loss.detach()), steps + 1
        report(backbone, epoch=epoch + 1, train_loss=total / max(steps, 1),
               knn_accuracy=held_knn(backbone, images, labels))
