"""The SITE benchmark's evaluation path (benchmarks/science/site_benchmark.py), offline: from the published
figures alone it reproduces the ImageNet-top-1 static baseline, and it says what is missing."""

from __future__ import annotations

import sys
from pathlib import Path

import numpy as np
import pytest

sys.path.insert(0, str(Path(__file__).resolve().parents[2] / "benchmarks" / "science"))

import site_benchmark as site  # noqa: E402

MODELS = ["resnet34", "resnet50", "resnet101", "resnet152", "densenet121", "densenet169",
          "densenet201", "mnasnet1_0", "mobilenet_v2", "googlenet", "inception_v3"]


def reference_weighted_tau(x, y) -> float:
    """Vigna's weighted τ written out over all pairs (O(n²), for the test only): hyperbolic
    weights 1/(r+1) of the rank r (0 = best, by decreasing (x, y) lexicographic order), additive
    over a pair, ties counted as in τ-b; averaged over ranking by x and ranking by y."""
    x, y = np.asarray(x, float), np.asarray(y, float)
    n = len(x)

    def one(a, b):
        order = sorted(range(n), key=lambda i: (-a[i], -b[i]))
        r = np.empty(n)
        r[order] = np.arange(n)
        w = 1.0 / (r + 1)
        num = dx = dy = 0.0
        for i in range(n):
            for j in range(i + 1, n):
                sx, sy = np.sign(x[i] - x[j]), np.sign(y[i] - y[j])
                num += (w[i] + w[j]) * sx * sy
                dx += (w[i] + w[j]) * abs(sx)
                dy += (w[i] + w[j]) * abs(sy)
        return num / np.sqrt(dx * dy)

    return (one(x, y) + one(y, x)) / 2


def test_the_published_table_covers_the_protocol():
    pub = site.load_published()
    assert list(pub["models"]) == MODELS
    assert sorted(pub["finetune_accuracy"]) == sorted(site.DATASETS)
    for ds, acc in pub["finetune_accuracy"].items():
        assert sorted(acc) == sorted(MODELS), ds
        assert all(0 < v < 100 for v in acc.values())
    # spot values against the sources, read by hand
    assert pub["finetune_accuracy"]["aircraft"]["mnasnet1_0"] == 66.48
    assert pub["finetune_accuracy"]["voc2007"]["resnet152"] == 86.32
    assert pub["models"]["resnet50"]["imagenet_top1"] == 76.13
    assert pub["models"]["googlenet"]["imagenet_top1"] == 69.778


def test_static_baseline_per_dataset_equals_an_independent_weighted_tau():
    pub = site.load_published()
    baseline = site.static_baseline(pub)
    top1 = [pub["models"][m]["imagenet_top1"] for m in MODELS]
    size = [pub["models"][m]["num_params"] for m in MODELS]
    by_size = site.static_baseline(pub, "num_params")
    for ds, acc in pub["finetune_accuracy"].items():
        expected = reference_weighted_tau(top1, [acc[m] for m in MODELS])
        assert baseline[ds] == pytest.approx(expected, abs=1e-12), ds
        assert by_size[ds] == pytest.approx(reference_weighted_tau(size, [acc[m] for m in MODELS]),
                                            abs=1e-12), ds


def test_static_baseline_reproduces_the_published_mean():
    # Singh, Hess & Vanschoren (2025): mean weighted τ 0.654 for ImageNet top-1 over the 11 sets
    pub = site.load_published()
    mean = float(np.mean(list(site.static_baseline(pub).values())))
    assert round(mean, 3) == pub["published_mean_weighted_tau"]["imagenet_top1"] == 0.654


def test_a_perfect_score_has_tau_one_and_models_without_a_score_are_left_out():
    pub = site.load_published()
    truth = pub["finetune_accuracy"]
    scores = {"cars": dict(truth["cars"]), "dtd": {m: -v for m, v in truth["dtd"].items()}}
    scores["cars"]["googlenet"] = float("nan")
    got = site.evaluate(scores, pub)
    assert got["cars"] == pytest.approx(1.0) and got["dtd"] == pytest.approx(-1.0)
    assert np.isnan(site.weighted_tau({"resnet34": 1.0}, truth["cars"]))


def test_without_weights_or_data_it_names_what_is_missing_and_exits_0(tmp_path, capsys):
    (tmp_path / "hub" / "checkpoints").mkdir(parents=True)
    pub = site.load_published()
    present = pub["models"]["resnet34"]["weights"]
    (tmp_path / "hub" / "checkpoints" / present).write_bytes(b"")
    rc = site.main(["--data", str(tmp_path / "data"), "--torch-home", str(tmp_path / "hub"),
                    "--datasets", "dtd,cifar10"])
    out = capsys.readouterr().out
    assert rc == 0
    assert "10 of 11 weight files and 2 of 2 datasets missing" in out
    assert pub["models"]["resnet50"]["weights"] in out and present not in out
    assert "torchvision.datasets.DTD" in out and "torchvision.datasets.CIFAR10" in out
    assert "| mean |" in out


def test_an_unknown_dataset_is_an_input_error():
    assert site.main(["--datasets", "imagenet", "--baseline-only"]) == 2


@pytest.mark.slow  # ~10 s of CPU; 60-120 s wall on the shared 2-core machines
@pytest.mark.timeout(600)
def test_the_protocol_runs_from_local_files_and_scores_the_cached_features(tmp_path, capsys,
                                                                        shared_data):
    """The full path on a tiny Caltech101-layout root of real photos and two weight files in
    torchvision's cache layout (seeded random weights: the τ means nothing, the plumbing does):
    features are the pooled penultimate layer, each score is the registry's function on them."""
    import shutil

    import torch
    import torchvision.models as tvm

    from zoorank.metrics import h_score, logme

    photos = sorted((shared_data / "imagenet_sample").glob("*.JPEG"))
    assert len(photos) >= 12
    root = tmp_path / "data" / "caltech101" / "101_ObjectCategories"
    (root / "BACKGROUND_Google").mkdir(parents=True)  # in the real archive; torchvision drops it
    for i, photo in enumerate(photos[:12]):
        folder = root / f"class{i % 3}"
        folder.mkdir(parents=True, exist_ok=True)
        shutil.copy(photo, folder / f"image_{i // 3 + 1:04d}.jpg")  # torchvision's numbering
    pub = site.load_published()
    hub = tmp_path / "hub" / "checkpoints"
    hub.mkdir(parents=True)
    torch.manual_seed(0)
    for name in ("mobilenet_v2", "mnasnet1_0"):
        torch.save(getattr(tvm, name)(weights=None).state_dict(), hub / pub["models"][name]["weights"])
    cache = tmp_path / "cache"
    rc = site.main(["--data", str(tmp_path / "data"), "--torch-home", str(tmp_path / "hub"),
                    "--datasets", "caltech101", "--models", "mobilenet_v2,mnasnet1_0",
                    "--scores", "logme,h_score", "--cache", str(cache), "--workers", "0",
                    "--batch-size", "8"])
    out = capsys.readouterr().out
    assert rc == 0, out
    assert "Cannot run" not in out, out
    truth = pub["finetune_accuracy"]["caltech101"]
    values = {"logme": {}, "h_score": {}}
    for name in ("mobilenet_v2", "mnasnet1_0"):
        with np.load(cache / f"{name}__caltech101.npz") as f:
            Z, y = f["Z"], f["y"]
        assert Z.shape == (12, 1280)  # both end in a 1280-wide pooled layer
        np.testing.assert_array_equal(np.bincount(y), [4, 4, 4])
        values["logme"][name], values["h_score"][name] = logme(Z, y), h_score(Z, y)
    for score in ("logme", "h_score"):
        tau = site.weighted_tau(values[score], truth)
        assert f"{score:12s} mean weighted τ {tau:.3f}" in out
