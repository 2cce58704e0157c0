"""A user's own SSL code on digits, as the integration tests (and the README) use it.

Nothing here is zoorank's: a plain PyTorch SimCLR loop ``train(config, report)`` and a Lightning
SimCLR module, both with their own batch augmentations in torch. ``negatives: False`` drops
SimCLR's negatives (the loss is only the positive pairs' cosine, no stop-gradient): the trivial
constant solution then minimises it, the collapse SimSiam documents (Chen & He 2021, Sec. 4.1).
The backbone is ``zoorank.tune.models:small_cnn`` so exported checkpoints rebuild anywhere.
"""

from __future__ import annotations

import numpy as np
import torch
import torch.nn.functional as F
from torch import nn

from zoorank.tune.models import mlp, small_cnn

MEAN = (0.485, 0.456, 0.406)
STD = (0.229, 0.224, 0.225)
BACKBONE = {"source": "python", "name": "zoorank.tune.models:small_cnn",
            "model_kwargs": {"width": 16, "depth": 2}}


def digits_uint8(limit: int = 600) -> torch.Tensor:
    """(N, 3, 8, 8) uint8 digits (grey repeated on RGB), the probe set's images."""
    from sklearn.datasets import load_digits

    images = np.clip(np.rint(load_digits().images[:limit] * 255.0 / 16.0), 0, 255)
    x = torch.from_numpy(images.astype(np.uint8))
    return x[:, None].repeat(1, 3, 1, 1)


def augment(x: torch.Tensor, generator: torch.Generator) -> torch.Tensor:
    """Random shifts (pad 1 + crop), flips and brightness on a uint8 batch → normalised floats."""
    n = x.shape[0]
    xf = x.float() / 255.0
    padded = F.pad(xf, (1, 1, 1, 1))
    dx, dy = torch.randint(0, 3, (2,), generator=generator).tolist()
    xf = padded[:, :, dy:dy + 8, dx:dx + 8]
    flip = torch.rand(n, generator=generator) < 0.5
    xf = torch.where(flip[:, None, None, None], xf.flip(3), xf)
    xf = xf * (0.6 + 0.8 * torch.rand(n, 1, 1, 1, generator=generator))
    mean = torch.tensor(MEAN).view(1, 3, 1, 1)
    std = torch.tensor(STD).view(1, 3, 1, 1)
    return (xf.clamp(0, 1) - mean) / std


def simclr_loss(z1: torch.Tensor, z2: torch.Tensor, temperature: float, negatives: bool):
    if not negatives:
        return F.mse_loss(z1, z2)
    z = F.normalize(torch.cat([z1, z2]), dim=1)
    n = z1.shape[0]
    logits = (z @ z.T / temperature).masked_fill(torch.eye(2 * n, dtype=torch.bool), float("-inf"))
    targets = torch.cat([torch.arange(n, 2 * n), torch.arange(0, n)])
    return F.cross_entropy(logits, targets)


class SimCLR(nn.Module):
    def __init__(self, width: int = 16, depth: int = 2) -> None:
        super().__init__()
        torch.manual_seed(0)
        self.backbone = small_cnn(width=width, depth=depth)
        self.projector = mlp(self.backbone.num_features, 64, 32)

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        return self.projector(self.backbone(x))


def train(config: dict, report) -> None:
    """A plain PyTorch loop: SimCLR on digits, ``report(backbone)`` after every epoch."""
    torch.set_num_threads(1)
    data = digits_uint8(config.get("limit", 600))
    net = SimCLR()
    opt = torch.optim.SGD(net.parameters(), lr=config["lr"], momentum=0.9,
                          weight_decay=config.get("weight_decay", 5e-4))
    generator = torch.Generator().manual_seed(config.get("seed", 0))
    batch = config.get("batch_size", 128)
    for epoch in range(config["epochs"]):
        net.train()
        order = torch.randperm(len(data), generator=generator)
        total = 0.0
        for i in range(0, len(data) - batch + 1, batch):
            x = data[order[i:i + batch]]
            loss = simclr_loss(net(augment(x, generator)), net(augment(x, generator)),
                               config.get("temperature", 0.2), config["negatives"])
            opt.zero_grad()
            loss.backward()
            opt.step()
            total += float(loss.detach())
        report(net.backbone, epoch=epoch + 1, train_loss=total)


def lightning_module(config: dict):
    """The same SimCLR as a LightningModule (``backbone`` attribute, as Lightning users write)."""
    import lightning as L

    class LitSimCLR(L.LightningModule):
        def __init__(self) -> None:
            super().__init__()
            net = SimCLR()
            self.backbone, self.projector = net.backbone, net.projector
            self.generator = torch.Generator().manual_seed(config.get("seed", 0))

        def training_step(self, batch, batch_idx):
            (x,) = batch
            z1 = self.projector(self.backbone(augment(x, self.generator)))
            z2 = self.projector(self.backbone(augment(x, self.generator)))
            loss = simclr_loss(z1, z2, config.get("temperature", 0.2), config["negatives"])
            self.log("train_loss", loss, on_epoch=True, on_step=False)
            return loss

        def configure_optimizers(self):
            return torch.optim.SGD(self.parameters(), lr=config["lr"], momentum=0.9,
                                   weight_decay=config.get("weight_decay", 5e-4))

    return LitSimCLR()


def digits_loader(config: dict):
    from torch.utils.data import DataLoader, TensorDataset

    data = digits_uint8(config.get("limit", 600))
    return DataLoader(TensorDataset(data), batch_size=config.get("batch_size", 128), shuffle=True,
                      drop_last=True, generator=torch.Generator().manual_seed(0))


def train_lightning(config: dict, probe) -> None:
    """A Tune function trainable: the Lightning module fitted with zoorank's probe callback."""
    import lightning as L

    from zoorank.integrations.lightning import ProbeCallback

    torch.set_num_threads(1)
    module = lightning_module(config)
    trainer = L.Trainer(max_epochs=config["epochs"], logger=False, enable_progress_bar=False,
                        enable_model_summary=False, enable_checkpointing=False,
                        accelerator="cpu", devices=1,
                        callbacks=[ProbeCallback(probe, metrics=["rankme", "lidar"])])
    trainer.fit(module, digits_loader(config))
