"""A small store for the label tests (``zoorank ask`` / ``zoorank label``), written without Ray.

The dataset is real: the first ``n`` scikit-learn digits written as PNG images to a Parquet file
whose ``label`` column the config does **not** name (the case labels are asked for; the benchmark
``active_labels.py`` names it, to hide and reveal), with the class names in the config
(``classes``). The zoo's embeddings are made from the pixels, so which model is best is known by
construction and checked in the tests against a reference kNN on every label:

* ``pixels``: the 64 pixels themselves (the best);
* ``proj-8``: a seeded Gaussian projection to 8 dimensions (worse: information lost);
* ``proj-3``: a projection to 3 dimensions (much worse);
* ``noise``: Gaussian noise independent of the image (no information).

The manifest carries the fingerprints the catalog expects, so every reader takes the embeddings
as fresh; the truth (``digits.target``) is returned, never written where zoorank can read it.
"""

from __future__ import annotations

import io
import shutil
from pathlib import Path

import numpy as np
import pandas as pd
import pyarrow as pa
import pyarrow.parquet as pq
import yaml
from PIL import Image
from sklearn.datasets import load_digits

from zoorank.store import Store

MODELS = ("pixels", "proj-8", "proj-3", "noise")
CLASSES = [str(i) for i in range(10)]


def _png(img: np.ndarray) -> bytes:
    buf = io.BytesIO()
    Image.fromarray((img * 255 / 16).astype(np.uint8)).save(buf, format="PNG")
    return buf.getvalue()


#: a zoo of graded quality for benchmarks/science/active_labels.py: the pixels plus seeded Gaussian noise
#: of standard deviation σ (pixels are 0..16); 5-fold kNN accuracy on all 1797 digits falls from
#: 0.963 (σ 0) through 0.944, 0.927, 0.885, 0.807, 0.741 to 0.563 (σ 8): gaps of 2 to 8 pp.
GRADED_SIGMAS = (0, 2, 3, 4, 5, 6, 8)


def embeddings(n: int, zoo: str = "fixture") -> dict[str, np.ndarray]:
    X = load_digits().data[:n].astype(np.float64)
    if zoo == "graded":
        rng = np.random.default_rng(7)
        return {f"noise-{s}": X + s * rng.normal(size=X.shape) for s in GRADED_SIGMAS}
    return {
        "pixels": X,
        "proj-8": X @ np.random.default_rng(1).normal(size=(64, 8)),
        "proj-3": X @ np.random.default_rng(2).normal(size=(64, 3)),
        "noise": np.random.default_rng(3).normal(size=(n, 16)),
    }


def config_dict(root: str, data: str, n: int, label_column: str | None = None,
                zoo: str = "fixture") -> dict:
    labels = {"label_column": label_column} if label_column else {"classes": CLASSES}
    ids = list(embeddings(1, zoo))
    return {"store": root, "seed": 0,
            "datasets": [{"name": "digits", "source": "parquet", "path": data,
                          "image_column": "image", "limit": n, **labels}],
            "models": [{"id": m, "source": "python", "name": "fixtures:unused"} for m in ids],
            "metrics": ["rankme"],
            "oracle": {"knn": True, "linear_probe": False}}


def write_label_store(root, n: int = 300, label_column: str | None = None,
                      zoo: str = "fixture") -> tuple[dict, np.ndarray]:
    """Write the dataset and the store under ``root``; returns (config dict, true labels).
    ``label_column="label"``: the config reads the labels (the benchmark's truth)."""
    from zoorank.catalog import build_catalog
    from zoorank.config.loading import parse_config

    d = load_digits()
    data = f"{root}/digits.parquet"
    pq.write_table(pa.table({"image": pa.array([_png(im) for im in d.images[:n]],
                                               type=pa.binary()),
                             "label": pa.array(d.target[:n].astype(np.int64))}), data)
    cfg = config_dict(f"{root}/store", data, n, label_column, zoo)
    catalog = build_catalog(parse_config(cfg, "<labels fixture>"))
    store = Store(cfg["store"])
    ids = np.arange(n, dtype=np.int64)
    assert np.array_equal(catalog.indexes["digits"].sample_id, ids)
    manifest = []
    for model_id, Z in embeddings(n, zoo).items():
        store.write_shard("digits", "clean", model_id, 0, ids, np.zeros(n, np.int32),
                          Z.astype(np.float32))
        manifest.append({"dataset": "digits", "view": "clean", "model_id": model_id,
                         "fingerprint": catalog.entries[("digits", "clean", model_id)][0],
                         "status": "done", "error": None, "rows": n, "dim": Z.shape[1],
                         "seconds": 0.1, "bad_images": 0})
    store.update_manifest(manifest)
    return cfg, d.target[:n].astype(np.int64)


def copy_label_store(src, cfg: dict, dest) -> tuple[Path, dict]:
    """A copy of the store written by :func:`write_label_store` under ``src`` into ``dest/w``,
    with its config (pointing at the copy) at ``dest/run.yaml``: (config path, config dict)."""
    dest = Path(dest)
    shutil.copytree(src, dest / "w")
    cfg = {**cfg, "store": str(dest / "w" / "store"),
           "datasets": [{**cfg["datasets"][0], "path": str(dest / "w" / "digits.parquet")}]}
    path = dest / "run.yaml"
    path.write_text(yaml.safe_dump(cfg))
    return path, cfg


def reference_knn_accuracy(Z: np.ndarray, y: np.ndarray, k: int = 5) -> float:
    """10-fold cosine kNN accuracy on every label (scikit-learn): the oracle's best model."""
    from sklearn.model_selection import cross_val_score
    from sklearn.neighbors import KNeighborsClassifier

    U = Z / np.linalg.norm(Z, axis=1, keepdims=True)
    return float(cross_val_score(KNeighborsClassifier(k), U, y, cv=10).mean())


def frame_of(cfg: dict) -> pd.DataFrame:
    from zoorank.config.loading import parse_config
    from zoorank.labels.merge import labels_frame

    return labels_frame(parse_config(cfg, "<labels fixture>"))
