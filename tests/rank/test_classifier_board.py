"""Classifier heads through SCORE and RANK: a store of real classifiers' shards with a ``logits``
column (contract of issue 31), scored and ranked by the real stages.

The zoo: scikit-learn logistic regressions trained on real digits of graded quality (1000, 100 and
20 training images; one that sees only the top 24 pixels), and one encoder without a head. The
source set is the clean digits, the target the same digits with seeded Gaussian noise, written as
PNG images in a Parquet file. Each classifier's shards hold its pixels as the embedding and its
logits (the decision function on the images as stored), as EMBED writes them for a head.
"""

from __future__ import annotations

import io
import json

import numpy as np
import pyarrow as pa
import pyarrow.parquet as pq
import pytest
from PIL import Image
from sklearn.datasets import load_digits
from sklearn.linear_model import LogisticRegression

from zoorank.metrics.heads import classifier
from zoorank.store import Store
from zoorank.store.shards import embedding_table

N = 300
CLASSIFIERS = {"lr-1000": (1000, 64), "lr-100": (100, 64), "lr-20": (20, 64), "lr-top": (1000, 24)}


def _png(img: np.ndarray) -> bytes:
    buf = io.BytesIO()
    Image.fromarray(img).save(buf, format="PNG")
    return buf.getvalue()


def _images(noise: float) -> tuple[np.ndarray, np.ndarray]:
    """(N × 8 × 8 uint8 images, labels) of digits 0..N, with seeded Gaussian noise (in 0..255)."""
    d = load_digits()
    x = d.images[:N] * 255 / 16 + np.random.default_rng(7).normal(0, noise, size=(N, 8, 8))
    return np.clip(x, 0, 255).astype(np.uint8), d.target[:N].astype(np.int64)


def _heads() -> dict[str, LogisticRegression]:
    """Real classifiers, trained on digits N.. (never the evaluated images), pixels in 0..1."""
    d = load_digits()
    X, y = d.data[N:] / 16, d.target[N:]
    out = {}
    for name, (train, pixels) in CLASSIFIERS.items():
        # the first train/10 images of each class: every head has all ten outputs
        rows = np.concatenate([np.flatnonzero(y == c)[:train // 10] for c in range(10)])
        clf = LogisticRegression(max_iter=2000, C=1.0)
        out[name] = clf.fit(X[rows, :pixels], y[rows])
    return out


def _write_entry(store: Store, fps, dataset: str, model_id: str, Z: np.ndarray,
                 logits: np.ndarray | None) -> dict:
    ids = np.arange(N, dtype=np.int64)
    table = embedding_table(ids, np.zeros(N, np.int32), Z)
    if logits is not None:
        flat = pa.array(logits.astype(np.float32).reshape(-1), type=pa.float32())
        table = table.append_column("logits", pa.FixedSizeListArray.from_arrays(
            flat, logits.shape[1]))
    name = "part-000000-test.parquet"
    store.write_parquet(f"{store.embedding_dir(dataset, 'clean', model_id)}/{name}", table)
    return {"dataset": dataset, "view": "clean", "model_id": model_id,
            "fingerprint": fps[(dataset, "clean", model_id)], "status": "done", "error": None,
            "rows": N, "dim": Z.shape[1], "seconds": 0.1, "bad_images": 0, "shards": [name],
            "logit_dim": 0 if logits is None else logits.shape[1]}


def write_classifier_store(root: str, encoder: bool) -> tuple[dict, dict]:
    """The datasets, the shards, the manifest and the sample tables; (config dict, truth) where
    truth[model] = (target logits, target labels, source logits, source labels)."""
    from zoorank.catalog import build_catalog, samples_path
    from zoorank.config.loading import parse_config

    paths = {}
    images = {"digits_clean": _images(0.0), "digits_noisy": _images(60.0)}
    for ds, (x, y) in images.items():
        paths[ds] = f"{root}/{ds}.parquet"
        pq.write_table(pa.table({"image": pa.array([_png(im) for im in x], type=pa.binary()),
                                 "label": pa.array(y)}), paths[ds])
    models = [{"id": m, "source": "python", "name": "fixtures:unused"} for m in CLASSIFIERS]
    if encoder:
        models.append({"id": "encoder", "source": "python", "name": "fixtures:unused"})
    cfg = {"store": f"{root}/store", "seed": 0,
           "datasets": [{"name": ds, "source": "parquet", "path": p, "label_column": "label"}
                        for ds, p in paths.items()],
           "models": models, "metrics": ["rankme", "uniformity"], "source": "digits_clean",
           # the nuclear norm pinned: the board's values are checked against it (the default with
           # a source: set is COT, checked below)
           "rank": {"bootstrap": 50, "resamples": 200, "classifier_metric": "nuclear_norm_accuracy"}}
    config = parse_config(cfg)
    catalog = build_catalog(config)
    fps = {k: v[0] for k, v in catalog.entries.items()}
    store = Store(cfg["store"])
    heads = _heads()
    manifest, truth = [], {}
    for ds, (x, y) in images.items():
        store.replace_table(samples_path(ds), catalog.samples_frame(ds))  # as EMBED writes it
        pixels = x.reshape(N, 64).astype(np.float64) / 255
        for name, (_, width) in CLASSIFIERS.items():
            logits = heads[name].decision_function(pixels[:, :width])
            manifest.append(_write_entry(store, fps, ds, name, pixels.astype(np.float32), logits))
            truth.setdefault(name, {})[ds] = (logits, y)
        if encoder:
            Z = pixels @ np.random.default_rng(3).normal(size=(64, 16))
            manifest.append(_write_entry(store, fps, ds, "encoder", Z.astype(np.float32), None))
    store.update_manifest(manifest)
    return cfg, truth


@pytest.fixture(scope="module")
def classifier_zoo(tmp_path_factory, ray_session):
    from zoorank.config.loading import parse_config
    from zoorank.decide.leaderboard import read_leaderboard_settings
    from zoorank.rank import run_rank
    from zoorank.score import run_score

    root = str(tmp_path_factory.mktemp("classifier-store"))
    cfg, truth = write_classifier_store(root, encoder=False)
    config = parse_config(cfg)
    run_score(config)
    board = run_rank(config, show=False)
    store = Store(cfg["store"])
    return store, config, board, read_leaderboard_settings(store), truth


def test_score_writes_each_estimate_as_the_functions_compute_it(classifier_zoo):
    store, _, _, _, truth = classifier_zoo
    rows = store.read_metrics()
    rows = rows[rows["dataset"] == "digits_noisy"].set_index(["model_id", "metric"])["value"]
    for name in CLASSIFIERS:
        z, _ = truth[name]["digits_noisy"]
        zs, ys = truth[name]["digits_clean"]
        z32, zs32 = z.astype(np.float32), zs.astype(np.float32)  # as the shards store them
        assert rows[(name, "nuclear_norm_accuracy")] == pytest.approx(
            classifier.nuclear_norm_accuracy(z32), rel=1e-9)
        assert rows[(name, "average_confidence")] == pytest.approx(
            classifier.average_confidence(z32), rel=1e-9)
        assert rows[(name, "doc_accuracy")] == pytest.approx(
            classifier.doc_accuracy(z32, zs32, ys), rel=1e-9)
        assert rows[(name, "atc_accuracy")] == pytest.approx(
            classifier.atc_accuracy(z32, zs32, ys), rel=1e-9)
        assert rows[(name, "cot_accuracy")] == pytest.approx(
            classifier.cot_accuracy(z32, ys), rel=1e-6)
    preds = np.vstack([truth[m]["digits_noisy"][0].argmax(1) for m in sorted(CLASSIFIERS)])
    agree = classifier.consensus_agreement(preds, 10)
    for j, m in enumerate(sorted(CLASSIFIERS)):
        assert rows[(m, "consensus_agreement")] == pytest.approx(agree[j])


def test_the_oracle_of_a_classifier_is_its_heads_accuracy(classifier_zoo):
    _, _, board, settings, truth = classifier_zoo
    board = board.set_index("model_id")
    for name in CLASSIFIERS:
        z, y = truth[name]["digits_noisy"]
        # the accuracy written independently: argmax of the logits against the labels
        want = float(np.mean(np.argmax(z, axis=1) == y))
        assert board.loc[name, "digits_noisy/head_accuracy"] == pytest.approx(want)
    assert settings["decision"]["oracle_top_set_metric"] == "head_accuracy"
    assert "knn_accuracy" not in " ".join(board.columns)


def test_a_classifier_zoo_is_ranked_by_estimated_accuracy_with_intervals(classifier_zoo):
    _, config, board, settings, truth = classifier_zoo
    assert config.classifier_metric == "nuclear_norm_accuracy"
    unpinned = config.model_copy(update={"rank": config.rank.model_copy(
        update={"classifier_metric": None})})
    assert unpinned.classifier_metric == classifier.DEFAULT_CLASSIFIER_METRIC_WITH_SOURCE
    assert settings["primary_metric"] == {"digits_clean": "nuclear_norm_accuracy",
                                          "digits_noisy": "nuclear_norm_accuracy"}
    assert (board["signal"] == "head").all()
    noisy = board.set_index("model_id")["digits_noisy/nuclear_norm_accuracy"]
    clean = board.set_index("model_id")["digits_clean/nuclear_norm_accuracy"]
    # the aggregate of the two datasets' ranks by the estimate orders the board
    own = (noisy.rank(ascending=False) * clean.rank(ascending=False)).rank()
    assert list(board["model_id"]) == list(own.sort_values(kind="stable").index)
    assert (board["rank_low"] <= board["rank"]).all() and (board["rank"] <= board["rank_high"]).all()
    assert settings["decision"]["top_set_rule"] == "mcs"
    # on these graded heads the estimate's leader is the most accurate head under the shift
    acc = {m: np.mean(truth[m]["digits_noisy"][0].argmax(1) == truth[m]["digits_noisy"][1])
           for m in CLASSIFIERS}
    assert board["model_id"].iloc[0] == max(acc, key=acc.get)


def test_a_mixed_zoo_keeps_one_board_and_says_which_signal_ranked_each_row(tmp_path, ray_session):
    from zoorank.config.loading import parse_config
    from zoorank.decide.leaderboard import read_leaderboard_settings
    from zoorank.rank import run_rank
    from zoorank.score import run_score

    cfg, _ = write_classifier_store(str(tmp_path), encoder=True)
    config = parse_config(cfg)
    run_score(config)
    board = run_rank(config, show=False).set_index("model_id")
    settings = read_leaderboard_settings(Store(cfg["store"]))
    assert board.loc["encoder", "signal"] == "embedding"
    assert set(board.loc[list(CLASSIFIERS), "signal"]) == {"head"}
    emb = settings["primary_metric"]["digits_noisy"]
    assert settings["mixed_signals"]["digits_noisy"] == {
        "head": "nuclear_norm_accuracy", "embedding": emb, "head_models": list(CLASSIFIERS)}
    # within the classifiers the dataset's rank follows the estimate; the lone encoder is
    # the best (and worst) of its signal: place 1
    r = board["rank/digits_noisy"]
    est = board.loc[list(CLASSIFIERS), "digits_noisy/nuclear_norm_accuracy"]
    assert list(r.loc[list(CLASSIFIERS)].sort_values().index) == list(
        est.sort_values(ascending=False).index)
    assert r.loc["encoder"] == 1.0
    # the merged order has intervals from the same fold bootstrap (both signals resampled)
    assert settings["decision"]["top_set_rule"] == "mcs"
    assert ((board["rank_low"] <= board["rank"]) & (board["rank"] <= board["rank_high"])).all()
    # REPORT accepts the board (its rows' fingerprint covers the heads' accuracies too)
    from zoorank.report import run_report

    page = run_report(config)
    assert "nuclear_norm_accuracy" in open(page).read()
    assert json.loads(json.dumps(settings["ordered_by"]))  # one readable name per dataset


def _save_timm(path, seed: int) -> None:
    """A resnet10t CIFAR-10 classifier checkpoint (seeded weights, non-trivial BN statistics)."""
    import timm
    import torch
    from safetensors.torch import save_file

    torch.manual_seed(seed)
    net = timm.create_model("resnet10t", pretrained=False, num_classes=10).eval()
    with torch.no_grad():
        for m in net.modules():
            if isinstance(m, torch.nn.BatchNorm2d):
                m.running_mean.uniform_(-0.1, 0.1)
                m.running_var.uniform_(0.5, 1.5)
        net.fc.weight.mul_(1 + seed % 3)  # heads of different sharpness
    save_file({k: v.contiguous() for k, v in net.state_dict().items()}, str(path))


@pytest.mark.timeout(600)
def test_timm_classifiers_embedded_with_their_heads_are_ranked_by_estimated_accuracy(
        tmp_path, ray_session, shared_data):
    """EMBED → SCORE → RANK on real CIFAR-10 images with timm classifier checkpoints: the
    estimates are computed from the logits EMBED kept, the oracle is the heads' accuracy."""
    from zoorank.config.loading import parse_config
    from zoorank.decide.leaderboard import read_leaderboard_settings
    from zoorank.embed import run_embed
    from zoorank.rank import run_rank
    from zoorank.score import run_score

    geometry = {"input_size": 32, "interpolation": "bilinear", "crop_pct": 1.0}
    models = []
    for seed in (1, 2, 3):
        _save_timm(tmp_path / f"r10-{seed}.safetensors", seed)
        models.append({"id": f"r10-{seed}", "source": "timm", "name": "resnet10t",
                       "checkpoint": str(tmp_path / f"r10-{seed}.safetensors"), **geometry})
    cifar = str(shared_data / "cifar10" / "test.parquet")
    config = parse_config({
        "store": str(tmp_path / "store"),
        "datasets": [{"name": "target", "source": "parquet", "path": cifar, "limit": 48},
                     {"name": "val", "source": "parquet", "path": cifar, "label_column": "label",
                      "limit": 32}],
        "source": "val", "models": models, "metrics": ["uniformity"],
        "embed": {"batch_size": 16, "num_actors": 1, "device": "cpu"},
        "score": {"resample_folds": 4},
        "rank": {"bootstrap": 20, "resamples": 100, "classifier_metric": "nuclear_norm_accuracy"},
    })
    run_embed(config)
    run_score(config)
    board = run_rank(config, show=False).set_index("model_id")
    store = Store(config.store)
    settings = read_leaderboard_settings(store)
    manifest = store.read_manifest()
    assert set(manifest["logit_dim"]) == {10}
    metrics = store.read_metrics().set_index(["model_id", "dataset", "metric"])["value"]
    labels = store.read_frame("datasets/val/samples")
    for m in board.index:
        emb = store.read_embeddings("target", "clean", m)
        assert metrics[(m, "target", "nuclear_norm_accuracy")] == pytest.approx(
            classifier.nuclear_norm_accuracy(emb.logits), rel=1e-9)
        val = store.read_embeddings("val", "clean", m)
        y = labels.set_index("sample_id").loc[val.sample_id, "label"].to_numpy(np.int64)
        assert board.loc[m, "val/head_accuracy"] == pytest.approx(
            float(np.mean(val.logits.argmax(1) == y)))
        assert metrics[(m, "target", "atc_accuracy")] == pytest.approx(
            classifier.atc_accuracy(emb.logits, val.logits, y), rel=1e-9)
    assert settings["primary_metric"]["target"] == "nuclear_norm_accuracy"
    assert (board["signal"] == "head").all()
    est = board["target/nuclear_norm_accuracy"]
    assert list(board["rank/target"].sort_values(kind="stable").index) == list(
        est.sort_values(ascending=False, kind="stable").index)
