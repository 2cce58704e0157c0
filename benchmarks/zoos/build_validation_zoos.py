"""Build the validation zoos: labelled zoos of real checkpoints, each ranked by the product
(``zoorank`` embed → score → rank with the label oracle on), and one tidy table of what came out.

One command builds them all, cached (a zoo whose outputs exist is skipped; a trained group of
checkpoints whose ``group.json``/``zoo.yaml`` exists is reused)::

    PYTHONPATH=. .venv/bin/python benchmarks/zoos/build_validation_zoos.py            # every zoo
    PYTHONPATH=. .venv/bin/python benchmarks/zoos/build_validation_zoos.py --only ssl-digits
    PYTHONPATH=. .venv/bin/python benchmarks/zoos/build_validation_zoos.py --list     # the zoos
    PYTHONPATH=. .venv/bin/python benchmarks/zoos/build_validation_zoos.py --table-only

Cache (``--cache``, default ``~/.cache/zoorank-validation``)::

    data/<set>.parquet         derived image sets (PNG): CIFAR-10 test rows clean and corrupted, Tiny-ImageNet
                            class subsets, Fashion-MNIST rows
    train/<group>/          checkpoints trained here (zoo_models.py, training.py; Ray Tune)
    ssl/<group>/            zoorank's own SSL searches (``zoorank tune``'s search, as the demo runs it)
    zoos/<zoo>/run.yaml     the zoo's run config; ``store/`` its zoorank store; ``rows.parquet`` its
                            rows of the table (written last: the zoo's "done" marker)
    validation_zoos.parquet the tidy table of every built zoo (also copied to ``--table``)

The table has one row per (zoo, model): ``zoo, kind, board, domain, held_out, n_models, n_images,
model_id, family, rank`` (the board's own rank, 1 = best; NaN: unranked), ``blocked`` (a blocking
health flag), ``flags``, ``signal``, ``ordering_metric`` (the metric that ordered the board),
``ordering_value``, ``ordering_oriented`` (higher = better), ``truth_metric`` and ``truth`` (the
heads' top-1 on a board of classifier heads, else the kNN oracle's accuracy), ``in_top_set``,
then one column per metric the store holds for the zoo's dataset, by metric name (every label-free
metric, the oracles and, for heads, every label-free accuracy estimate).

The zoos are listed in :data:`ZOOS` (kinds: supervised classifiers on clean and corrupted CIFAR-10,
their features as encoders, SSL encoders, autoencoders, checkpoints of one training run, width/depth
sweeps); :data:`HELD_OUT` (``held_out.md``, committed before any zoo was built) are kept out of
every choice. The lead's CIFAR-10 classifier zoo of ``benchmarks/shift_zoo.py`` is read from
``~/.cache/zoorank-shift/<commit>/zoo`` (never trained here: its zoos are skipped until its
``zoo.json`` exists).
"""

from __future__ import annotations

import argparse
import dataclasses
import io
import json
import os
import sys
import time
import traceback
from collections.abc import Callable
from pathlib import Path
from typing import Any

import numpy as np
import pandas as pd

sys.path.insert(0, str(Path(__file__).resolve().parents[1]))  # benchmarks/: the harness
# the harness puts the benchmark groups on sys.path and PYTHONPATH: the Ray workers import the
# model code (zoo_models, shift_zoo, uva_models) and the trainers by name
import harness  # noqa: E402

HERE = Path(__file__).resolve().parent
ROOT = HERE.parents[1]
for key, value in {"RAY_ENABLE_WINDOWS_OR_OSX_CLUSTER": "0", "RAY_USAGE_STATS_ENABLED": "0",
                   "RAY_DATA_DISABLE_PROGRESS_BARS": "1", "HF_HUB_OFFLINE": "1",
                   "TRANSFORMERS_OFFLINE": "1"}.items():
    os.environ.setdefault(key, value)

SHARED = next((p / "shared" for p in (ROOT.parent, ROOT.parent.parent) if (p / "shared").is_dir()),
              ROOT.parent / "shared")
DATA = SHARED / "data"
CACHE = Path(os.environ.get("ZOORANK_VALIDATION_CACHE", Path.home() / ".cache" / "zoorank-validation"))
SHIFT_CACHE = Path.home() / ".cache" / "zoorank-shift"
TABLE = HERE / "validation_zoos.parquet"

#: images a zoo is ranked on (the oracle trains on half of them and tests on the other half)
IMAGES = 1000
CIFAR_NORM = {"mean": [0.49139968, 0.48215841, 0.44653091],
              "std": [0.24703223, 0.24348513, 0.26158784]}
GREY_NORM = {"mean": [0.5, 0.5, 0.5], "std": [0.25, 0.25, 0.25]}
#: held out of every choice (held_out.md, commit 02f8bcd, written before any zoo was built)
HELD_OUT = frozenset({
    "cls-cifar10-pixelate", "cls-cifar10-frost", "cls-cifar10-contrast",
    "enc-cifar10-gaussian_noise", "ssl-fashion", "ae-fashion", "traj-cls-fashion",
    "sweep-ssl-fashion"})

#: held out of protocol 2 of the shortlist (shortlist_protocol_2.md), named before they were built
HELD_OUT_2 = frozenset({
    "cls-cifar10-speckle_noise", "cls-cifar10-zoom_blur", "cls-cifar10-spatter",
    "sweep-cls-cifar10", "enc-cifar10-snow", "enc-cifar10-zoom_blur",
    "ssl-cifar10-gaussian_noise", "ae-cifar10"})

KINDS = {"classifiers": "supervised classifiers", "ssl": "SSL encoders",
         "autoencoders": "autoencoders", "trajectory": "checkpoints along one training run",
         "sweep": "width/depth sweep"}


@dataclasses.dataclass(frozen=True)
class Zoo:
    """One validation zoo: its models and its dataset are built on demand (cached)."""

    name: str
    kind: str  # a key of KINDS
    board: str  # "heads" (classifier heads order it) or "embeddings"
    domain: str  # the dataset and domain, in words
    models: Callable[[], list[dict[str, Any]]]
    dataset: Callable[[], dict[str, Any]]
    description: str
    augmented: bool = True  # an augmented view (LiDAR, RankMe(aug), alignment)

    @property
    def held_out(self) -> bool:
        return self.name in HELD_OUT

    @property
    def held_out_2(self) -> bool:
        return self.name in HELD_OUT_2

    @property
    def truth(self) -> str:
        return "head_accuracy" if self.board == "heads" else "knn_accuracy"


# -- image sets ------------------------------------------------------------------------------------

def _decode_parquet(path: Path, rows: np.ndarray, size: int | None = None) -> tuple[np.ndarray, np.ndarray]:
    """The given rows of a Parquet image set as uint8 RGB (N, H, W, 3) (resized to ``size``
    bilinear when given) and their labels."""
    import pyarrow.parquet as pq
    from PIL import Image

    table = pq.read_table(path, columns=["image", "label"]).take(rows)
    images = []
    for b in table.column("image").to_pylist():
        img = Image.open(io.BytesIO(b)).convert("RGB")
        if size is not None and img.size != (size, size):
            img = img.resize((size, size), Image.BILINEAR)
        images.append(np.asarray(img))
    return np.stack(images), np.asarray(table.column("label").to_pylist(), dtype=np.int64)


def _parquet(name: str, make: Callable[[], tuple[np.ndarray, np.ndarray]]) -> Path:
    """``data/<name>.parquet`` (``image``: PNG bytes, lossless; ``label``), made once.

    Parquet, not zoorank's ``numpy`` source: a ``.npz`` of this size makes Ray Data's read task
    large enough to hit a Ray code path that fails on zoorank's read function (Ray 2.60:
    ``'functools.partial' object has no attribute '__name__'``)."""
    path = CACHE / "data" / f"{name}.parquet"
    if not path.exists():
        import pyarrow as pa
        import pyarrow.parquet as pq
        from PIL import Image

        path.parent.mkdir(parents=True, exist_ok=True)
        images, labels = make()
        png = []
        for img in images:
            buf = io.BytesIO()
            Image.fromarray(img).save(buf, format="PNG")
            png.append(buf.getvalue())
        tmp = path.with_suffix(f".{os.getpid()}.tmp")
        pq.write_table(pa.table({"image": pa.array(png, pa.binary()),
                                 "label": pa.array(labels.astype(np.int16))}), tmp)
        tmp.rename(path)
    return path


def _image_set(name: str, path: Path) -> dict[str, Any]:
    return {"name": name, "source": "parquet", "path": str(path), "image_column": "image",
            "label_column": "label"}


#: CIFAR-10 corruptions of the shift benchmark (shift_benchmark.CORRUPTIONS, 32-px severities)
def cifar_corruptions() -> tuple[tuple[str, int], ...]:
    from shift_benchmark import CORRUPTIONS

    return CORRUPTIONS


def cifar_domain(corruption: str | None, severity: int = 0, start: int = 0) -> dict[str, Any]:
    """IMAGES CIFAR-10 test rows from ``start``, clean or with one imagecorruptions corruption."""
    name = "cifar10-clean" if corruption is None else f"cifar10-{corruption}"
    name += f"-from{start}" if start else ""

    def make() -> tuple[np.ndarray, np.ndarray]:
        from shift_benchmark import corrupt

        pixels, labels = _decode_parquet(DATA / "cifar10" / "test.parquet",
                                         np.arange(start, start + IMAGES))
        return corrupt(pixels, corruption, severity), labels

    return _image_set(name.replace("_", "-"), _parquet(name, make))


#: imagecorruptions' gaussian_noise at severity 2: a standard deviation of 0.12 on [0, 1] pixels
#: (the package refuses images under 32 px, so Fashion-MNIST's 28 px get its formula here)
FASHION_NOISE_SD = 0.12


def fashion_test(noise: bool = False) -> dict[str, Any]:
    """The first IMAGES Fashion-MNIST test rows (grey repeated to RGB), clean or with Gaussian noise
    (imagecorruptions' severity 2, fixed before any result; one seeded draw per image, the same on
    the three channels, so the images stay grey)."""
    name = "fashion-noise" if noise else "fashion-test"

    def make() -> tuple[np.ndarray, np.ndarray]:
        pixels, labels = _decode_parquet(DATA / "fashion_mnist" / "test.parquet", np.arange(IMAGES))
        if noise:
            grey = pixels[..., :1].astype(np.float64) / 255.0
            grey = grey + np.random.default_rng(0).normal(scale=FASHION_NOISE_SD, size=grey.shape)
            pixels = np.repeat(np.clip(np.rint(255.0 * grey), 0, 255).astype(np.uint8), 3, axis=3)
        return pixels, labels

    return _image_set(name, _parquet(name, make))


def fashion_train(n: int) -> tuple[np.ndarray, np.ndarray]:
    return _decode_parquet(DATA / "fashion_mnist" / "train.parquet", np.arange(n))


def tiny_imagenet(split: str) -> dict[str, Any]:
    """Tiny-ImageNet validation images at 32 px: ``eval`` = the 1,000 images of classes 0–19 (the
    ranked set, labels 0–19), ``train`` = 4,000 images of classes 20–199 (unlabelled SSL training)."""
    name = f"tinyimagenet-{split}"

    def make() -> tuple[np.ndarray, np.ndarray]:
        import pyarrow.parquet as pq

        labels = np.asarray(pq.read_table(DATA / "tiny_imagenet" / "val.parquet",
                                          columns=["label"]).column("label").to_pylist())
        if split == "eval":
            rows = np.flatnonzero(labels < 20)
        else:
            rows = np.flatnonzero(labels >= 20)[:4000]
        pixels, lab = _decode_parquet(DATA / "tiny_imagenet" / "val.parquet", rows, size=32)
        return pixels, lab

    return _image_set(name, _parquet(name, make))


def digits() -> dict[str, Any]:
    return {"name": "digits", "source": "sklearn_digits"}


# -- models ---------------------------------------------------------------------------------------

def shift_zoo_folder() -> Path | None:
    """The lead's trained shift zoo: the cache of shift_zoo.py's current commit, else the newest
    finished one (never trained here)."""
    import shift_zoo

    own = SHIFT_CACHE / shift_zoo.training_commit() / "zoo"
    if (own / "zoo.json").exists():
        return own
    done = sorted((p.parent for p in SHIFT_CACHE.glob("*/zoo/zoo.json")),
                  key=lambda p: p.stat().st_mtime)
    return done[-1] if done else None


def cifar_classifiers(head: bool = True) -> list[dict[str, Any]]:
    """The 27 nets of shift_zoo.py and the 4 UvA classifiers (``head: false``: features only)."""
    import shift_zoo
    from validate_uva import config as uva_config

    folder = shift_zoo_folder()
    if folder is None:
        raise FileNotFoundError("the shift zoo is not trained yet (~/.cache/zoorank-shift/*/zoo/"
                                "zoo.json): these zoos wait for it")
    models = []
    for cfg in shift_zoo.grid():
        for epoch in shift_zoo.EPOCH_CHECKPOINTS:
            mid = shift_zoo.model_id(cfg["arch"], cfg["width"], epoch)
            models.append({"id": mid, "source": "python", "name": "shift_zoo:ShiftNet",
                           "model_kwargs": {"arch": cfg["arch"], "width": cfg["width"]},
                           "checkpoint": str(folder / f"{mid}.safetensors"), "input_size": 32,
                           "crop_pct": 1.0, "family": cfg["arch"], **CIFAR_NORM})
    uva = [m for m in uva_config(CACHE, IMAGES, 2)["models"] if m["family"] == "classifier"]
    if head:
        # the UvA modules return features from forward and keep their classifier in output_net:
        # zoo_models.uva_classifier gives them the head convention (forward_features/forward_head)
        uva = [{**m, "name": "zoo_models:uva_classifier",
                "model_kwargs": {"arch": m["name"].split(":", 1)[1]}} for m in uva]
    models += [{**m, "id": f"uva-{m['id']}", "family": "uva"} for m in uva]
    if not head:
        models = [{**m, "head": False} for m in models]
    return models


def uva_autoencoders() -> list[dict[str, Any]]:
    from validate_uva import config as uva_config

    return [m for m in uva_config(CACHE, IMAGES, 2)["models"] if m["family"] == "autoencoder"]


def from_search(zoo_dir: Path, prefix: str = "", keep: Callable[[dict], bool] | None = None
                ) -> list[dict[str, Any]]:
    """The model entries of a finished SSL search's ``zoo.yaml`` (absolute checkpoints)."""
    import yaml

    entries = yaml.safe_load((zoo_dir / "zoo.yaml").read_text())
    out = []
    for e in entries:
        if keep is not None and not keep(e):
            continue
        e = dict(e)
        e["id"] = prefix + e["id"]
        e["checkpoint"] = str((zoo_dir / e["checkpoint"]).resolve())
        out.append(e)
    return out


def ssl_search(group: str, train: dict[str, Any], input_size: int, *, epochs: int, every: int,
               methods: tuple[str, ...] = ("simclr", "vicreg"), lrs: tuple[float, ...] = (1e-3, 1e-2),
               seeds: tuple[int, ...] = (0, 1), width: int = 16, depth: int = 3) -> Path:
    """One zoorank SSL search (the demo's tune config, as ``zoorank tune`` runs it) into
    ``ssl/<group>``; every ``every`` epochs a checkpoint of every trial joins ``zoo.yaml``."""
    from zoorank.config import DatasetSpec
    from zoorank.demo import DemoSize, tune_config
    from zoorank.tune.config import TuneConfig, experiment_location
    from zoorank.tune.search import run_search

    out = CACHE / "ssl" / group
    size = DemoSize(None, None, epochs, methods, lrs, seeds, width, (128, 4), (128, 4), 10, 500)
    tdict = tune_config(out, DatasetSpec.model_validate(train), input_size, size).model_dump(mode="json")
    tdict["probe"]["every"] = every
    tdict["export_epochs"] = every < epochs
    tdict["backbone"]["depth"] = depth
    tdict["search"]["name"] = group
    tcfg = TuneConfig.model_validate(tdict)
    store, _, rel = experiment_location(tcfg)
    zoo_dir = Path(store.local_path(rel))
    if not (zoo_dir / "zoo.yaml").exists():
        frame = run_search(tcfg)
        if frame is None or not (zoo_dir / "zoo.yaml").exists():
            raise RuntimeError(f"SSL search {group} did not finish")
    return zoo_dir


def _epoch(entry: dict[str, Any], final: int) -> int:
    """The epoch of a zoo.yaml entry: ``…-r<report>`` for a kept intermediate report of
    ``export_epochs`` (one report an epoch here), else the trial's last epoch ``final``."""
    tail = entry["id"].rsplit("-", 1)[-1]
    return int(tail[1:]) if tail.startswith("r") and tail[1:].isdigit() else final


def ssl_cifar10() -> Path:
    from zoorank.demo import PARQUET_SETS  # noqa: F401  (the demo's CIFAR-10 layout)

    train = {"name": "cifar10-train", "source": "parquet",
             "path": str(DATA / "cifar10" / "train.parquet"), "limit": 3000}
    return ssl_search("ssl-cifar10", train, 32, epochs=3, every=1)


def ssl_fashion() -> Path:
    train = {"name": "fashion-train", "source": "parquet",
             "path": str(DATA / "fashion_mnist" / "train.parquet"), "limit": 3000}
    return ssl_search("ssl-fashion", train, 28, epochs=3, every=1)


def ssl_tinyimagenet() -> Path:
    return ssl_search("ssl-tinyimagenet", {**tiny_imagenet("train"), "name": "tin-train"}, 32,
                      epochs=3, every=3)


def ssl_digits() -> Path:
    return ssl_search("ssl-digits", digits(), 8, epochs=3, every=3, seeds=(0, 1, 2), width=16)


def traj_ssl_cifar10() -> Path:
    train = {"name": "cifar10-train", "source": "parquet",
             "path": str(DATA / "cifar10" / "train.parquet"), "limit": 2000}
    return ssl_search("traj-ssl-cifar10", train, 32, epochs=10, every=1, methods=("simclr",),
                      lrs=(3e-3,), seeds=(0,), width=16)


def sweep_ssl_fashion() -> list[dict[str, Any]]:
    """SimCLR small CNNs of widths 8, 16, 32 × depths 2, 3, 4 on Fashion-MNIST (one search each:
    the backbone is not a searchable parameter), one model per (width, depth)."""
    train = {"name": "fashion-train", "source": "parquet",
             "path": str(DATA / "fashion_mnist" / "train.parquet"), "limit": 2000}
    models = []
    for width in (8, 16, 32):
        for depth in (2, 3, 4):
            zoo_dir = ssl_search(f"sweep-ssl-fashion-w{width}-d{depth}", train, 28, epochs=2,
                                 every=2, methods=("simclr",), lrs=(3e-3,), seeds=(0,),
                                 width=width, depth=depth)
            for e in from_search(zoo_dir):
                models.append({**e, "id": f"w{width}-d{depth}", "group": None,
                               "family": f"depth{depth}"})
    return [{k: v for k, v in m.items() if v is not None} for m in models]


def _trained(group: str, trials: list[dict[str, Any]], data: Callable[[], tuple], norm: dict,
             ) -> Path:
    import ray
    from training import train_group

    from zoorank.runtime import ensure_ray

    folder = CACHE / "train" / group
    if (folder / "group.json").exists():
        return folder
    ensure_ray()
    assert ray.is_initialized()
    pixels, labels = data()
    return train_group(folder, trials, pixels, labels, norm["mean"], norm["std"])


def _python_entries(folder: Path, factory: str, kwargs_of: Callable[[str], dict],
                    family_of: Callable[[str], str], size: int, norm: dict,
                    prefix: str | None = None) -> list[dict[str, Any]]:
    out = []
    for path in sorted(folder.glob("*.safetensors")):
        mid = path.stem
        entry = {"id": mid, "source": "python", "name": f"zoo_models:{factory}",
                 "model_kwargs": kwargs_of(mid), "checkpoint": str(path), "input_size": size,
                 "crop_pct": 1.0, "family": family_of(mid), **norm}
        if prefix:
            entry["state_dict_prefix"] = prefix
        out.append(entry)
    return out


SWEEP_CLS = [{"id": f"w{w}-d{d}", "model": "sweep_net", "kwargs": {"width": w, "depth": d},
              "save_epochs": [2], "lr": 3e-3, "seed": 0}
             for w in (4, 8, 16, 32) for d in (1, 2, 3)]


def sweep_classifiers() -> list[dict[str, Any]]:
    """SweepNet widths 4, 8, 16, 32 × depths 1, 2, 3, 2 epochs on 6,000 Fashion-MNIST images."""
    folder = _trained("sweep-cls-fashion", SWEEP_CLS, lambda: fashion_train(6000), GREY_NORM)
    spec = {t["id"]: t["kwargs"] for t in SWEEP_CLS}
    return _python_entries(folder, "sweep_net", lambda m: spec[m.rsplit("-", 1)[0]],
                           lambda m: "depth" + m.split("-d")[1][0], 28, GREY_NORM)


#: steps of the trajectory run (47 steps an epoch of 6,000 images in batches of 128; 3 epochs)
TRAJ_STEPS = [5, 10, 15, 20, 30, 40, 50, 65, 80, 100, 120, 141]
TRAJ_CLS = [{"id": "traj", "model": "sweep_net", "kwargs": {"width": 16, "depth": 2},
             "save_steps": TRAJ_STEPS, "lr": 3e-3, "seed": 0}]


def traj_classifiers() -> list[dict[str, Any]]:
    """One SweepNet (width 16, depth 2) run of 3 epochs on 6,000 Fashion-MNIST images, a checkpoint
    at each step of TRAJ_STEPS."""
    folder = _trained("traj-cls-fashion", TRAJ_CLS, lambda: fashion_train(6000), GREY_NORM)
    return _python_entries(folder, "sweep_net", lambda m: {"width": 16, "depth": 2},
                           lambda m: "trajectory", 28, GREY_NORM)


AE_FASHION = [{"id": f"ae{d}", "model": "autoencoder",
               "kwargs": {"latent_dim": d, "width": 16, "depth": 2, "size": 28},
               "save_epochs": [1, 3], "lr": 3e-3, "seed": 0} for d in (4, 8, 16, 32, 64, 128)]
AE_DIGITS = [{"id": f"ae{d}-s{s}", "model": "autoencoder",
              "kwargs": {"latent_dim": d, "width": 16, "depth": 2, "size": 8},
              "save_epochs": [10], "lr": 3e-3, "seed": s, "batch_size": 64}
             for d in (2, 4, 8, 16, 32, 64) for s in (0, 1)]


def ae_fashion() -> list[dict[str, Any]]:
    """Conv autoencoders with latents 4 … 128, epochs 1 and 3 on 4,000 Fashion-MNIST images."""
    folder = _trained("ae-fashion", AE_FASHION, lambda: fashion_train(4000), GREY_NORM)
    spec = {t["id"]: t["kwargs"] for t in AE_FASHION}
    return _python_entries(folder, "ae_encoder", lambda m: spec[m.split("-")[0]],
                           lambda m: m.split("-")[0], 28, GREY_NORM, prefix="encoder.")


def _digits_pixels() -> tuple[np.ndarray, np.ndarray]:
    from sklearn.datasets import load_digits

    d = load_digits()
    grey = np.clip(np.rint(d.images * (255.0 / 16.0)), 0, 255).astype(np.uint8)
    return np.repeat(grey[..., None], 3, axis=3), d.target.astype(np.int64)


def ae_digits() -> list[dict[str, Any]]:
    """Conv autoencoders with latents 2 … 64 × seeds 0, 1, 10 epochs on the 1,797 digits."""
    folder = _trained("ae-digits", AE_DIGITS, _digits_pixels, GREY_NORM)
    spec = {t["id"]: t["kwargs"] for t in AE_DIGITS}
    return _python_entries(folder, "ae_encoder", lambda m: spec[m.rsplit("-", 1)[0]],
                           lambda m: m.split("-")[0], 8, GREY_NORM, prefix="encoder.")


SWEEP_CIFAR = [{"id": f"w{w}-d{d}", "model": "sweep_net", "kwargs": {"width": w, "depth": d},
                "save_epochs": [2], "lr": 3e-3, "seed": 0}
               for w in (8, 16, 32, 64) for d in (1, 2, 3)]
AE_NORM = {"mean": [0.5, 0.5, 0.5], "std": [0.25, 0.25, 0.25]}
AE_CIFAR = [{"id": f"ae{d}", "model": "autoencoder",
             "kwargs": {"latent_dim": d, "width": 16, "depth": 3, "size": 32},
             "save_epochs": [1, 3], "lr": 3e-3, "seed": 0} for d in (8, 16, 32, 64, 128, 256)]


def cifar_train(n: int) -> tuple[np.ndarray, np.ndarray]:
    return _decode_parquet(DATA / "cifar10" / "train.parquet", np.arange(n))


def sweep_cifar_classifiers() -> list[dict[str, Any]]:
    """SweepNet widths 8, 16, 32, 64 × depths 1, 2, 3, 2 epochs on 6,000 CIFAR-10 images."""
    folder = _trained("sweep-cls-cifar10", SWEEP_CIFAR, lambda: cifar_train(6000), CIFAR_NORM)
    spec = {t["id"]: t["kwargs"] for t in SWEEP_CIFAR}
    return _python_entries(folder, "sweep_net", lambda m: spec[m.rsplit("-", 1)[0]],
                           lambda m: "depth" + m.split("-d")[1][0], 32, CIFAR_NORM)


def ae_cifar() -> list[dict[str, Any]]:
    """Conv autoencoders with latents 8 … 256, epochs 1 and 3 on 4,000 CIFAR-10 images."""
    folder = _trained("ae-cifar10", AE_CIFAR, lambda: cifar_train(4000), AE_NORM)
    spec = {t["id"]: t["kwargs"] for t in AE_CIFAR}
    return _python_entries(folder, "ae_encoder", lambda m: spec[m.split("-")[0]],
                           lambda m: m.split("-")[0], 32, AE_NORM, prefix="encoder.")


# -- the zoos -------------------------------------------------------------------------------------

def _cifar_zoos() -> list[Zoo]:
    zoos = [Zoo("cls-cifar10-clean", "classifiers", "heads", "CIFAR-10 test, clean",
                cifar_classifiers, lambda: cifar_domain(None),
                "shift_zoo.py's 27 CIFAR-10 nets (CNN, ResNet, MLP × 3 widths × epochs 1, 2, 5) "
                "and the 4 UvA classifiers", augmented=False)]
    for corruption, severity in cifar_corruptions():
        zoos.append(Zoo(f"cls-cifar10-{corruption}", "classifiers", "heads",
                        f"CIFAR-10 test, {corruption} severity {severity}", cifar_classifiers,
                        lambda c=corruption, s=severity: cifar_domain(c, s),
                        "the 31 CIFAR-10 classifiers of cls-cifar10-clean", augmented=False))
    return zoos


def all_zoos() -> list[Zoo]:
    corruptions = dict(cifar_corruptions())
    return [
        *_cifar_zoos(),
        Zoo("enc-cifar10-clean", "classifiers", "embeddings", "CIFAR-10 test, clean",
            lambda: cifar_classifiers(head=False), lambda: cifar_domain(None),
            "the 31 CIFAR-10 classifiers' penultimate features (head: false)"),
        Zoo("enc-cifar10-gaussian_noise", "classifiers", "embeddings",
            f"CIFAR-10 test, gaussian_noise severity {corruptions['gaussian_noise']}",
            lambda: cifar_classifiers(head=False),
            lambda: cifar_domain("gaussian_noise", corruptions["gaussian_noise"]),
            "the 31 CIFAR-10 classifiers' penultimate features (head: false)"),
        Zoo("ssl-digits", "ssl", "embeddings", "scikit-learn digits (1,797)",
            lambda: from_search(ssl_digits()), digits,
            "SimCLR/VICReg × lr 1e-3, 1e-2 × seeds 0–2, small CNN width 16, 3 epochs on the digits"),
        Zoo("ssl-cifar10", "ssl", "embeddings", "CIFAR-10 test",
            lambda: from_search(ssl_cifar10(), keep=lambda e: _epoch(e, 3) in (1, 3)),
            lambda: cifar_domain(None),
            "SimCLR/VICReg × lr 1e-3, 1e-2 × seeds 0, 1, small CNN width 16, epochs 1 and 3 on "
            "3,000 CIFAR-10 training images"),
        Zoo("ssl-cifar10-tinyimagenet", "ssl", "embeddings",
            "Tiny-ImageNet validation, classes 0–19 at 32 px (transfer)",
            lambda: from_search(ssl_cifar10(), keep=lambda e: _epoch(e, 3) in (1, 3)),
            lambda: tiny_imagenet("eval"), "the ssl-cifar10 zoo ranked on another dataset"),
        Zoo("ssl-fashion", "ssl", "embeddings", "Fashion-MNIST test",
            lambda: from_search(ssl_fashion(), keep=lambda e: _epoch(e, 3) in (1, 3)),
            lambda: fashion_test(),
            "SimCLR/VICReg × lr 1e-3, 1e-2 × seeds 0, 1, small CNN width 16, epochs 1 and 3 on "
            "3,000 Fashion-MNIST training images"),
        Zoo("ssl-tinyimagenet", "ssl", "embeddings", "Tiny-ImageNet validation, classes 0–19 at 32 px",
            lambda: from_search(ssl_tinyimagenet()), lambda: tiny_imagenet("eval"),
            "SimCLR/VICReg × lr 1e-3, 1e-2 × seeds 0, 1, small CNN width 16, 3 epochs on 4,000 "
            "Tiny-ImageNet images of the other 180 classes"),
        Zoo("ae-uva-cifar10", "autoencoders", "embeddings", "CIFAR-10 test, clean",
            uva_autoencoders, lambda: cifar_domain(None),
            "the 4 UvA CIFAR-10 autoencoders (latents 64, 128, 256, 384)"),
        Zoo("ae-uva-tinyimagenet", "autoencoders", "embeddings",
            "Tiny-ImageNet validation, classes 0–19 at 32 px (transfer)", uva_autoencoders,
            lambda: tiny_imagenet("eval"), "the 4 UvA CIFAR-10 autoencoders on another dataset"),
        Zoo("ae-fashion", "autoencoders", "embeddings", "Fashion-MNIST test", ae_fashion,
            lambda: fashion_test(), "conv autoencoders, latents 4–128 × epochs 1, 3 on 4,000 "
            "Fashion-MNIST training images"),
        Zoo("ae-digits", "autoencoders", "embeddings", "scikit-learn digits (1,797)", ae_digits,
            digits, "conv autoencoders, latents 2–64 × seeds 0, 1, 10 epochs on the digits"),
        Zoo("traj-ssl-cifar10", "trajectory", "embeddings", "CIFAR-10 test",
            lambda: from_search(traj_ssl_cifar10()), lambda: cifar_domain(None),
            "one SimCLR run (small CNN width 16, lr 3e-3) on 2,000 CIFAR-10 training images, "
            "a checkpoint after each of its 10 epochs"),
        Zoo("traj-cls-fashion", "trajectory", "heads", "Fashion-MNIST test", traj_classifiers,
            lambda: fashion_test(), "one supervised SweepNet run (width 16, depth 2), 12 "
            "checkpoints from step 5 to step 141 (3 epochs of 6,000 images)", augmented=False),
        Zoo("sweep-ssl-fashion", "sweep", "embeddings", "Fashion-MNIST test", sweep_ssl_fashion,
            lambda: fashion_test(), "SimCLR small CNNs, widths 8, 16, 32 × depths 2, 3, 4, 2 "
            "epochs on 2,000 Fashion-MNIST training images"),
        Zoo("sweep-cls-fashion", "sweep", "heads", "Fashion-MNIST test", sweep_classifiers,
            lambda: fashion_test(), "supervised SweepNets, widths 4, 8, 16, 32 × depths 1, 2, 3, "
            "2 epochs on 6,000 Fashion-MNIST training images", augmented=False),
        # protocol 2's held-out zoos (HELD_OUT_2)
        *(Zoo(f"cls-cifar10-{c}", "classifiers", "heads", f"CIFAR-10 test, {c} severity {s}",
              cifar_classifiers, lambda c=c, s=s: cifar_domain(c, s),
              "the 31 CIFAR-10 classifiers of cls-cifar10-clean", augmented=False)
          for c, s in (("speckle_noise", 2), ("zoom_blur", 3), ("spatter", 4))),
        Zoo("sweep-cls-cifar10", "sweep", "heads", "CIFAR-10 test rows 1,000–1,999, clean",
            sweep_cifar_classifiers, lambda: cifar_domain(None, start=IMAGES),
            "supervised SweepNets, widths 8, 16, 32, 64 × depths 1, 2, 3, 2 epochs on 6,000 "
            "CIFAR-10 training images", augmented=False),
        Zoo("enc-cifar10-snow", "classifiers", "embeddings", "CIFAR-10 test, snow severity 2",
            lambda: cifar_classifiers(head=False), lambda: cifar_domain("snow", 2),
            "the 31 CIFAR-10 classifiers' penultimate features (head: false)"),
        Zoo("enc-cifar10-zoom_blur", "classifiers", "embeddings", "CIFAR-10 test, zoom_blur severity 3",
            lambda: cifar_classifiers(head=False), lambda: cifar_domain("zoom_blur", 3),
            "the 31 CIFAR-10 classifiers' penultimate features (head: false)"),
        Zoo("ssl-cifar10-gaussian_noise", "ssl", "embeddings",
            f"CIFAR-10 test, gaussian_noise severity {corruptions['gaussian_noise']}",
            lambda: from_search(ssl_cifar10(), keep=lambda e: _epoch(e, 3) in (1, 3)),
            lambda: cifar_domain("gaussian_noise", corruptions["gaussian_noise"]),
            "the ssl-cifar10 zoo on a shifted domain"),
        Zoo("ae-cifar10", "autoencoders", "embeddings", "CIFAR-10 test, clean", ae_cifar,
            lambda: cifar_domain(None), "conv autoencoders, latents 8–256 × epochs 1, 3 on 4,000 "
            "CIFAR-10 training images"),
        Zoo("sweep-cls-fashion-noise", "sweep", "heads",
            "Fashion-MNIST test, gaussian_noise severity 2", sweep_classifiers,
            lambda: fashion_test(noise=True), "the sweep-cls-fashion zoo on a shifted domain",
            augmented=False),
    ]


# -- one zoo through the product ------------------------------------------------------------------

def run_config(zoo: Zoo, folder: Path) -> dict[str, Any]:
    """The zoo's run config: the product's defaults, the label oracle on (kNN and linear probe),
    four folds for the rank intervals, the default metrics (an augmented view of 128 × 4 on zoos
    of encoders)."""
    views = [{"name": "clean"}]
    if zoo.augmented:
        views.append({"name": "simclr", "samples": 128, "per_sample": 4})
    return {"store": str(folder / "store"), "seed": 0, "datasets": [zoo.dataset()],
            "models": zoo.models(), "views": views,
            "score": {"resample_folds": 4},
            "oracle": {"knn": True, "linear_probe": True},
            "rank": {"bootstrap": 100}}


def rank_zoo(zoo: Zoo, folder: Path) -> None:
    """embed → score → rank of the zoo's run config (what ``zoorank run`` does, less the report)."""
    import yaml

    from zoorank.catalog.context import RunContext
    from zoorank.config.loading import load_config
    from zoorank.pipeline import run_embed, run_rank, run_score
    from zoorank.runtime import ensure_ray

    folder.mkdir(parents=True, exist_ok=True)
    path = folder / "run.yaml"
    path.write_text(yaml.safe_dump(run_config(zoo, folder), sort_keys=False))
    config = load_config(path)
    ensure_ray()
    context = RunContext(config)
    run_embed(config, context=context)
    run_score(config, context=context)
    run_rank(config, show=False, context=context)


def zoo_rows(zoo: Zoo, folder: Path) -> pd.DataFrame:
    """The zoo's rows of the tidy table, from its store's leaderboard (module docstring)."""
    from zoorank.config.loading import load_config
    from zoorank.decide.leaderboard import read_leaderboard
    from zoorank.metrics import registry
    from zoorank.stats.health import BLOCKING
    from zoorank.store import Store

    config = load_config(folder / "run.yaml")
    (ds,) = [d.name for d in config.datasets]
    board, settings = read_leaderboard(Store(config.store))
    metric = (settings.get("primary_metric") or {}).get(ds)
    flags = board["flags"].fillna("").astype(str) if "flags" in board else pd.Series([""] * len(board))
    blocked = [bool({f.split(":")[-1] for f in fl.split(",") if f} & BLOCKING) for fl in flags]
    value = board[f"{ds}/{metric}"].to_numpy(dtype=np.float64) if metric else np.full(len(board), np.nan)
    oriented = registry.info(metric).oriented(value) if metric else value
    out = pd.DataFrame({
        "zoo": zoo.name, "kind": zoo.kind, "board": zoo.board, "domain": zoo.domain,
        "held_out": zoo.held_out, "n_models": len(board), "n_images": _n_images(config),
        "model_id": board["model_id"].astype(str), "family": board.get("family", ""),
        "rank": board["rank"].to_numpy(dtype=np.float64), "blocked": blocked,
        "flags": flags.to_numpy(), "signal": board.get("signal", ""),
        "ordering_metric": metric, "ordering_value": value,
        "ordering_oriented": np.asarray(oriented, dtype=np.float64),
        "truth_metric": zoo.truth,
        "truth": board[f"{ds}/{zoo.truth}"].to_numpy(dtype=np.float64),
        "in_top_set": board["in_top_set"].astype(bool).to_numpy() if "in_top_set" in board else False,
    })
    for column in board.columns:
        head, _, name = column.partition("/")
        if head == ds and "/" not in name:
            out[name] = pd.to_numeric(board[column], errors="coerce").to_numpy(dtype=np.float64)
    return out


def _n_images(config: Any) -> int:
    from zoorank.store import Store
    from zoorank.store.layout import samples_table

    samples = Store(config.store).read_frame(samples_table(config.datasets[0].name))
    return int(len(samples))


def build(zoo: Zoo, force: bool = False) -> pd.DataFrame:
    folder = CACHE / "zoos" / zoo.name
    done = folder / "rows.parquet"
    if done.exists() and not force:
        return pd.read_parquet(done)
    start = time.perf_counter()
    rank_zoo(zoo, folder)
    rows = zoo_rows(zoo, folder)
    rows.to_parquet(done)
    (folder / "info.json").write_text(json.dumps({
        "zoo": zoo.name, "seconds": time.perf_counter() - start, "commit": _commit(),
        "date": time.strftime("%Y-%m-%d %H:%M UTC", time.gmtime())}, indent=1))
    return rows


def _commit() -> str:
    """The checkout's commit; ``ZOORANK_VALIDATION_COMMIT`` when the build runs from an exported
    copy of a commit (no git there)."""
    return os.environ.get("ZOORANK_VALIDATION_COMMIT") or harness.commit()


def write_table(zoos: list[Zoo], table: Path) -> pd.DataFrame | None:
    frames = [pd.read_parquet(CACHE / "zoos" / z.name / "rows.parquet") for z in zoos
              if (CACHE / "zoos" / z.name / "rows.parquet").exists()]
    if not frames:
        return None
    # the held-out flag is the list's, whatever it was when a zoo was built
    frame = pd.concat(frames, ignore_index=True)
    frame["held_out"] = frame["zoo"].isin(HELD_OUT)
    frame["held_out_2"] = frame["zoo"].isin(HELD_OUT_2)
    frame.to_parquet(CACHE / "validation_zoos.parquet")
    if table != CACHE / "validation_zoos.parquet":
        table.parent.mkdir(parents=True, exist_ok=True)
        frame.to_parquet(table)
    return frame


RESULTS_TITLE = "Validation zoos: labelled zoos of real checkpoints, ranked by the product"


def markdown(frame: pd.DataFrame | None, zoos: list[Zoo]) -> str:
    """``benchmarks/results/validation_zoos.md``'s body: every zoo, built or not."""
    built = {} if frame is None else dict(tuple(frame.groupby("zoo", sort=False)))
    rows = []
    for z in zoos:
        info_path = CACHE / "zoos" / z.name / "info.json"
        info = json.loads(info_path.read_text()) if info_path.exists() else {}
        sub = built.get(z.name)
        if sub is None:
            cells = ["—", "—", "—", "—", "not built"]
        else:
            t = sub["truth"].to_numpy(dtype=np.float64)
            best = sub["model_id"].iloc[int(np.nanargmax(t))]
            cells = [str(len(sub)), str(int(sub["n_images"].iloc[0])),
                     f"`{sub['ordering_metric'].iloc[0]}`",
                     f"`{best}` ({100 * np.nanmax(t):.1f}%)",
                     f"{info.get('seconds', float('nan')) / 60:.0f} min at `{info.get('commit', '?')}`"]
        rows.append([f"`{z.name}`", KINDS[z.kind], z.domain, z.description,
                     "heads' top-1" if z.board == "heads" else "kNN accuracy",
                     *cells[:3], cells[3],
                     "**held out**" if z.held_out else
                     "**held out (protocol 2)**" if z.held_out_2 else "calibration",
                     cells[4]])
    n_built = len(built)
    kinds = sorted({KINDS[z.kind] for z in zoos if z.name in built})
    lines = [
        f"{n_built} of {len(zoos)} zoos built ({', '.join(kinds) or 'none'}), "
        f"{0 if frame is None else len(frame)} models; "
        f"{len([z for z in zoos if z.held_out])} held out of every choice of the shortlist's "
        f"protocol 1 and {len([z for z in zoos if z.held_out_2])} more, built later, of its "
        "protocol 2 (`benchmarks/zoos/held_out.md`: each list committed before its zoos were "
        "built).", "",
        "Build all (cached; a built zoo is skipped):", "", "```",
        "PYTHONPATH=. .venv/bin/python benchmarks/zoos/build_validation_zoos.py", "```", "",
        "One zoo: `--only NAME`; the list: `--list`; the table of the built zoos: "
        "`benchmarks/zoos/validation_zoos.parquet` (one row per zoo and model: the board's rank, "
        "the ordering metric and its value, every label-free value, the truth).", "",
        "Every zoo is a `zoorank` run config (`run.yaml` in the cache) taken through embed, score "
        "and rank with the label oracle on (kNN and linear probe on a stratified half of the "
        "ranked images each way) and the default metrics, four folds for the rank intervals and, "
        "on zoos of encoders, an augmented view of 128 × 4. The board is the product's: its order, "
        "its ordering metric (the heads' `nuclear_norm_accuracy` on a board of classifier heads, "
        "else the default primary metric, `rankme`) and its health flags. **Truth**: the heads' "
        "top-1 on all ranked images for a board of classifier heads, else the kNN oracle's "
        "accuracy (k = 20, on the oracle's test half).", "",
        harness_table(["zoo", "kind", "dataset / domain", "checkpoints", "truth", "models",
                       "images", "ordered by", "labels' best", "role", "build"], rows), ""]
    return "\n".join(lines)


def harness_table(header: list[str], rows: list[list[Any]]) -> str:
    return harness.table(header, rows, "l" * len(header))


def main(argv: list[str] | None = None) -> int:
    p = argparse.ArgumentParser(description=__doc__.split("\n\n")[0],
                                formatter_class=argparse.RawDescriptionHelpFormatter)
    p.add_argument("--only", nargs="+", metavar="NAME", help="build only these zoos")
    p.add_argument("--list", action="store_true", help="list the zoos and exit")
    p.add_argument("--force", action="store_true", help="rebuild the rows of the zoos given")
    p.add_argument("--table-only", action="store_true", help="only write the table of built zoos")
    p.add_argument("--table", type=Path, default=TABLE, help="where the table goes (default: "
                                                             "%(default)s)")
    p.add_argument("--markdown", type=Path, default=None,
                   help="also write the zoos' page (benchmarks/results/validation_zoos.md)")
    args = p.parse_args(argv)
    zoos = all_zoos()
    names = [z.name for z in zoos]
    assert HELD_OUT | HELD_OUT_2 <= set(names), sorted((HELD_OUT | HELD_OUT_2) - set(names))
    if args.list:
        for z in zoos:
            built = (CACHE / "zoos" / z.name / "rows.parquet").exists()
            role = "held out" if z.held_out else "held-2" if z.held_out_2 else ""
            print(f"{z.name:<28} {z.kind:<12} {z.board:<10} {role:<8} "
                  f"{'built' if built else '':<5} {z.domain}")
        return 0
    unknown = sorted(set(args.only or ()) - set(names))
    if unknown:
        raise SystemExit(f"--only: unknown zoo(s) {unknown}; zoos: {names}")
    todo = [z for z in zoos if not args.only or z.name in args.only]
    if not args.only:  # the zoos of the lead's CIFAR-10 classifiers last (trained elsewhere)
        todo.sort(key=lambda z: z.name.startswith(("cls-cifar10", "enc-cifar10")))
    else:
        todo.sort(key=lambda z: args.only.index(z.name))
    failed = []
    if not args.table_only:
        for zoo in todo:
            start = time.perf_counter()
            print(f"[{time.strftime('%H:%M:%S')}] {zoo.name}: building", flush=True)
            try:
                rows = build(zoo, force=args.force)
            except Exception as err:  # one zoo's failure is reported; the others go on
                traceback.print_exc()
                failed.append(f"{zoo.name}: {type(err).__name__}: {err}")
                continue
            print(f"[{time.strftime('%H:%M:%S')}] {zoo.name}: {len(rows)} models, "
                  f"{time.perf_counter() - start:.0f} s", flush=True)
    frame = write_table(zoos, args.table)
    print(f"table: {args.table} ({0 if frame is None else frame['zoo'].nunique()} zoos)")
    if args.markdown:
        harness.write_results(args.markdown, RESULTS_TITLE, markdown(frame, zoos))
    for line in failed:
        print(f"FAILED {line}")
    return 1 if failed else 0


if __name__ == "__main__":
    sys.exit(main())
