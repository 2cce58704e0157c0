"""Top-1 accuracy of the UvA CIFAR-10 classifiers as loaded by zoorank (issue 17).

Checks the module code of ``benchmarks/zoos/uva_models.py`` against the accuracy measured in
``../shared/zoos/uva_cifar10/README.md`` on the JPEG q75 copy of the CIFAR-10 test set: each model
is resolved and loaded through zoorank's own checkpoint path (the config of ``validate_uva.py``,
strict loading, the restricted unpickler where ``weights_only`` refuses), its features go through
the checkpoint's own final linear layer, and the argmax is compared with the label. Prints a
markdown table, never asserts::

    .venv/bin/python benchmarks/science/uva_accuracy.py --images 10000
"""

from __future__ import annotations

import argparse
import io
import sys
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parents[1]))  # benchmarks/: the harness
import harness
import numpy as np
import pyarrow.parquet as pq
import torch
import yaml
from harness import table, timed
from PIL import Image
from validate_uva import CIFAR, CLASSIFIER_NORM, config

#: top-1 % on the full 10k JPEG q75 test set, from ../shared/zoos/uva_cifar10/README.md
README_TOP1 = {"googlenet": 81.87, "resnet": 82.54, "resnetpreact": 82.22, "densenet": 81.28}


def images_and_labels(n: int) -> tuple[torch.Tensor, np.ndarray]:
    """The first ``n`` test rows as a normalised float tensor (N, 3, 32, 32) and their labels."""
    table = pq.read_table(CIFAR, columns=["image", "label"]).slice(0, n)
    pixels = np.stack([np.asarray(Image.open(io.BytesIO(b)).convert("RGB"))
                       for b in table.column("image").to_pylist()]).astype(np.float32) / 255.0
    mean = np.asarray(CLASSIFIER_NORM["mean"], np.float32)
    std = np.asarray(CLASSIFIER_NORM["std"], np.float32)
    x = torch.from_numpy(((pixels - mean) / std).transpose(0, 3, 1, 2).copy())
    return x, np.asarray(table.column("label").to_pylist())


def top1(model_id: str, x: torch.Tensor, labels: np.ndarray, out: Path) -> float:
    """Top-1 % of ``model_id`` (resolved and loaded by zoorank) on ``x``."""
    from zoorank.config.loading import load_config
    from zoorank.zoo import load_model, resolve_models

    path = out / "accuracy.yaml"
    path.write_text(yaml.safe_dump(config(out, len(labels), 1), sort_keys=False))
    (model,) = [m for m in resolve_models(load_config(path)) if m.model_id == model_id]
    extractor = load_model(model)
    head = extractor.model.output_net[-1]
    with torch.inference_mode():
        logits = torch.cat([head(extractor(b)) for b in x.split(500)])
    return float((logits.argmax(1).numpy() == labels).mean() * 100)


def main() -> None:
    p = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    p.add_argument("--images", type=int, default=10000)
    p.add_argument("--out", default="/tmp/zoorank-uva-accuracy")
    harness.results_option(p, "uva_accuracy")
    args = p.parse_args()
    out = Path(args.out)
    out.mkdir(parents=True, exist_ok=True)
    torch.set_num_threads(1)
    x, labels = images_and_labels(args.images)
    rows = []
    for model_id, ref in README_TOP1.items():
        acc, seconds = timed(top1, model_id, x, labels, out)
        rows.append([model_id, f"{acc:.2f}", f"{ref:.2f}", f"{seconds:.0f}"])
        print(f"{model_id}: top-1 {acc:.2f} % (README {ref:.2f} %)", flush=True)
    result = table(["model", f"top-1 % here ({len(labels)} images)", "README (10k)", "seconds"], rows)
    print(result)
    harness.write_results(args.markdown, "uva_accuracy — the UvA classifiers' top-1 as zoorank "
                          "loads them", result)


if __name__ == "__main__":
    main()
