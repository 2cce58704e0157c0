"""Python-factory models for the zoo tests (``source: python``, ``name: zoo_factories:...``).

``tests/`` is on ``sys.path`` under pytest (rootdir conftest), so the module is ``zoo_factories``.
"""

from __future__ import annotations

import os
import signal
from dataclasses import dataclass

from torch import nn


def small_cnn(width: int = 8, dim: int = 16) -> nn.Module:
    """A tiny conv net: (B, 3, H, W) → (B, dim) via global average pooling."""
    return nn.Sequential(
        nn.Conv2d(3, width, 3, padding=1),
        nn.BatchNorm2d(width),
        nn.ReLU(),
        nn.Conv2d(width, width, 3, stride=2, padding=1),
        nn.ReLU(),
        nn.AdaptiveAvgPool2d(1),
        nn.Flatten(),
        nn.Linear(width, dim),
    )


def small_cnn_map(width: int = 8) -> nn.Module:
    """A conv net whose output is a 4-D feature map (the zoo pools it)."""
    return nn.Sequential(nn.Conv2d(3, width, 3, padding=1), nn.ReLU())


@dataclass
class TrainingArgs:
    """A non-tensor object a training script might pickle beside its weights."""

    lr: float = 0.3
    seed: int = 0


def pixels() -> nn.Module:
    """The normalized input itself, flattened (C, H, W order): shows exactly what a model is fed."""
    return nn.Flatten()


class _KillsItsWorker(nn.Module):
    def __init__(self, marker: str) -> None:
        super().__init__()
        self.marker = marker
        self.net = small_cnn()

    def forward(self, x):
        if os.path.exists(self.marker):
            os.kill(os.getpid(), signal.SIGKILL)  # what an OOM kill or a segfault does to a worker
        return self.net(x)


def kills_its_worker(marker: str) -> nn.Module:
    """A small conv net whose forward SIGKILLs the process it runs in (a Ray worker) while the
    file ``marker`` exists."""
    return _KillsItsWorker(marker)


class _SignalsItsNode(nn.Module):
    def __init__(self, where: str, seconds: float) -> None:
        super().__init__()
        self.where, self.seconds = where, seconds
        self.net = small_cnn()

    def forward(self, x):
        import time

        import ray

        node = ray.get_runtime_context().get_node_id()
        with open(os.path.join(self.where, node), "w") as f:
            f.write(str(os.getpid()))
        time.sleep(self.seconds)
        return self.net(x)


def signals_its_node(where: str, seconds: float = 1.0) -> nn.Module:
    """A small conv net whose forward writes a file named after its Ray node into ``where`` and
    then sleeps ``seconds`` (a test removes that node while it embeds)."""
    return _SignalsItsNode(where, seconds)
