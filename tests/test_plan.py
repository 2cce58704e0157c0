"""``zoorank plan`` (zoorank.plan): the night's forward passes, counted from the config by hand,
and GPU-hours from a configured or measured throughput; nothing is written."""

from __future__ import annotations

import json

import pytest
import yaml

from zoorank.cli import main

#: 90 digits: the clean view covers all of them once, the augmented one 30 of them × 4
PER_MODEL = 90 * 1 + 30 * 4


def _config(tmp_path):
    data = {"store": str(tmp_path / "store"), "seed": 0,
            "datasets": [{"name": "digits", "source": "sklearn_digits", "limit": 90}],
            "models": [{"id": f"cnn-w{w}-{i}", "source": "python",
                        "name": "zoorank.tune.models:small_cnn", "model_kwargs": {"width": w},
                        "input_size": 8} for w in (8, 16) for i in range(w // 8)],
            "views": [{"name": "clean"}, {"name": "simclr", "samples": 30, "per_sample": 4}],
            "metrics": ["rankme"]}
    path = tmp_path / "cfg.yaml"
    path.write_text(yaml.safe_dump(data, sort_keys=False))
    return path


def test_plan_counts_images_models_views_and_gpu_hours_from_a_configured_throughput(
        tmp_path, capsys):
    path = _config(tmp_path)
    w8 = "python:zoorank.tune.models:small_cnn(width=8) @8px"
    assert main(["plan", str(path), "--json", "--throughput", "1000",
                 "--throughput", f"{w8}=50"]) == 0
    doc = json.loads(capsys.readouterr().out)
    assert doc["models"] == 3 and doc["images"] == {"digits": 90}
    assert doc["forward_passes"] == 3 * PER_MODEL
    rows = {r["architecture"]: r for r in doc["architectures"]}
    # the ARCH=N value for its architecture, the plain value for every other
    assert rows[w8]["models"] == 1 and rows[w8]["forward_passes"] == PER_MODEL
    w16 = w8.replace("width=8", "width=16")
    assert rows[w16]["models"] == 2 and rows[w16]["forward_passes"] == 2 * PER_MODEL
    assert all(r["throughput_source"] == "configured" for r in rows.values())
    assert (rows[w8]["images_per_s"], rows[w16]["images_per_s"]) == (50, 1000)
    assert doc["gpu_hours"] == pytest.approx(sum(
        r["forward_passes"] / r["images_per_s"] / 3600 for r in rows.values()))
    assert rows[w16]["gpu_hours"] == pytest.approx(2 * PER_MODEL / 1000 / 3600)
    assert not (tmp_path / "store").exists()  # nothing written


def test_plan_measures_a_cpu_forward_and_says_so(tmp_path, capsys):
    path = _config(tmp_path)
    assert main(["plan", str(path), "--gpu-speedup", "10"]) == 0
    out = capsys.readouterr().out
    assert "forward passes: 630 (images × models × views)" in out
    assert "views:          clean (every image × 1), simclr (30 images × 4)" in out
    assert "(measured)" in out and "--gpu-speedup 10 (an assumption" in out
    assert "an estimate" in out
    assert not (tmp_path / "store").exists()


def test_plan_refuses_a_throughput_that_is_not_a_rate(tmp_path, capsys):
    assert main(["plan", str(_config(tmp_path)), "--throughput", "fast"]) == 2
    assert "--throughput fast" in capsys.readouterr().err
