"""``zoorank label`` records the few-label pick in the store's ``decision.json``, on a real classifier
zoo: the four UvA CIFAR-10 classifiers (``../shared/zoos/uva_cifar10``, loaded strictly through
zoorank's own checkpoint path with the module code of ``benchmarks/zoos/uva_models.py``) on the first
300 CIFAR-10 test images of ``../shared/data``.

The store is written without Ray, as ``test_labels_heads`` does: each model's features and its
own linear head's logits on the 300 images, in the clean shards with the manifest's fingerprints;
the dataset's Parquet file has no label column (the labels come back through ``zoorank label``).
``decision.json`` is created first through :func:`zoorank.decide.verdict.write_decision`, as RANK
writes it. With every label of the pool given back, the recorded pick must be within 0.5 pp of
the most accurate model, each model's accuracy computed here from the labels and the logits read
back from the store.
"""

from __future__ import annotations

import csv
import io
import json
from pathlib import Path

import numpy as np
import pyarrow as pa
import pyarrow.parquet as pq
import pytest
import yaml

REPO = Path(__file__).resolve().parents[2]
ZOO = REPO.parent / "shared" / "zoos" / "uva_cifar10" / "classifiers"
N = 300
CLASSES = ["airplane", "automobile", "bird", "cat", "deer", "dog", "frog", "horse", "ship", "truck"]
NORM = {"mean": [0.49139968, 0.48215841, 0.44653091], "std": [0.24703223, 0.24348513, 0.26158784]}
MODELS = {"resnet": ("ResNet", "resnet"), "resnetpreact": ("ResNetPreAct", "resnet_preact"),
          "googlenet": ("GoogleNet", "googlenet"), "densenet": ("DenseNet", "densenet")}


@pytest.fixture
def uva_store(tmp_path, shared_data, monkeypatch):
    """(config path, store path, truth (N,)) of the UvA zoo's store on the first N images."""
    import torch
    from PIL import Image

    from zoorank.catalog import build_catalog
    from zoorank.config.loading import parse_config
    from zoorank.store import Store
    from zoorank.zoo import load_model, resolve_models

    for name, _ in MODELS.values():
        if not (ZOO / f"{name}.ckpt").is_file():
            pytest.skip(f"third-party checkpoint not found at {ZOO / name}.ckpt")
    monkeypatch.syspath_prepend(str(REPO / "benchmarks" / "zoos"))
    table = pq.read_table(shared_data / "cifar10" / "test.parquet",
                          columns=["image", "label"]).slice(0, N)
    images = table.column("image").to_pylist()
    truth = np.asarray(table.column("label").to_pylist(), dtype=np.int64)
    data = str(tmp_path / "cifar.parquet")
    pq.write_table(pa.table({"image": pa.array(images, type=pa.binary())}), data)
    cfg = {"store": str(tmp_path / "store"), "seed": 0,
           "datasets": [{"name": "cifar", "source": "parquet", "path": data,
                         "image_column": "image", "limit": N, "classes": CLASSES}],
           "models": [{"id": model_id, "source": "python", "name": f"uva_models:{fn}",
                       "checkpoint": str(ZOO / f"{name}.ckpt"), "state_dict_prefix": "model.",
                       "strict": True, "input_size": 32, "crop_pct": 1.0, **NORM}
                      for model_id, (name, fn) in MODELS.items()],
           "metrics": ["rankme"], "oracle": {"knn": True, "linear_probe": False}}
    config = parse_config(cfg, "<uva fixture>")
    catalog = build_catalog(config)
    pixels = np.stack([np.asarray(Image.open(io.BytesIO(b)).convert("RGB"))
                       for b in images]).astype(np.float32) / 255.0
    x = torch.from_numpy(((pixels - np.asarray(NORM["mean"], np.float32))
                          / np.asarray(NORM["std"], np.float32)).transpose(0, 3, 1, 2).copy())
    store = Store(cfg["store"])
    ids = np.arange(N, dtype=np.int64)
    manifest = []
    torch.set_num_threads(1)
    for model in resolve_models(config):
        extractor = load_model(model)
        with torch.inference_mode():
            features = extractor(x)
            logits = extractor.model.output_net[-1](features)
        store.write_shard("cifar", "clean", model.model_id, 0, ids, np.zeros(N, np.int32),
                          features.numpy().astype(np.float32),
                          logits=logits.numpy().astype(np.float32))
        manifest.append({"dataset": "cifar", "view": "clean", "model_id": model.model_id,
                         "fingerprint": catalog.entries[("cifar", "clean", model.model_id)][0],
                         "status": "done", "error": None, "rows": N,
                         "dim": int(features.shape[1]), "seconds": 0.1, "bad_images": 0,
                         "logit_dim": len(CLASSES)})
    store.update_manifest(manifest)
    path = tmp_path / "run.yaml"
    path.write_text(yaml.safe_dump(cfg))
    return path, tmp_path / "store", truth


def test_label_with_every_label_records_the_most_accurate_model_in_decision_json(uva_store,
                                                                                 tmp_path):
    from zoorank.cli import main
    from zoorank.decide.verdict import KEYS, SCHEMA_VERSION, read_decision, write_decision
    from zoorank.store import Store

    path, store_path, truth = uva_store
    store = Store(str(store_path))
    # RANK writes decision.json (its label-free pick); until it does on this branch, as RANK will
    if read_decision(store) is None:
        write_decision(store, {**dict.fromkeys(KEYS), "schema_version": SCHEMA_VERSION,
                               "pick": None, "few_label": {}})
    answers = tmp_path / "answers.csv"
    with open(answers, "w", newline="") as f:
        w = csv.writer(f)
        w.writerow(["sample_id", "label", "source"])
        w.writerows([(s, CLASSES[truth[s]], "") for s in range(N)])
    assert main(["label", str(path), str(answers), "--no-rank"]) == 0

    accuracy = {}
    for model_id in MODELS:
        emb = store.read_embeddings("cifar", "clean", model_id)
        order = np.argsort(emb.sample_id)
        accuracy[model_id] = float((emb.logits[order].argmax(axis=1) == truth).mean())
    assert max(accuracy.values()) > 0.7  # real, well-trained heads (the zoo's README: 81-83 %)
    few = json.loads((store_path / "decision.json").read_text())["few_label"]["cifar"]
    assert few["labels"] == N
    assert accuracy[few["model_id"]] >= max(accuracy.values()) - 0.005
    assert few["accuracy_on_labels"] == pytest.approx(accuracy[few["model_id"]])
    assert few["posterior"].startswith("the heads' top-1 accuracy on the labelled images")
    # with every label, p(best | labels) is the models' observed accuracy: ties within 0.5 pp share
    tied = [m for m, a in accuracy.items() if a >= max(accuracy.values()) - 0.005]
    assert few["p_best"] == pytest.approx(1 / len(tied))
    assert few["stop"] is True and few["updated"]
