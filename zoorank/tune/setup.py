"""What every trial of a search shares besides its hyperparameters (:class:`SearchSetup`).

Its own module so that ``zoorank.tune.results`` and ``zoorank.tune.search`` both read it without
importing each other (``search`` imports ``results``, never the reverse).
"""

from __future__ import annotations

import math
from dataclasses import dataclass
from typing import Any

import numpy as np

from zoorank.tune.config import ObjectiveSpec, TrialParams
from zoorank.tune.objective import ProbeSet

__all__ = ["SearchSetup"]


@dataclass(frozen=True)
class SearchSetup:
    """Everything a trial needs besides its hyperparameters (shared through the object store)."""

    base: dict[str, Any]
    factory: str
    model_kwargs: dict[str, Any]
    images: list[np.ndarray]
    input_size: int
    interpolation: str
    mean: tuple[float, float, float]
    std: tuple[float, float, float]
    recipe: str
    epochs: int
    probe: ProbeSet
    objective: ObjectiveSpec
    every: int
    every_steps: int | None
    device: str
    precision: str
    num_threads: int

    def params(self, overrides: dict[str, Any] | None) -> TrialParams:
        """One trial's hyperparameters: the config's, with the trial's point of the space."""
        return TrialParams.model_validate({**self.base, **(overrides or {})})

    @property
    def model_entry(self) -> dict[str, Any]:
        """The zoo entry that rebuilds a trial's backbone (``source``/``name``/``model_kwargs``)."""
        return {"source": "python", "name": f"zoorank.tune.models:{self.factory}",
                "model_kwargs": self.model_kwargs}

    @property
    def geometry(self):
        from zoorank.zoo import Geometry

        return Geometry(self.input_size, self.interpolation, 1.0)

    def n_reports(self, batch_size: int) -> int:
        """Reports of a trial with this batch size (ASHA's ``max_t``)."""
        n = len(self.images)
        steps = self.epochs * (n // min(batch_size, n))
        per_report = self.every_steps or self.every * (n // min(batch_size, n))
        return math.ceil(steps / per_report)
