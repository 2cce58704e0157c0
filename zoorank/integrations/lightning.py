"""A Lightning callback that scores the model being trained on a zoorank probe set.

::

    from zoorank.integrations.lightning import ProbeCallback

    trainer = L.Trainer(max_epochs=20, callbacks=[ProbeCallback(probe, every_n_epochs=2)])

Every ``every_n_epochs`` training epochs (at the epoch's end, on global rank 0) the callback
scores ``module(pl_module)`` — by default ``pl_module.backbone`` when the LightningModule has one,
else the LightningModule itself — with :func:`zoorank.probe.evaluate`, then:

* logs ``<prefix><metric>`` and ``<prefix>flag_<flag>`` to every logger of the trainer (step: the
  global step) and puts them in ``trainer.callback_metrics`` (so ``ModelCheckpoint`` and
  ``EarlyStopping`` can monitor them);
* inside a Ray Tune trial, reports the metrics (unprefixed, with ``epoch``; NaN as the metric's
  Tune floor) and a checkpoint holding the module's ``backbone.safetensors`` to Tune, so ASHA can
  prune on a label-free metric and :func:`zoorank.integrations.ray_tune.export_zoo` can list the
  checkpoints for ``zoorank run``.
"""

from __future__ import annotations

import math
from collections.abc import Callable, Mapping, Sequence
from typing import Any

import lightning as L
import torch

from zoorank.integrations.ray_tune import FLOORS, in_tune_trial, report_to_tune
from zoorank.probe import ProbeResult, ProbeSet, evaluate

__all__ = ["ProbeCallback"]


def _default_module(pl_module: Any) -> Any:
    backbone = getattr(pl_module, "backbone", None)
    return pl_module if backbone is None else backbone


class ProbeCallback(L.Callback):
    """Score the model on ``probe`` every ``every_n_epochs`` epochs (module docstring).

    ``module``: pl_module → the nn.Module or callable to score. ``metrics``/``options``/
    ``precision``: as :func:`zoorank.probe.evaluate`. ``report_to_tune``: ``"auto"`` (when inside
    a Tune trial), True or False. ``last``: the latest :class:`zoorank.probe.ProbeResult`.
    """

    def __init__(
        self,
        probe: ProbeSet,
        every_n_epochs: int = 1,
        *,
        module: Callable[[Any], Any] | None = None,
        metrics: Sequence[str] | None = None,
        options: Mapping[str, Any] | None = None,
        precision: str | None = None,
        prefix: str = "probe/",
        report_to_tune: bool | str = "auto",
    ) -> None:
        if every_n_epochs < 1:
            raise ValueError(f"every_n_epochs must be >= 1, got {every_n_epochs}")
        self.probe = probe
        self.every_n_epochs = every_n_epochs
        self.module = module or _default_module
        self.metrics = list(metrics) if metrics is not None else None
        self.options = options
        self.precision = precision
        self.prefix = prefix
        self.report_to_tune = report_to_tune
        self.last: ProbeResult | None = None

    def on_train_epoch_end(self, trainer: L.Trainer, pl_module: L.LightningModule) -> None:
        epoch = trainer.current_epoch + 1
        if epoch % self.every_n_epochs and epoch != trainer.max_epochs:
            return
        if not trainer.is_global_zero:
            return
        net = self.module(pl_module)
        result = evaluate(net, self.probe, metrics=self.metrics, options=self.options,
                          precision=self.precision)
        self.last = result
        values = result.as_dict()
        logged = {f"{self.prefix}{k}": v for k, v in values.items()}
        logged[f"{self.prefix}seconds"] = result.seconds["total"]
        for logger in trainer.loggers:
            logger.log_metrics(logged, step=trainer.global_step)
        for key, value in logged.items():
            trainer.callback_metrics[key] = torch.tensor(value)
        tune = in_tune_trial() if self.report_to_tune == "auto" else bool(self.report_to_tune)
        if tune:
            reported = dict(values)
            for name, value in result.metrics.items():
                if math.isnan(value) and name in FLOORS:
                    reported[name] = FLOORS[name]
            reported["epoch"] = float(epoch)
            train_loss = trainer.callback_metrics.get("train_loss")
            if train_loss is not None:
                reported["train_loss"] = float(train_loss)
            report_to_tune(reported, net, {"epoch": epoch, "errors": result.errors})
