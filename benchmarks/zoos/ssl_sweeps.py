"""Fixed-budget SSL hyperparameter sweeps: the units of ``build_units.py`` that are trained here.

A sweep is one architecture (``zoorank.tune.models.SmallCNN``), one epoch budget and one method
(SimCLR, VICReg or BYOL, with the losses of ``zoorank.tune.losses``) on one dataset, over 8
settings of learning rate, temperature, weight decay, augmentation strength, projector width or
VICReg's coefficients. Every setting is trained from its own seed in plain torch, one thread.

Conventions:

* Images are uint8 RGB (N, H, W, 3) at the sweep's size (grey sets repeated over three channels),
  scaled to [0, 1] and normalised by ``NORM[dataset]`` (what an exported backbone sees).
* Augmentation is a batched torch recipe of SimCLR's kind at a ``strength`` s in (0, 1.5]: a random
  resized crop of area in [max(0.08, 1 − 0.8·s), 1] and aspect in [3/4, 4/3], a horizontal flip
  (p = 0.5), brightness and contrast jitter of ±0.4·s (p = 0.8), grayscale (p = 0.2·s). It is the
  method's own training augmentation, and so the view distribution of LiDAR's protocol.
* AdamW, a cosine learning-rate decay over all steps after a one-epoch linear warm-up, batch 256;
  every step's views and every epoch's order are seeded by (seed, step) and (seed, epoch).
* A run saves its backbone after the last epoch and after the one before it, with the mean
  training loss of each epoch.
"""

from __future__ import annotations

import copy
import dataclasses
import io
import math
from pathlib import Path
from typing import Any

import numpy as np

HERE = Path(__file__).resolve().parent
SHARED = next((p / "shared" for p in (HERE.parents[2], HERE.parents[3]) if (p / "shared").is_dir()),
              HERE.parents[2] / "shared")
DATA = SHARED / "data"

NORM = {"digits": ((0.5,) * 3, (0.25,) * 3), "fashion": ((0.5,) * 3, (0.25,) * 3),
        "cifar10": ((0.4914, 0.4822, 0.4465), (0.2470, 0.2435, 0.2616))}
#: training images, ranked (evaluation) images and the image size of each dataset
SIZES = {"digits": 8, "fashion": 16, "cifar10": 16}
N_TRAIN = {"digits": 1797, "fashion": 3000, "cifar10": 3000}
N_EVAL = {"digits": 1797, "fashion": 1000, "cifar10": 1000}
DATASET_NAMES = {"digits": "scikit-learn digits (1,797, 8 px)",
                 "fashion": "Fashion-MNIST (train 3,000 / test 1,000, 16 px)",
                 "cifar10": "CIFAR-10 (train 3,000 / test 1,000, 16 px)"}
BATCH = 256


# -- data ------------------------------------------------------------------------------------------

def _parquet_rows(path: Path, n: int, size: int) -> tuple[np.ndarray, np.ndarray]:
    import pyarrow.parquet as pq
    from PIL import Image

    table = pq.read_table(path, columns=["image", "label"]).slice(0, n)
    out = []
    for b in table.column("image").to_pylist():
        img = Image.open(io.BytesIO(b)).convert("RGB")
        out.append(np.asarray(img.resize((size, size), Image.BILINEAR)))
    return np.stack(out), np.asarray(table.column("label").to_pylist(), dtype=np.int64)


def load_dataset(name: str, cache: Path) -> dict[str, np.ndarray]:
    """``{"train": uint8 (N,H,W,3), "eval": uint8, "eval_y": int64}`` of a dataset, cached as .npz."""
    path = cache / "data" / f"{name}.npz"
    if path.exists():
        with np.load(path) as f:
            return {k: f[k] for k in f.files}
    if name == "digits":
        from sklearn.datasets import load_digits

        d = load_digits()
        grey = np.clip(np.rint(d.images * (255.0 / 16.0)), 0, 255).astype(np.uint8)
        x = np.repeat(grey[..., None], 3, axis=3)
        out = {"train": x, "eval": x, "eval_y": d.target.astype(np.int64)}
    else:
        folder = {"fashion": "fashion_mnist", "cifar10": "cifar10"}[name]
        train, _ = _parquet_rows(DATA / folder / "train.parquet", N_TRAIN[name], SIZES[name])
        ev, ev_y = _parquet_rows(DATA / folder / "test.parquet", N_EVAL[name], SIZES[name])
        out = {"train": train, "eval": ev, "eval_y": ev_y}
    path.parent.mkdir(parents=True, exist_ok=True)
    tmp = path.with_suffix(".tmp.npz")
    np.savez(tmp, **out)
    tmp.rename(path)
    return out


def to_input(x: np.ndarray, dataset: str):
    """uint8 (N,H,W,3) → normalised float32 (N,3,H,W) tensor."""
    import torch

    mean, std = NORM[dataset]
    t = torch.from_numpy(np.ascontiguousarray(x)).permute(0, 3, 1, 2).float().div_(255.0)
    return (t - torch.tensor(mean).view(1, 3, 1, 1)) / torch.tensor(std).view(1, 3, 1, 1)


def augment(x, strength: float, gen):
    """Batched views of normalised images ``x`` (N,3,H,W) at ``strength`` (module docstring)."""
    import torch
    import torch.nn.functional as F

    n = x.shape[0]
    s = float(strength)
    u = torch.rand(n, 8, generator=gen)
    area = 1.0 - u[:, 0] * (1.0 - max(0.08, 1.0 - 0.8 * s))
    log_r = math.log(3 / 4) + u[:, 1] * (math.log(4 / 3) - math.log(3 / 4))
    ratio = torch.exp(log_r)
    sx = torch.sqrt(area * ratio).clamp(max=1.0)
    sy = torch.sqrt(area / ratio).clamp(max=1.0)
    tx = (u[:, 2] * 2 - 1) * (1 - sx)
    ty = (u[:, 3] * 2 - 1) * (1 - sy)
    flip = torch.where(u[:, 4] < 0.5, -1.0, 1.0)
    theta = torch.zeros(n, 2, 3)
    theta[:, 0, 0] = sx * flip
    theta[:, 0, 2] = tx
    theta[:, 1, 1] = sy
    theta[:, 1, 2] = ty
    grid = F.affine_grid(theta, list(x.shape), align_corners=False)
    out = F.grid_sample(x, grid, mode="bilinear", padding_mode="reflection", align_corners=False)
    jitter = (u[:, 5] < 0.8).float().view(n, 1, 1, 1)
    v = torch.rand(n, 2, generator=gen) * 2 - 1
    bright = (0.4 * s * v[:, 0]).view(n, 1, 1, 1) * jitter
    contrast = (1 + 0.4 * s * v[:, 1]).view(n, 1, 1, 1) ** jitter
    mean = out.mean(dim=(1, 2, 3), keepdim=True)
    out = (out - mean) * contrast + mean + bright
    grey = (u[:, 6] < 0.2 * s).view(n, 1, 1, 1)
    out = torch.where(grey, out.mean(dim=1, keepdim=True).expand_as(out), out)
    return out


# -- the sweeps ------------------------------------------------------------------------------------

@dataclasses.dataclass(frozen=True)
class Sweep:
    """One fixed-budget sweep (a unit): method, dataset, architecture, budget, and its settings."""

    name: str
    method: str
    dataset: str
    epochs: int
    width: int
    depth: int
    varies: str  # the hyperparameters it varies, in words
    settings: tuple[dict[str, Any], ...]
    held_out: bool = False

    def model_id(self, i: int) -> str:
        s = self.settings[i]
        keys = [k for k in sorted(s) if k != "seed"]
        return "-".join(f"{k}{s[k]:g}" if isinstance(s[k], float) else f"{k}{s[k]}" for k in keys)


DEFAULTS = {"lr": 3e-3, "wd": 1e-4, "temperature": 0.2, "strength": 1.0, "proj": 128,
            "inv": 25.0, "var": 25.0, "cov": 1.0, "ema": 0.99}
LRS = (3e-4, 6e-4, 1e-3, 2e-3, 4e-3, 8e-3, 1.6e-2, 3.2e-2)


def _grid(**axes: tuple) -> tuple[dict[str, Any], ...]:
    import itertools

    keys = list(axes)
    return tuple(dict(zip(keys, vals, strict=True)) for vals in itertools.product(*axes.values()))


def _random(seed: int, n: int = 8, **ranges: tuple[float, float]) -> tuple[dict[str, Any], ...]:
    """n settings drawn log-uniformly in each range (a random search)."""
    rng = np.random.default_rng(seed)
    return tuple({k: float(f"{math.exp(rng.uniform(math.log(lo), math.log(hi))):.3g}")
                  for k, (lo, hi) in ranges.items()} for _ in range(n))


def _sweeps() -> list[Sweep]:
    # (dataset, epochs, width, depth); the first two Fashion-MNIST sweeps were trained at width 16,
    # the later image sweeps at width 8 (a third of the cost on the shared machine)
    d, f16 = ("digits", 20, 16, 2), ("fashion", 10, 16, 3)
    f, c = ("fashion", 10, 8, 3), ("cifar10", 10, 8, 3)
    out: list[Sweep] = []

    def add(name, method, data, varies, settings, held_out=False):
        ds, epochs, width, depth = data
        out.append(Sweep(name, method, ds, epochs, width, depth, varies, tuple(settings), held_out))

    add("simclr-digits-lr", "simclr", d, "learning rate", _grid(lr=LRS))
    add("simclr-digits-temp", "simclr", d, "temperature",
        _grid(temperature=(0.03, 0.05, 0.1, 0.2, 0.3, 0.5, 0.8, 1.2)))
    add("vicreg-digits-coef", "vicreg", d, "VICReg coefficients (invariance × covariance)",
        _grid(inv=(5.0, 15.0, 25.0, 50.0), cov=(0.1, 1.0)))
    add("byol-digits-lr", "byol", d, "learning rate", _grid(lr=LRS))
    add("vicreg-digits-wd-aug", "vicreg", d, "weight decay × augmentation strength",
        _grid(wd=(1e-5, 1e-3, 3e-2, 0.3), strength=(0.4, 1.0)))
    add("byol-digits-aug-proj", "byol", d, "augmentation strength × projector width",
        _grid(strength=(0.2, 0.5, 0.8, 1.2), proj=(32, 256)))
    add("simclr-fashion-lr-temp", "simclr", f16, "learning rate × temperature",
        _grid(lr=(5e-4, 2e-3, 8e-3, 3.2e-2), temperature=(0.1, 0.5)))
    add("vicreg-fashion-lr", "vicreg", f16, "learning rate", _grid(lr=LRS))
    add("byol-fashion-lr-wd", "byol", f, "learning rate × weight decay",
        _grid(lr=(5e-4, 2e-3, 8e-3, 3.2e-2), wd=(1e-4, 0.1)))
    add("simclr-fashion-aug", "simclr", f, "augmentation strength",
        _grid(strength=(0.1, 0.25, 0.4, 0.6, 0.8, 1.0, 1.2, 1.5)))
    add("vicreg-fashion-proj", "vicreg", f, "projector width",
        _grid(proj=(8, 16, 32, 64, 128, 256, 512, 1024)))
    add("simclr-cifar10-temp", "simclr", c, "temperature",
        _grid(temperature=(0.03, 0.05, 0.1, 0.2, 0.3, 0.5, 0.8, 1.2)))
    add("vicreg-cifar10-coef", "vicreg", c, "VICReg coefficients (variance × covariance)",
        _grid(var=(5.0, 15.0, 25.0, 50.0), cov=(0.1, 4.0)))
    add("byol-cifar10-lr", "byol", c, "learning rate", _grid(lr=LRS))
    add("simclr-cifar10-lr-wd", "simclr", c, "learning rate × weight decay",
        _grid(lr=(5e-4, 2e-3, 8e-3, 3.2e-2), wd=(1e-4, 0.1)))
    add("vicreg-cifar10-aug", "vicreg", c, "augmentation strength",
        _grid(strength=(0.1, 0.25, 0.4, 0.6, 0.8, 1.0, 1.2, 1.5)))
    # held out (held_out_units.md, committed before these are built): random searches, built last
    add("simclr-digits-random", "simclr", d, "random search: lr, temperature, weight decay",
        _random(101, lr=(2e-4, 3e-2), temperature=(0.03, 1.0), wd=(1e-6, 0.3)), True)
    add("vicreg-fashion-random", "vicreg", f, "random search: lr, invariance, covariance",
        _random(102, lr=(2e-4, 3e-2), inv=(3.0, 60.0), cov=(0.05, 5.0)), True)
    add("byol-cifar10-random", "byol", c, "random search: lr, weight decay, augmentation",
        _random(103, lr=(2e-4, 3e-2), wd=(1e-6, 0.3), strength=(0.15, 1.5)), True)
    add("simclr-fashion-random", "simclr", f, "random search: lr, temperature, augmentation",
        _random(104, lr=(2e-4, 3e-2), temperature=(0.03, 1.0), strength=(0.15, 1.5)), True)
    add("vicreg-cifar10-random", "vicreg", c, "random search: lr, weight decay, projector width",
        _random(105, lr=(2e-4, 3e-2), wd=(1e-6, 0.3), proj=(16.0, 512.0)), True)
    return out


SWEEPS = _sweeps()


# -- training --------------------------------------------------------------------------------------

def _params(setting: dict[str, Any]) -> dict[str, Any]:
    p = {**DEFAULTS, **setting}
    p["proj"] = int(round(p["proj"]))
    return p


def train(sweep: Sweep, i: int, data: dict[str, np.ndarray], seed: int) -> dict[str, Any]:
    """Train setting ``i`` of ``sweep``: ``{"state": backbone state of the last epoch, "prev":
    of the epoch before, "losses": mean loss per epoch, "seconds"}``."""
    import time

    import torch

    from zoorank.tune.losses import byol_loss, ema_update, info_nce_loss, vicreg_loss
    from zoorank.tune.models import mlp, small_cnn

    t0 = time.perf_counter()
    p = _params(sweep.settings[i])
    torch.manual_seed(seed)
    backbone = small_cnn(width=sweep.width, depth=sweep.depth)
    dim = backbone.num_features
    projector = mlp(dim, 2 * p["proj"] if sweep.method == "vicreg" else p["proj"], p["proj"],
                    layers=3 if sweep.method == "vicreg" else 2)
    online = torch.nn.ModuleDict({"backbone": backbone, "projector": projector})
    target = None
    if sweep.method == "byol":
        online["predictor"] = mlp(p["proj"], p["proj"], p["proj"])
        target = torch.nn.ModuleDict({"backbone": copy.deepcopy(backbone),
                                      "projector": copy.deepcopy(projector)})
        target.requires_grad_(False)
    x_all = to_input(data["train"], sweep.dataset)
    n = len(x_all)
    per_epoch = n // BATCH
    total = per_epoch * sweep.epochs
    opt = torch.optim.AdamW(online.parameters(), lr=p["lr"], weight_decay=p["wd"])
    losses, prev = [], None
    gen = torch.Generator().manual_seed(seed)
    step = 0
    for epoch in range(sweep.epochs):
        order = np.random.default_rng([seed, epoch]).permutation(n)
        epoch_losses = []
        for b in range(per_epoch):
            lr = p["lr"] * (min(1.0, (step + 1) / per_epoch)
                            * 0.5 * (1 + math.cos(math.pi * step / total)))
            for g in opt.param_groups:
                g["lr"] = lr
            xb = x_all[order[b * BATCH:(b + 1) * BATCH]]
            v1, v2 = augment(xb, p["strength"], gen), augment(xb, p["strength"], gen)
            online.train()
            z1, z2 = projector(backbone(v1)), projector(backbone(v2))
            if sweep.method == "simclr":
                loss = info_nce_loss(z1, z2, p["temperature"])
            elif sweep.method == "vicreg":
                loss, _ = vicreg_loss(z1, z2, p["inv"], p["var"], p["cov"])
            else:
                q1, q2 = online["predictor"](z1), online["predictor"](z2)
                with torch.no_grad():
                    target.train()
                    t1 = target["projector"](target["backbone"](v1))
                    t2 = target["projector"](target["backbone"](v2))
                loss = byol_loss(q1, q2, t1, t2)
            opt.zero_grad(set_to_none=True)
            loss.backward()
            opt.step()
            if target is not None:
                ema_update(target, torch.nn.ModuleDict({"backbone": backbone,
                                                        "projector": projector}), p["ema"])
            epoch_losses.append(float(loss.detach()))
            step += 1
        losses.append(float(np.mean(epoch_losses)))
        if epoch == sweep.epochs - 2:
            prev = {k: v.detach().clone() for k, v in backbone.state_dict().items()}
    state = {k: v.detach().clone() for k, v in backbone.state_dict().items()}
    return {"state": state, "prev": prev, "losses": losses, "seconds": time.perf_counter() - t0,
            "n_params": int(sum(t.numel() for t in backbone.parameters())),
            "embed_dim": int(dim), "params": p}


def embed(state: dict[str, Any], sweep: Sweep, images: np.ndarray, batch: int = 1000) -> np.ndarray:
    """Eval-mode backbone features (float32, (N, d)) of uint8 images."""
    import torch

    from zoorank.tune.models import small_cnn

    net = small_cnn(width=sweep.width, depth=sweep.depth)
    net.load_state_dict(state)
    net.eval()
    out = []
    with torch.inference_mode():
        for s in range(0, len(images), batch):
            out.append(net(to_input(images[s:s + batch], sweep.dataset)).numpy())
    return np.concatenate(out).astype(np.float32)


def own_views(images: np.ndarray, dataset: str, strength: float, n: int, q: int, seed: int = 0):
    """(n·q, 3, H, W) normalised views of the first-n-by-seed images at ``strength`` (LiDAR's
    protocol: the method's own training augmentation), and the positions of the n images."""
    import torch

    pos = np.sort(np.random.default_rng([seed, 7]).choice(len(images), size=n, replace=False))
    x = to_input(images[pos], dataset)
    gen = torch.Generator().manual_seed(seed + 17)
    views = torch.stack([augment(x, strength, gen) for _ in range(q)], dim=1)  # n, q, 3, H, W
    return views.reshape(n * q, *x.shape[1:]), pos
