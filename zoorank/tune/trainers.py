"""Reference SSL trainers (SimCLR, VICReg, BYOL) on a small, fully decoded image set.

Conventions:

* The data are decoded once to uint8 HWC arrays (``decode_images``); every optimiser step draws its
  two views per image with the project's recipes (``zoorank.data.views.augment``) from an RNG seeded by
  (seed, step), and every epoch's order from an RNG seeded by (seed, epoch). Weights are initialised
  after ``torch.manual_seed(seed)``. A trainer is therefore a deterministic function of its
  parameters and step count, and resuming from a checkpoint continues the exact same run.
* Inputs are ``uint8 → float / 255 → (x − mean) / std`` in NCHW, the embed stage's preprocessing,
  so an exported backbone reproduces the trainer's embeddings.
* The learning rate follows a cosine decay over all steps (no warm-up), computed from the step
  count, so it needs no scheduler state.
* On CUDA the forward passes run under autocast (bf16, or fp16 with a grad scaler); losses are
  computed in float32; cuDNN runs deterministic kernels (a few CUDA ops stay non-deterministic, so
  GPU reruns agree closely rather than bit for bit). CPU runs are fp32 and bit-reproducible.
* Augmentation runs on the CPU, one image at a time (PIL), in the trial's process: fine for the
  small reference datasets; a GPU trial on a large dataset is bound by it.
"""

from __future__ import annotations

import copy
import math
import time
from collections.abc import Sequence
from pathlib import Path
from typing import Any

import numpy as np
import torch
from PIL import Image
from torch import nn

from zoorank.tune.config import TrialParams
from zoorank.tune.losses import byol_loss, ema_update, info_nce_loss, vicreg_loss
from zoorank.tune.models import build_backbone, mlp
from zoorank.zoo import Geometry

__all__ = ["SSLTrainer", "decode_images", "preprocess", "resolve_device"]

BACKBONE_FILE = "backbone.safetensors"
STATE_FILE = "trainer_state.pt"


def decode_images(sources: Sequence[Any]) -> list[np.ndarray]:
    """Encoded sources of a ``SampleIndex``'s ``images`` → RGB uint8 HWC arrays (native sizes)."""
    from zoorank.data.images import decode_image

    return [np.asarray(decode_image(s), dtype=np.uint8) for s in sources]


def preprocess(
    batch: np.ndarray | torch.Tensor,
    mean: Sequence[float],
    std: Sequence[float],
    device: torch.device | str = "cpu",
) -> torch.Tensor:
    """uint8 (N, H, W, 3) → normalised float32 (N, 3, H, W) on ``device``."""
    # a copy: arrays from Ray's object store are read-only
    x = torch.tensor(np.asarray(batch)) if isinstance(batch, np.ndarray) else batch
    x = x.to(device)
    x = x.permute(0, 3, 1, 2).float().div_(255.0)
    m = torch.tensor(mean, dtype=torch.float32, device=x.device).view(1, -1, 1, 1)
    s = torch.tensor(std, dtype=torch.float32, device=x.device).view(1, -1, 1, 1)
    return (x - m) / s


def resolve_device(
    device: str = "auto", precision: str = "auto"
) -> tuple[torch.device, torch.dtype | None]:
    """(device, autocast dtype or None for fp32)."""
    if device == "auto":
        device = "cuda" if torch.cuda.is_available() else "cpu"
    dev = torch.device(device)
    if dev.type != "cuda" or precision == "fp32":
        return dev, None
    if precision == "fp16":
        return dev, torch.float16
    return dev, torch.bfloat16 if torch.cuda.is_bf16_supported() else torch.float16


def _rng(*keys: int) -> np.random.Generator:
    return np.random.default_rng(np.random.SeedSequence([int(k) for k in keys]))


class SSLTrainer:
    """One SSL training run: backbone + projector (+ predictor and EMA target for BYOL).

    Parameters
    ----------
    params : the trial's hyperparameters (method, lr, seed, ...).
    factory, model_kwargs : the backbone (``zoorank.tune.models.build_backbone``).
    images : decoded training images, uint8 HWC.
    geometry, mean, std, recipe : view geometry, normalisation and augmentation recipe.
    epochs : the length of the cosine schedule.
    """

    def __init__(
        self,
        params: TrialParams,
        factory: str,
        model_kwargs: dict[str, Any],
        images: Sequence[np.ndarray],
        geometry: Geometry,
        mean: Sequence[float],
        std: Sequence[float],
        recipe: str,
        epochs: int,
        device: str = "cpu",
        precision: str = "auto",
    ):
        from zoorank.data.views import get_recipe

        self.params = params
        self.images = images
        self.geometry = geometry
        self.mean, self.std = tuple(mean), tuple(std)
        self.recipe = get_recipe(recipe)
        self.device, self.amp_dtype = resolve_device(device, precision)
        n = len(images)
        if n < 2:
            raise ValueError(f"SSL training needs at least 2 images, got {n}")
        self.batch_size = min(params.batch_size, n)
        self.steps_per_epoch = n // self.batch_size
        self.total_steps = epochs * self.steps_per_epoch
        self.step = 0

        if self.device.type == "cuda":
            # cuDNN's autotuner picks kernels by timing: off, for runs repeatable for a seed
            torch.backends.cudnn.benchmark = False
            torch.backends.cudnn.deterministic = True
        torch.manual_seed(params.seed)
        self.backbone = build_backbone(factory, model_kwargs)
        d = self.backbone.num_features
        # VICReg's expander is three layers (Bardes et al.); SimCLR/BYOL projectors two.
        layers = 3 if params.method == "vicreg" else 2
        self.projector = mlp(d, params.proj_hidden, params.proj_dim, layers=layers)
        self.student = nn.ModuleDict({"backbone": self.backbone, "projector": self.projector})
        self.online = nn.ModuleDict({"backbone": self.backbone, "projector": self.projector})
        if params.method == "byol":
            self.online["predictor"] = mlp(params.proj_dim, params.proj_hidden, params.proj_dim)
            self.target = nn.ModuleDict(
                {
                    "backbone": copy.deepcopy(self.backbone),
                    "projector": copy.deepcopy(self.projector),
                }
            )
            self.target.requires_grad_(False)
        else:
            self.target = None
        self.online.to(self.device)
        if self.target is not None:
            self.target.to(self.device)
        self.optimizer = torch.optim.AdamW(
            self.online.parameters(), lr=params.lr, weight_decay=params.weight_decay
        )
        self.scaler = torch.amp.GradScaler(
            "cuda", enabled=self.amp_dtype == torch.float16 and self.device.type == "cuda"
        )

    # -- data --------------------------------------------------------------------------------------
    @property
    def epoch(self) -> float:
        return self.step / self.steps_per_epoch

    def batch_positions(self, step: int) -> np.ndarray:
        """Positions of the images of optimiser step ``step`` (a seeded permutation per epoch)."""
        epoch, within = divmod(step, self.steps_per_epoch)
        order = _rng(self.params.seed, 0, epoch).permutation(len(self.images))
        return order[within * self.batch_size : (within + 1) * self.batch_size]

    def views(self, step: int) -> tuple[np.ndarray, np.ndarray]:
        """The two augmented views (uint8 N×H×W×3 each) of the batch of ``step``."""
        rng = _rng(self.params.seed, 1, step)
        first, second = [], []
        for pos in self.batch_positions(step):
            img = Image.fromarray(self.images[pos])
            first.append(self.recipe(img, self.geometry, rng))
            second.append(self.recipe(img, self.geometry, rng))
        return np.stack(first), np.stack(second)

    def _input(self, batch: np.ndarray) -> torch.Tensor:
        return preprocess(batch, self.mean, self.std, self.device)

    # -- training ----------------------------------------------------------------------------------
    def lr_at(self, step: int) -> float:
        progress = min(step, self.total_steps) / max(self.total_steps, 1)
        return self.params.lr * 0.5 * (1 + math.cos(math.pi * progress))

    def loss(self, x1: torch.Tensor, x2: torch.Tensor) -> tuple[torch.Tensor, dict[str, float]]:
        """The method's loss on two batches of views (training mode)."""
        p = self.params
        with torch.autocast(
            self.device.type,
            dtype=self.amp_dtype or torch.float32,
            enabled=self.amp_dtype is not None,
        ):
            z1 = self.projector(self.backbone(x1))
            z2 = self.projector(self.backbone(x2))
            if p.method == "simclr":
                return info_nce_loss(z1, z2, p.temperature), {}
            if p.method == "vicreg":
                return vicreg_loss(z1, z2, p.inv_weight, p.var_weight, p.cov_weight)
            predictor = self.online["predictor"]
            q1, q2 = predictor(z1), predictor(z2)
            with torch.no_grad():
                t1 = self.target["projector"](self.target["backbone"](x1))
                t2 = self.target["projector"](self.target["backbone"](x2))
            return byol_loss(q1, q2, t1, t2), {}

    def train_step(self) -> float:
        """One optimiser step; returns the loss (NaN or Inf when training diverged)."""
        self.online.train()
        if self.target is not None:
            self.target.train()
        v1, v2 = self.views(self.step)
        x1, x2 = self._input(v1), self._input(v2)
        for group in self.optimizer.param_groups:
            group["lr"] = self.lr_at(self.step)
        loss, _ = self.loss(x1, x2)
        self.optimizer.zero_grad(set_to_none=True)
        self.scaler.scale(loss).backward()
        self.scaler.step(self.optimizer)
        self.scaler.update()
        if self.target is not None:
            ema_update(self.target, self.student, self.params.ema)
        self.step += 1
        return float(loss.detach())

    def train_steps(self, k: int) -> dict[str, float]:
        """``k`` steps (fewer at the end of the schedule): mean loss, seconds, steps done."""
        t0 = time.perf_counter()
        losses = []
        for _ in range(min(k, self.total_steps - self.step)):
            losses.append(self.train_step())
            if not math.isfinite(losses[-1]):
                break
        return {
            "train_loss": float(np.mean(losses)) if losses else float("nan"),
            "train_seconds": time.perf_counter() - t0,
            "steps": len(losses),
        }

    # -- embedding ---------------------------------------------------------------------------------
    @torch.inference_mode()
    def embed(
        self, images: np.ndarray, batch_size: int = 512, projector: bool = False
    ) -> tuple[np.ndarray, np.ndarray | None]:
        """Eval-mode features of uint8 (N, H, W, 3) images: (representation, projector output)."""
        self.online.eval()
        reps, projs = [], []
        for start in range(0, len(images), batch_size):
            x = self._input(images[start : start + batch_size])
            with torch.autocast(
                self.device.type,
                dtype=self.amp_dtype or torch.float32,
                enabled=self.amp_dtype is not None,
            ):
                h = self.backbone(x)
                z = self.projector(h) if projector else None
            reps.append(h.float().cpu().numpy())
            if z is not None:
                projs.append(z.float().cpu().numpy())
        rep = np.concatenate(reps)
        return rep, (np.concatenate(projs) if projector else None)

    # -- checkpoints -------------------------------------------------------------------------------
    def save_backbone(self, path: str | Path) -> None:
        """The backbone's state dict as safetensors (what the zoo entry loads)."""
        from safetensors.torch import save_file

        state = {k: v.detach().cpu().contiguous() for k, v in self.backbone.state_dict().items()}
        save_file(state, str(path))

    def save(self, directory: str | Path) -> None:
        """Backbone safetensors + the full training state (for resuming) into ``directory``."""
        directory = Path(directory)
        directory.mkdir(parents=True, exist_ok=True)
        self.save_backbone(directory / BACKBONE_FILE)
        state = {
            "step": self.step,
            "online": self.online.state_dict(),
            "optimizer": self.optimizer.state_dict(),
            "scaler": self.scaler.state_dict(),
        }
        if self.target is not None:
            state["target"] = self.target.state_dict()
        torch.save(state, directory / STATE_FILE)

    def load(self, directory: str | Path) -> None:
        """Continue from a directory written by :meth:`save`."""
        state = torch.load(
            Path(directory) / STATE_FILE, map_location=self.device, weights_only=True
        )
        self.online.load_state_dict(state["online"])
        self.optimizer.load_state_dict(state["optimizer"])
        if state.get("scaler"):
            self.scaler.load_state_dict(state["scaler"])
        if self.target is not None:
            self.target.load_state_dict(state["target"])
        self.step = int(state["step"])
