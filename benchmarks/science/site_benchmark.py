"""The public SITE benchmark (issue 24 item 5): the SFDA / LogME protocol, scripted for users who
have the weights and the datasets on disk.

11 torchvision ImageNet models (ResNet-34/50/101/152, DenseNet-121/169/201, MNASNet-1.0,
MobileNet-V2, GoogLeNet, Inception-v3 at 299 px) × 11 target datasets (Aircraft, Caltech101, Cars,
CIFAR-10/100, DTD, Flowers, Food, Pets, SUN397, VOC2007). Each model embeds each dataset's training
images (penultimate, pooled features; the weights' own inference transforms); every few-label score
of zoorank's registry (LogME, H-score, NLEEP, GBC, and whatever else is registered) scores the
features with the labels; each score's ranking of the 11 models is compared with the **published
fine-tune accuracies** by weighted Kendall τ (``scipy.stats.weightedtau``, hyperbolic weights,
the papers' measure). Every score is printed beside the **static baseline**: the models ranked
by their ImageNet top-1 alone, with no target data (mean weighted τ 0.654 in Singh, Hess &
Vanschoren 2025).

Nothing is downloaded. Weights are read from ``<torch-home>/checkpoints/<file>`` (the file names
torchvision itself caches, listed in ``benchmarks/data/site_published.json``); datasets from
torchvision's dataset roots under ``--data`` (``download=False``). When something is absent the
script says exactly what (file or folder expected, and torchvision's message), prints the static
baseline (which needs only the published figures) and exits 0.

    .venv/bin/python benchmarks/science/site_benchmark.py --data ~/datasets --torch-home ~/.cache/torch/hub
    .venv/bin/python benchmarks/science/site_benchmark.py --baseline-only     # the published figures alone

Cost: one forward pass of each model over each training set (about 1.2 M images × 11 models at the
full protocol; ``--samples N`` takes a seeded subset of N images per dataset), features cached
under ``--cache`` as ``<model>__<dataset>.npz``.
"""

from __future__ import annotations

import argparse
import json
import os
import sys
from collections.abc import Callable, Mapping, Sequence
from pathlib import Path
from typing import Any

sys.path.insert(0, str(Path(__file__).resolve().parents[1]))  # benchmarks/: the harness
import harness
import numpy as np
from scipy import stats

REPO = Path(__file__).resolve().parents[2]
PUBLISHED = REPO / "benchmarks" / "data" / "site_published.json"

#: dataset → (torchvision class, keyword arguments of its training split). Caltech101 and SUN397
#: have no official split in torchvision: the whole set (use ``--samples`` for a seeded subset).
DATASETS: dict[str, tuple[str, dict[str, Any]]] = {
    "aircraft": ("FGVCAircraft", {"split": "trainval"}),
    "caltech101": ("Caltech101", {"target_type": "category"}),
    "cars": ("StanfordCars", {"split": "train"}),
    "cifar10": ("CIFAR10", {"train": True}),
    "cifar100": ("CIFAR100", {"train": True}),
    "dtd": ("DTD", {"split": "train"}),
    "flowers": ("Flowers102", {"split": "train"}),
    "food": ("Food101", {"split": "train"}),
    "pets": ("OxfordIIITPet", {"split": "trainval"}),
    "sun397": ("SUN397", {}),
    "voc2007": ("VOCDetection", {"year": "2007", "image_set": "trainval"}),
}


# -- the evaluation path (offline: the published figures and a table of scores) ----------------


def load_published(path: Path = PUBLISHED) -> dict[str, Any]:
    """The committed facts: ``models`` (ImageNet top-1, params, GFLOPs, weight file) and
    ``finetune_accuracy`` (dataset → model → %), with their sources."""
    return json.loads(Path(path).read_text())


def weighted_tau(scores: Mapping[str, float], truth: Mapping[str, float]) -> float:
    """Weighted Kendall τ (``scipy.stats.weightedtau``: hyperbolic weigher, ranks from both
    sides averaged) between a score and the fine-tune accuracies over the models both have
    (finite); NaN with fewer than 2 models. The SFDA repository calls it the same way
    (``weightedtau(score, finetune_acc)``)."""
    common = [m for m in truth if m in scores and np.isfinite(scores[m])]
    if len(common) < 2:
        return float("nan")
    x = np.array([scores[m] for m in common], dtype=np.float64)
    y = np.array([truth[m] for m in common], dtype=np.float64)
    return float(stats.weightedtau(x, y).statistic)


def evaluate(scores: Mapping[str, Mapping[str, float]], published: Mapping[str, Any]
             ) -> dict[str, float]:
    """dataset → weighted τ of ``scores[dataset]`` (model → value) against the published
    fine-tune accuracies, for the datasets ``scores`` has."""
    truth = published["finetune_accuracy"]
    return {ds: weighted_tau(s, truth[ds]) for ds, s in scores.items() if ds in truth}


def static_baseline(published: Mapping[str, Any], prior: str = "imagenet_top1"
                    ) -> dict[str, float]:
    """dataset → weighted τ of ranking the models by a prior, higher is better, with no target
    data: ImageNet top-1 (the static baseline), ``num_params`` or ``gflops``."""
    values = {m: v[prior] for m, v in published["models"].items()}
    return evaluate({ds: values for ds in published["finetune_accuracy"]}, published)


def tau_table(columns: Mapping[str, Mapping[str, float]], datasets: Sequence[str]) -> str:
    """A Markdown table: one row per dataset and a mean row, one column per score."""
    rows = []
    for ds in [*datasets, "mean"]:
        cells = [ds]
        for col in columns.values():
            v = (np.nanmean([col.get(d, np.nan) for d in datasets]) if ds == "mean"
                 and any(np.isfinite(col.get(d, np.nan)) for d in datasets)
                 else col.get(ds, np.nan))
            cells.append("—" if not np.isfinite(v) else f"{v:.3f}")
        rows.append(cells)
    return harness.table(["dataset", *columns], rows)


# -- what is on disk ---------------------------------------------------------------------------


def missing_weights(published: Mapping[str, Any], torch_home: Path) -> dict[str, str]:
    """model → the weight file it needs that is absent (``<torch_home>/checkpoints/<file>``)."""
    out = {}
    for model, info in published["models"].items():
        path = torch_home / "checkpoints" / info["weights"]
        if not path.is_file():
            out[model] = str(path)
    return out


def open_dataset(name: str, root: Path, transform: Callable | None = None) -> Any:
    """The training split of ``name`` from torchvision's root under ``root`` (never downloads)."""
    import torchvision.datasets as tvd

    cls, kwargs = DATASETS[name]
    kwargs = {**kwargs, "download": False}
    return getattr(tvd, cls)(str(root), transform=transform, **kwargs)


def missing_datasets(root: Path, names: Sequence[str]) -> dict[str, str]:
    """dataset → why torchvision cannot open it under ``root`` (its own message)."""
    out = {}
    for name in names:
        try:
            open_dataset(name, root)
        except Exception as err:  # torchvision raises RuntimeError or FileNotFoundError
            cls = DATASETS[name][0]
            out[name] = f"torchvision.datasets.{cls}(root={root}): {type(err).__name__}: {err}"
    return out


# -- features and scores (only with weights and data) ------------------------------------------


def _label(name: str, target: Any) -> int:
    """The class of a sample; VOC2007 (multi-label detection) → the class of its largest object
    (a single-label reading of VOC for the few-label scores; the papers' loader is not public)."""
    if name != "voc2007":
        return int(target)
    objects = target["annotation"]["object"]
    objects = objects if isinstance(objects, list) else [objects]

    def area(o: dict) -> float:
        b = o["bndbox"]
        return (float(b["xmax"]) - float(b["xmin"])) * (float(b["ymax"]) - float(b["ymin"]))

    return VOC_CLASSES.index(max(objects, key=area)["name"])


VOC_CLASSES = ["aeroplane", "bicycle", "bird", "boat", "bottle", "bus", "car", "cat", "chair", "cow",
               "diningtable", "dog", "horse", "motorbike", "person", "pottedplant", "sheep", "sofa",
               "train", "tvmonitor"]


def build_model(name: str, published: Mapping[str, Any], torch_home: Path) -> tuple[Any, Any]:
    """(the model with its classifier replaced by identity, its inference transform), from the
    cached weight file (checked present first, so torchvision never downloads)."""
    import torch
    import torchvision.models as tvm

    torch.hub.set_dir(str(torch_home))
    enum_name, member = published["models"][name]["weights_enum"].split(".")
    weights = getattr(getattr(tvm, enum_name), member)
    model = getattr(tvm, name)(weights=weights).eval()
    head = "fc" if hasattr(model, "fc") else "classifier"
    setattr(model, head, torch.nn.Identity())
    return model, weights.transforms()


def features(model_name: str, dataset: str, args: argparse.Namespace,
             published: Mapping[str, Any]) -> tuple[np.ndarray, np.ndarray]:
    """(float32 features n × d, int64 labels) of a seeded subset (``--samples``) of the training
    split; cached under ``--cache``."""
    import torch

    cache = Path(args.cache) / f"{model_name}__{dataset}.npz"
    if cache.is_file():
        with np.load(cache) as f:
            return f["Z"], f["y"]
    model, transform = build_model(model_name, published, Path(args.torch_home))
    data = open_dataset(dataset, Path(args.data), transform)
    idx = np.arange(len(data))
    if args.samples and args.samples < len(idx):
        idx = np.sort(np.random.default_rng(args.seed).choice(idx, args.samples, replace=False))

    def collate(batch: list) -> tuple[Any, list]:
        return torch.stack([x.expand(3, -1, -1) for x, _ in batch]), [t for _, t in batch]

    loader = torch.utils.data.DataLoader(torch.utils.data.Subset(data, idx.tolist()),
                                         batch_size=args.batch_size, num_workers=args.workers,
                                         collate_fn=collate)
    device = "cuda" if torch.cuda.is_available() else "cpu"
    model = model.to(device)
    zs, ys = [], []
    with torch.inference_mode():
        for x, t in loader:
            zs.append(model(x.to(device)).float().cpu().numpy())
            ys += [_label(dataset, v) for v in t]
    Z, y = np.concatenate(zs).astype(np.float32), np.asarray(ys, dtype=np.int64)
    cache.parent.mkdir(parents=True, exist_ok=True)
    np.savez(cache, Z=Z, y=y)
    return Z, y


def score_functions(only: Sequence[str] | None) -> dict[str, Callable[..., float]]:
    """The registry's few-label scores (all, or those named)."""
    from zoorank.metrics import registry

    scores = registry.few_label_scores()
    if only:
        unknown = sorted(set(only) - set(scores))
        if unknown:
            raise SystemExit(f"--scores: unknown {unknown}; registered: {sorted(scores)}")
        scores = {k: scores[k] for k in only}
    return scores


def main(argv: Sequence[str] | None = None) -> int:
    p = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    p.add_argument("--data", default=os.environ.get("SITE_DATA", "data"),
                   help="root of the torchvision datasets (default $SITE_DATA or ./data)")
    p.add_argument("--torch-home", default=None,
                   help="torch hub directory holding checkpoints/<weight file> "
                        "(default: torch.hub.get_dir())")
    p.add_argument("--datasets", default=",".join(DATASETS), help="comma-separated subset")
    p.add_argument("--models", default="", help="comma-separated subset of the 11 (default: all; "
                   "τ over fewer models is not the protocol's)")
    p.add_argument("--scores", default="", help="comma-separated few-label scores (default: all)")
    p.add_argument("--samples", type=int, default=0, help="images per dataset (0: all)")
    p.add_argument("--seed", type=int, default=0)
    p.add_argument("--batch-size", type=int, default=64)
    p.add_argument("--workers", type=int, default=4)
    p.add_argument("--cache", default="/tmp/zoorank-site", help="feature cache directory")
    p.add_argument("--baseline-only", action="store_true",
                   help="print the static baseline from the published figures and stop")
    p.add_argument("--out", default=None, help="also write the Markdown result here")
    args = p.parse_args(argv)
    if args.torch_home is None:
        import torch

        args.torch_home = torch.hub.get_dir()
    published = load_published()
    datasets = [d for d in args.datasets.split(",") if d]
    unknown = sorted(set(datasets) - set(DATASETS))
    if unknown:
        print(f"--datasets: unknown {unknown}; known: {list(DATASETS)}", file=sys.stderr)
        return 2
    models = [m for m in args.models.split(",") if m] or list(published["models"])
    if sorted(set(models) - set(published["models"])):
        print(f"--models: unknown {sorted(set(models) - set(published['models']))}; known: "
              f"{list(published['models'])}", file=sys.stderr)
        return 2
    published = {**published, "models": {m: published["models"][m] for m in models}}
    baseline = static_baseline(published)
    quoted = published["published_mean_weighted_tau"]["imagenet_top1"]
    mean = float(np.mean([baseline[d] for d in datasets]))
    title = "SITE benchmark (SFDA protocol)"
    print(f"{title}, zoorank {harness.commit()}")
    print(f"static baseline (ImageNet top-1, no target data): mean weighted τ {mean:.3f} over "
          f"{len(datasets)} datasets; published {quoted:.3f} (Singh, Hess & Vanschoren 2025)")
    if args.baseline_only:
        # the other priors zoorank records (size, compute) as static baselines too
        result = tau_table({"imagenet_top1": baseline,
                        "num_params": static_baseline(published, "num_params"),
                        "gflops": static_baseline(published, "gflops")}, datasets)
        print(result)
        if args.out:
            harness.write_results(Path(args.out), f"{title}: static baselines", result)
        return 0
    weights = missing_weights(published, Path(args.torch_home))
    absent = missing_datasets(Path(args.data), datasets)
    if weights or absent:
        print("\nCannot run the protocol: missing inputs (nothing is downloaded).")
        for model, path in weights.items():
            print(f"  weights  {model:13s} {path}")
        for name, why in absent.items():
            print(f"  dataset  {name:13s} {why}")
        print(f"\n{len(weights)} of {len(published['models'])} weight files and {len(absent)} of "
              f"{len(datasets)} datasets missing. Weights: torchvision's IMAGENET1K_V1 files in "
              "<torch-home>/checkpoints/ (see benchmarks/data/site_published.json); datasets: "
              "torchvision roots under --data. The static baseline alone:")
        print(tau_table({"imagenet_top1": baseline}, datasets))
        return 0
    fns = score_functions([s for s in args.scores.split(",") if s])
    scores: dict[str, dict[str, dict[str, float]]] = {name: {} for name in fns}
    seconds: dict[str, float] = {name: 0.0 for name in fns}
    for ds in datasets:
        for model in published["models"]:
            Z, y = features(model, ds, args, published)
            for name, fn in fns.items():
                try:
                    value, took = harness.timed(fn, Z, y)
                    value = float(value)
                except ValueError as err:  # a degenerate input: recorded, never a silent NaN
                    print(f"  {name} on {model}/{ds}: {err}", file=sys.stderr)
                    value, took = float("nan"), 0.0
                seconds[name] += took
                scores[name].setdefault(ds, {})[model] = value
            print(f"  {ds:10s} {model:13s} n={len(y)} d={Z.shape[1]}", flush=True)
    columns = {"imagenet_top1": baseline, **{n: evaluate(s, published) for n, s in scores.items()}}
    lines = [tau_table(columns, datasets), ""]
    for name in fns:
        col = columns[name]
        m = float(np.nanmean([col[d] for d in datasets]))
        lines.append(f"{name:12s} mean weighted τ {m:.3f}  static baseline {mean:.3f}  "
                     f"difference {m - mean:+.3f}  ({seconds[name]:.1f} s scoring)")
    print("\n".join(lines))
    if args.out:
        harness.write_results(Path(args.out), title, "\n".join(lines))
    return 0


if __name__ == "__main__":
    sys.exit(main())
