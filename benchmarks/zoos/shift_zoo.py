"""The trained zoo of ``shift_benchmark.py`` (issue 31): small CIFAR-10 classifiers of three
architectures and three widths, trained once with Ray Tune, checkpointed at several epochs.

* ``cnn``: three conv-BN-ReLU stages (widths w, 2w, 4w) with 2 × 2 max-pools, global average pool;
  features = the pooled 4w-d vector.
* ``resnet``: a 3 × 3 stem and three stages of one basic residual block each (w, 2w, 4w; the
  second and third halve the resolution); features = the pooled 4w-d vector.
* ``mlp``: flatten → Linear(3072, w) → ReLU → Linear(w, w) → ReLU; features = the last w-d vector.

Every net follows the python-model head convention of issue 31: ``forward_features`` (the
penultimate features), ``forward_head`` (a linear layer to the 10 logits) and ``forward`` =
their composition. Training: the first ``--train`` images of ``../shared/data/cifar10/train.parquet``
(decoded with Pillow, normalised with the UvA classifiers' mean and std), SGD with momentum and
cosine decay, horizontal flips; one Tune trial per (architecture, width), each a plain function
trainable on a fractional CPU with one torch thread, saving ``safetensors`` at every epoch of
``EPOCH_CHECKPOINTS``: each saved epoch is one model of the zoo ("epochs of one training run").

Checkpoints are cached under ``<cache>/<commit>/zoo/<arch>-w<width>-e<epoch>.safetensors`` with
``zoo.json`` (the commit of the training code, :data:`TRAINING_COMMIT`; the settings; the per-model
training time), so a rerun of the benchmark reuses them.
"""

from __future__ import annotations

import io
import json
import os
import time
from pathlib import Path

import numpy as np
import torch
from torch import nn
from zoo_models import BodyHead

ROOT = Path(__file__).resolve().parents[2]
SHARED = next((p / "shared" for p in (ROOT.parent, ROOT.parent.parent) if (p / "shared").is_dir()),
              ROOT.parent / "shared")
TRAIN = SHARED / "data" / "cifar10" / "train.parquet"
TEST = SHARED / "data" / "cifar10" / "test.parquet"
MEAN = np.asarray([0.49139968, 0.48215841, 0.44653091], np.float32)
STD = np.asarray([0.24703223, 0.24348513, 0.26158784], np.float32)

#: base width per architecture; the grid multiplies it by WIDTH_MULTIPLIERS
BASE_WIDTH = {"cnn": 8, "resnet": 4, "mlp": 64}
WIDTH_MULTIPLIERS = (1, 2, 4)
#: the epochs whose checkpoint is a model of the zoo (the last is the run's length)
EPOCH_CHECKPOINTS = (1, 2, 5)


def _conv_bn(c_in: int, c_out: int, stride: int = 1) -> list[nn.Module]:
    return [nn.Conv2d(c_in, c_out, 3, stride=stride, padding=1, bias=False), nn.BatchNorm2d(c_out)]


class _Block(nn.Module):
    def __init__(self, c_in: int, c_out: int, stride: int):
        super().__init__()
        self.net = nn.Sequential(*_conv_bn(c_in, c_out, stride), nn.ReLU(), *_conv_bn(c_out, c_out))
        self.skip = (nn.Sequential(nn.Conv2d(c_in, c_out, 1, stride=stride, bias=False),
                                   nn.BatchNorm2d(c_out))
                     if stride != 1 or c_in != c_out else nn.Identity())

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        return torch.relu(self.net(x) + self.skip(x))


class ShiftNet(BodyHead):
    """One classifier of the zoo: ``forward_features`` → ``forward_head`` (module docstring)."""

    def __init__(self, arch: str, width: int, num_classes: int = 10):
        super().__init__()
        w = width
        if arch == "cnn":
            self.body = nn.Sequential(
                *_conv_bn(3, w), nn.ReLU(), nn.MaxPool2d(2),
                *_conv_bn(w, 2 * w), nn.ReLU(), nn.MaxPool2d(2),
                *_conv_bn(2 * w, 4 * w), nn.ReLU(), nn.AdaptiveAvgPool2d(1), nn.Flatten())
            dim = 4 * w
        elif arch == "resnet":
            self.body = nn.Sequential(
                *_conv_bn(3, w), nn.ReLU(), _Block(w, w, 1), _Block(w, 2 * w, 2),
                _Block(2 * w, 4 * w, 2), nn.AdaptiveAvgPool2d(1), nn.Flatten())
            dim = 4 * w
        elif arch == "mlp":
            self.body = nn.Sequential(nn.Flatten(), nn.Linear(3 * 32 * 32, w), nn.ReLU(),
                                      nn.Linear(w, w), nn.ReLU())
            dim = w
        else:
            raise ValueError(f"arch: unknown architecture {arch!r} (cnn, resnet, mlp)")
        self.head = nn.Linear(dim, num_classes)


def decode(path: Path, start: int, stop: int) -> tuple[np.ndarray, np.ndarray]:
    """Rows ``[start, stop)`` of a CIFAR-10 parquet as uint8 pixels (N, 32, 32, 3) and labels."""
    import pyarrow.parquet as pq
    from PIL import Image

    table = pq.read_table(path, columns=["image", "label"]).slice(start, stop - start)
    pixels = np.stack([np.asarray(Image.open(io.BytesIO(b)).convert("RGB"))
                       for b in table.column("image").to_pylist()])
    return pixels, np.asarray(table.column("label").to_pylist(), dtype=np.int64)


def to_tensor(pixels: np.ndarray) -> torch.Tensor:
    """uint8 (N, 32, 32, 3) → normalised float32 (N, 3, 32, 32)."""
    x = (pixels.astype(np.float32) / 255.0 - MEAN) / STD
    return torch.from_numpy(np.ascontiguousarray(x.transpose(0, 3, 1, 2)))


#: The cache key of the trained zoo: the commit of the training code that trained it. A constant, not
#: this file's last commit, so that moving or editing the file reuses the zoo already trained; set it
#: to the commit of a change that alters the trained weights (the nets, the data, the recipe).
TRAINING_COMMIT = "98158ef"


def training_commit() -> str:
    """The cache key of the trained zoo (:data:`TRAINING_COMMIT`)."""
    return TRAINING_COMMIT


def model_id(arch: str, width: int, epoch: int) -> str:
    return f"{arch}-w{width}-e{epoch}"


def grid() -> list[dict]:
    return [{"arch": a, "width": BASE_WIDTH[a] * m} for a in BASE_WIDTH for m in WIDTH_MULTIPLIERS]


def train_one(config: dict, pixels: np.ndarray, labels: np.ndarray, out: str, seed: int) -> None:
    """Tune function trainable: train one (arch, width), save the epochs of EPOCH_CHECKPOINTS."""
    from ray import tune
    from safetensors.torch import save_file

    torch.set_num_threads(1)
    torch.manual_seed(seed)
    rng = np.random.default_rng(seed)
    arch, width = config["arch"], BASE_WIDTH[config["arch"]] * config["width_multiplier"]
    net = ShiftNet(arch, width)
    x, y = to_tensor(pixels), torch.from_numpy(labels)
    epochs, batch = max(EPOCH_CHECKPOINTS), 128
    steps = epochs * (len(y) // batch)
    opt = torch.optim.SGD(net.parameters(), lr=0.05, momentum=0.9, weight_decay=5e-4, nesterov=True)
    sched = torch.optim.lr_scheduler.OneCycleLR(opt, max_lr=0.1 if arch != "mlp" else 0.05,
                                                total_steps=steps, pct_start=0.25)
    start = time.perf_counter()
    for epoch in range(1, epochs + 1):
        net.train()
        order = torch.from_numpy(rng.permutation(len(y)))
        total = 0.0
        for i in range(len(y) // batch):
            idx = order[i * batch:(i + 1) * batch]
            xb = x[idx]
            flip = torch.from_numpy(rng.random(len(idx)) < 0.5)
            xb = torch.where(flip[:, None, None, None], xb.flip(3), xb)
            loss = nn.functional.cross_entropy(net(xb), y[idx])
            opt.zero_grad()
            loss.backward()
            opt.step()
            sched.step()
            total += float(loss)
        if epoch in EPOCH_CHECKPOINTS:
            name = model_id(arch, width, epoch)
            save_file({k: v.contiguous() for k, v in net.state_dict().items()},
                      os.path.join(out, f"{name}.safetensors"))
        tune.report({"epoch": epoch, "train_loss": total / (len(y) // batch),
                     "seconds": time.perf_counter() - start})


def train_zoo(cache: Path, n_train: int, cpus_per_trial: float, seed: int = 0) -> Path:
    """Train the grid with Ray Tune into ``cache/<commit>/zoo`` (reused when ``zoo.json`` exists)."""
    commit = training_commit()
    out = cache / commit / "zoo"
    if (out / "zoo.json").exists():
        return out
    import ray
    from ray import tune

    out.mkdir(parents=True, exist_ok=True)
    pixels, labels = decode(TRAIN, 0, n_train)
    ray.init(num_cpus=2, include_dashboard=False, log_to_driver=False)
    start = time.perf_counter()
    try:
        trainable = tune.with_resources(
            tune.with_parameters(train_one, pixels=pixels, labels=labels, out=str(out), seed=seed),
            {"cpu": cpus_per_trial})
        tuner = tune.Tuner(
            trainable,
            param_space={"arch": tune.grid_search(list(BASE_WIDTH)),
                         "width_multiplier": tune.grid_search(list(WIDTH_MULTIPLIERS))},
            tune_config=tune.TuneConfig(metric="train_loss", mode="min"),
            run_config=tune.RunConfig(name="shift_zoo", storage_path=str(cache / commit / "tune"),
                                      verbose=0))
        results = tuner.fit()
    finally:
        ray.shutdown()
    wall = time.perf_counter() - start
    errors = [str(r.error) for r in results if r.error is not None]
    if errors:
        raise RuntimeError(f"training failed: {errors[0]}")
    trials = [{"arch": r.config["arch"],
               "width": BASE_WIDTH[r.config["arch"]] * r.config["width_multiplier"],
               "seconds": r.metrics["seconds"],
               "final_train_loss": r.metrics["train_loss"]} for r in results]
    (out / "zoo.json").write_text(json.dumps({
        "commit": commit, "train_images": n_train, "epochs": list(EPOCH_CHECKPOINTS), "seed": seed,
        "cpus_per_trial": cpus_per_trial, "wall_seconds": wall, "trials": trials}, indent=1))
    return out


def load_zoo(out: Path) -> dict[str, nn.Module]:
    """Every cached checkpoint as an eval-mode ShiftNet, by model id (strict loading)."""
    from safetensors.torch import load_file

    models = {}
    for cfg in grid():
        for epoch in EPOCH_CHECKPOINTS:
            name = model_id(cfg["arch"], cfg["width"], epoch)
            net = ShiftNet(cfg["arch"], cfg["width"])
            net.load_state_dict(load_file(str(out / f"{name}.safetensors")), strict=True)
            models[name] = net.eval()
    return models
