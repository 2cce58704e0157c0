"""Python-factory models for the embed fault tests (``source: python``, ``name: hostile_factories:...``).
"""

from __future__ import annotations

import torch
from torch import nn

#: batch sizes every ``BatchRecorder`` forward saw, in this process.
SEEN_BATCHES: list[int] = []


class BatchRecorder(nn.Module):
    """Mean colour per image (B, 3), recording each forward's batch size in SEEN_BATCHES."""

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        SEEN_BATCHES.append(len(x))
        return x.mean(dim=(2, 3))


class Greedy(nn.Module):
    """A forward that asks the CPU allocator for a petabyte."""

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        return torch.empty(2**48, dtype=torch.float32)[: len(x)].view(len(x), 1)


def batch_recorder() -> nn.Module:
    return BatchRecorder()


def greedy() -> nn.Module:
    return Greedy()
