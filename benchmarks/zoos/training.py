"""Training of the validation zoos that zoorank's SSL search does not train: supervised classifiers
(:class:`zoo_models.SweepNet`) and convolutional autoencoders (:class:`zoo_models.ConvAutoencoder`),
one Ray Tune trial per model configuration (a plain function trainable on a fractional CPU with one
torch thread), each saving ``safetensors`` at the epochs or steps it is told to: each saved
checkpoint is one model of a zoo.

The images are what zoorank feeds the models: uint8 RGB (grey images repeated over three channels),
at the model's input size, scaled to [0, 1] and normalised by the model entry's mean and std.
"""

from __future__ import annotations

import json
import os
import time
from collections.abc import Sequence
from pathlib import Path
from typing import Any

import numpy as np


def to_tensor(pixels: np.ndarray, mean: Sequence[float], std: Sequence[float]):
    """uint8 (N, H, W, 3) → normalised float32 torch tensor (N, 3, H, W)."""
    import torch

    x = (pixels.astype(np.float32) / 255.0 - np.asarray(mean, np.float32)) / np.asarray(std, np.float32)
    return torch.from_numpy(np.ascontiguousarray(x.transpose(0, 3, 1, 2)))


def train_one(config: dict[str, Any], pixels: np.ndarray, labels: np.ndarray | None, out: str,
              mean: Sequence[float], std: Sequence[float]) -> None:
    """One trial: build ``config["model"]`` (``sweep_net`` or ``autoencoder``) with
    ``config["kwargs"]``, train it (cross-entropy or mean squared reconstruction error, AdamW with
    a one-cycle schedule, horizontal flips for the classifiers), and save
    ``<out>/<config["id"]>-<tag>.safetensors`` at each epoch of ``config["save_epochs"]`` (tag
    ``e<epoch>``) and each step of ``config["save_steps"]`` (tag ``s<step>``)."""
    import torch
    import zoo_models
    from ray import tune
    from safetensors.torch import save_file
    from torch import nn

    torch.set_num_threads(1)
    seed = int(config.get("seed", 0))
    torch.manual_seed(seed)
    rng = np.random.default_rng(seed)
    supervised = config["model"] == "sweep_net"
    net = (zoo_models.SweepNet(**config["kwargs"]) if supervised
           else zoo_models.ConvAutoencoder(**config["kwargs"]))
    x = to_tensor(pixels, mean, std)
    y = torch.from_numpy(np.asarray(labels, np.int64)) if supervised else None
    batch = int(config.get("batch_size", 128))
    per_epoch = len(x) // batch
    save_epochs = set(config.get("save_epochs", ()))
    save_steps = set(config.get("save_steps", ()))
    epochs = max([*save_epochs, *(-(-s // per_epoch) for s in save_steps), 1])
    opt = torch.optim.AdamW(net.parameters(), lr=float(config.get("lr", 3e-3)), weight_decay=1e-4)
    sched = torch.optim.lr_scheduler.OneCycleLR(opt, max_lr=float(config.get("lr", 3e-3)),
                                                total_steps=epochs * per_epoch, pct_start=0.2)

    def save(tag: str) -> None:
        save_file({k: v.contiguous() for k, v in net.state_dict().items()},
                  os.path.join(out, f"{config['id']}-{tag}.safetensors"))

    start, step = time.perf_counter(), 0
    for epoch in range(1, epochs + 1):
        net.train()
        order = torch.from_numpy(rng.permutation(len(x)))
        total = 0.0
        for i in range(per_epoch):
            idx = order[i * batch:(i + 1) * batch]
            xb = x[idx]
            if supervised:
                flip = torch.from_numpy(rng.random(len(idx)) < 0.5)
                xb = torch.where(flip[:, None, None, None], xb.flip(3), xb)
                loss = nn.functional.cross_entropy(net(xb), y[idx])
            else:
                loss = nn.functional.mse_loss(net(xb), xb)
            opt.zero_grad()
            loss.backward()
            opt.step()
            sched.step()
            step += 1
            total += float(loss)
            if step in save_steps:
                net.eval()
                save(f"s{step}")
                net.train()
        if epoch in save_epochs:
            net.eval()
            save(f"e{epoch}")
        tune.report({"epoch": epoch, "loss": total / max(per_epoch, 1),
                     "seconds": time.perf_counter() - start})


def train_group(folder: Path, trials: list[dict[str, Any]], pixels: np.ndarray,
                labels: np.ndarray | None, mean: Sequence[float], std: Sequence[float],
                cpus_per_trial: float = 0.5) -> Path:
    """Train ``trials`` (one dict each: id, model, kwargs, save_epochs/save_steps, lr, seed) with
    Ray Tune into ``folder`` (reused when ``folder/group.json`` exists); returns ``folder``.
    Ray must be initialised by the caller."""
    if (folder / "group.json").exists():
        return folder
    from ray import tune

    folder.mkdir(parents=True, exist_ok=True)
    start = time.perf_counter()
    trainable = tune.with_resources(
        tune.with_parameters(trial_entry, pixels=pixels, labels=labels, out=str(folder), mean=mean,
                             std=std), {"cpu": cpus_per_trial})
    tuner = tune.Tuner(trainable, param_space={"trial": tune.grid_search(trials)},
                       tune_config=tune.TuneConfig(metric="loss", mode="min"),
                       run_config=tune.RunConfig(name=folder.name,
                                                 storage_path=str(folder.parent / "tune"),
                                                 verbose=0))
    results = tuner.fit()
    errors = [str(r.error) for r in results if r.error is not None]
    if errors:
        raise RuntimeError(f"training {folder.name} failed: {errors[0]}")
    (folder / "group.json").write_text(json.dumps({
        "trials": trials, "images": int(len(pixels)), "wall_seconds": time.perf_counter() - start,
        "final_loss": {r.config["trial"]["id"]: r.metrics["loss"] for r in results}}, indent=1))
    return folder


def trial_entry(config: dict[str, Any], pixels: np.ndarray, labels: np.ndarray | None, out: str,
                mean: Sequence[float], std: Sequence[float]) -> None:
    """The Tune trainable of :func:`train_group` (its grid is over whole trial dicts)."""
    train_one(config["trial"], pixels, labels, out, mean, std)
