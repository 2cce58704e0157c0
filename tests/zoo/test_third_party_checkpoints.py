"""The UvA CIFAR-10 checkpoints (``../shared/zoos/uva_cifar10``) load strictly into the module code
of ``benchmarks/zoos/uva_models.py`` through zoorank's own checkpoint path, and the classifiers' features
fed to each checkpoint's own linear head classify real CIFAR-10 test images (the zoo's README
measures 81-83 % top-1 on the JPEG q75 copy; the first 100 images (a fixed set, so the
result is deterministic) give a binomial standard error of ~4 pp,
so ≥ 70 % is a loose floor that a mis-wired block, a wrong BatchNorm order or a missing activation
would not reach: those drop to near chance, 10 %)."""

from __future__ import annotations

import io
from pathlib import Path

import numpy as np
import pytest
import torch

REPO = Path(__file__).resolve().parents[2]
ZOO = REPO.parent / "shared" / "zoos" / "uva_cifar10"
MEAN = np.asarray([0.49139968, 0.48215841, 0.44653091], np.float32)
STD = np.asarray([0.24703223, 0.24348513, 0.26158784], np.float32)
WIDTH = {"GoogleNet": 128, "DenseNet": 184, "ResNet": 64, "ResNetPreAct": 64}
FACTORY = {"GoogleNet": "googlenet", "DenseNet": "densenet", "ResNet": "resnet",
           "ResNetPreAct": "resnet_preact"}


@pytest.fixture(scope="module")
def cifar_batch(shared_data: Path) -> tuple[torch.Tensor, np.ndarray]:
    import pyarrow.parquet as pq
    from PIL import Image

    table = pq.read_table(shared_data / "cifar10" / "test.parquet", columns=["image", "label"])
    table = table.slice(0, 100)
    pixels = np.stack([np.asarray(Image.open(io.BytesIO(b)).convert("RGB"))
                       for b in table.column("image").to_pylist()]).astype(np.float32) / 255.0
    x = torch.from_numpy(((pixels - MEAN) / STD).transpose(0, 3, 1, 2).copy())
    return x, np.asarray(table.column("label").to_pylist())


def _load(name: str, tmp_path: Path, monkeypatch: pytest.MonkeyPatch):
    from zoorank.config.loading import parse_config
    from zoorank.zoo import load_model, resolve_models

    monkeypatch.syspath_prepend(str(REPO / "benchmarks" / "zoos"))
    if not ZOO.is_dir():
        pytest.skip(f"third-party zoo not found at {ZOO}")
    ckpt = ZOO / "classifiers" / f"{name}.ckpt"
    assert ckpt.is_file(), f"the zoo is at {ZOO} but its checkpoint {ckpt.name} is not"
    config = parse_config({
        "store": str(tmp_path / "store"),
        "datasets": [{"name": "d", "source": "sklearn_digits"}],
        "models": [{"id": name.lower(), "source": "python", "name": f"uva_models:{FACTORY[name]}",
                    "checkpoint": str(ckpt), "state_dict_prefix": "model.", "strict": True}],
        "metrics": ["rankme"]})
    (model,) = resolve_models(config)
    return load_model(model)


@pytest.mark.parametrize("name", sorted(WIDTH))
def test_uva_classifier_loads_strictly_and_classifies_cifar10(name, cifar_batch, tmp_path,
                                                              monkeypatch):
    x, labels = cifar_batch
    extractor = _load(name, tmp_path, monkeypatch)
    head = extractor.model.output_net[-1]
    with torch.inference_mode():
        features = extractor(x)
        accuracy = float((head(features).argmax(1).numpy() == labels).mean())
    assert features.shape == (len(labels), WIDTH[name])
    assert accuracy >= 0.70, f"{name}: top-1 {accuracy:.1%} on 100 CIFAR-10 test images"
