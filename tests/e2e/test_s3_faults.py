"""Storage faults: a run on a loopback S3 behind a fault-injecting proxy (``s3_faults``).

With 10% of the requests failing (500s, reset connections) or stalling, the store and the
checkpoints are read and written through retries with backoff, and the run gives exactly the
embeddings and metrics of the same run without faults. A permanently failing checkpoint is never
skipped silently: its entry is failed with the object's name (credentials removed) and the store's
error, every other model is embedded, scored and ranked on the same samples, and the next run
embeds only that model once the object can be read.
"""

from __future__ import annotations

import numpy as np
import pandas as pd
import pytest
from s3_faults import FaultyProxy
from safetensors.torch import save

from zoorank.config.loading import parse_config
from zoorank.store import Store

ARCH = "test_resnet"
MODELS = ("a", "b")


def _states():
    import timm
    import torch

    out = {}
    for seed, name in enumerate(MODELS):
        torch.manual_seed(seed)
        model = timm.create_model(ARCH, pretrained=False, num_classes=0)
        out[name] = save({k: v.contiguous() for k, v in model.state_dict().items()})
    return out


def _uri(endpoint: str, path: str) -> str:
    return (f"s3://testing:testing@{path}?endpoint_override={endpoint}&scheme=http"
            "&region=us-east-1")


def _raw_config(endpoint: str, store: str, bucket: str) -> dict:
    return {
        "store": _uri(endpoint, store), "seed": 0, "metrics": ["rankme", "alpha_req"],
        "datasets": [{"name": "digits", "source": "sklearn_digits", "limit": 60}],
        "models": [{"id": m, "source": "timm", "name": ARCH, "input_size": 32,
                    "checkpoint": _uri(endpoint, f"{bucket}/{m}.safetensors")} for m in MODELS],
    }


def _config(endpoint: str, store: str, bucket: str):
    return parse_config(_raw_config(endpoint, store, bucket))


def _run(config):
    from zoorank.pipeline import run_embed, run_score

    run_embed(config)
    run_score(config)
    store = Store(config.store)
    embeddings = {m: store.read_embeddings("digits", "clean", m) for m in MODELS}
    metrics = store.read_metrics().sort_values(["model_id", "metric"]).reset_index(drop=True)
    return store.read_manifest(), embeddings, metrics


@pytest.mark.timeout(900)
def test_a_run_with_10_percent_faulty_requests_equals_the_run_without(ray_session, s3_server):
    bucket = s3_server.bucket("fault-ckpts").removeprefix("s3://")
    for name, data in _states().items():
        s3_server.client.put_object(Bucket=bucket, Key=f"{name}.safetensors", Body=data)
    s3_server.bucket("fault-stores")
    direct = f"{s3_server.host}:{s3_server.port}"
    clean_manifest, clean_emb, clean_metrics = _run(
        _config(direct, "fault-stores/clean", bucket))

    # a stall well under the request timeout: answered late, not retried (0.3 s keeps it cheap)
    with FaultyProxy(s3_server.host, s3_server.port, rate=0.1, stall_s=0.3, seed=3) as proxy:
        manifest, emb, metrics = _run(_config(proxy.endpoint, "fault-stores/faulty", bucket))
    assert proxy.counts["500"] and proxy.counts["reset"] and proxy.counts["slow"], proxy.counts

    assert set(manifest["status"]) == set(clean_manifest["status"]) == {"done"}
    assert manifest.set_index("model_id")["rows"].to_dict() == \
        clean_manifest.set_index("model_id")["rows"].to_dict()
    for m in MODELS:
        np.testing.assert_array_equal(emb[m].sample_id, clean_emb[m].sample_id)
        np.testing.assert_array_equal(emb[m].embedding, clean_emb[m].embedding)
    cols = ["model_id", "dataset", "metric", "value"]
    pd.testing.assert_frame_equal(metrics[cols], clean_metrics[cols])


@pytest.mark.timeout(600)
def test_a_permanently_failing_checkpoint_is_a_failed_entry_and_the_others_go_on(
        ray_session, s3_server, tmp_path, monkeypatch):
    import yaml

    from zoorank.cli import main
    from zoorank.store.layout import FAILED, LEADERBOARD

    # 3 attempts per request instead of 10: giving up takes 75 ms of backoff, not 13 s per request
    monkeypatch.setenv("ZOORANK_S3_MAX_ATTEMPTS", "3")

    bucket = s3_server.bucket("fault-broken").removeprefix("s3://")
    for name, data in _states().items():
        s3_server.client.put_object(Bucket=bucket, Key=f"{name}.safetensors", Body=data)
    s3_server.bucket("fault-stores")
    with FaultyProxy(s3_server.host, s3_server.port, broken=("/b.safetensors",)) as proxy:
        raw = _raw_config(proxy.endpoint, "fault-stores/broken", bucket)
        path = tmp_path / "run.yaml"
        path.write_text(yaml.safe_dump(raw))
        assert main(["run", str(path)]) == 0  # some models failed: still exit 0 (README)
        # retried before giving up: every request to it was tried exactly the 3 attempts set above
        assert proxy.counts["broken"] >= 3 and proxy.counts["broken"] % 3 == 0, proxy.counts
        store = Store(parse_config(raw).store)
        manifest = store.read_manifest().set_index("model_id")
        failed = store.read_frame(FAILED)
        metrics = store.read_metrics()
        board = store.read_frame(LEADERBOARD)
        a_before = store.read_embeddings("digits", "clean", "a")

        # the failed entry: named, with the store's error, no secret
        assert manifest.loc["b", "status"] == "failed"
        assert list(failed["model_id"]) == ["b"]
        for reason in (failed["error"].iloc[0], manifest.loc["b", "error"]):
            assert "fault-broken/b.safetensors" in reason, reason
            assert "INTERNAL" in reason.upper() or "500" in reason, reason
            assert "testing:testing" not in reason and "testing@" not in reason, reason
        # every other model embedded, scored and ranked on the dataset's samples
        assert manifest.loc["a", "status"] == "done" and manifest.loc["a", "rows"] == 60
        assert set(metrics["model_id"]) == {"a"} and metrics["value"].notna().all()
        assert board.set_index("model_id").loc["a", "rank"] == 1

        # the object is readable again: the next run embeds b only, on a's samples
        from zoorank.pipeline import run_embed, run_score

        proxy.broken = ()
        embedded = run_embed(parse_config(raw))
        run_score(parse_config(raw))
        assert embedded.attrs["pipelines"] and {
            p["models"] for p in embedded.attrs["pipelines"]} == {1}  # b alone went to a worker
        after = store.read_manifest().set_index("model_id")
        a_after = store.read_embeddings("digits", "clean", "a")
        b = store.read_embeddings("digits", "clean", "b")
        scored = set(store.read_metrics()["model_id"])
    assert set(after["status"]) == {"done"}
    assert after.loc["a", "fingerprint"] == manifest.loc["a", "fingerprint"]
    assert after.loc["a", "shards"] == manifest.loc["a", "shards"]  # not re-embedded
    np.testing.assert_array_equal(a_after.embedding, a_before.embedding)
    np.testing.assert_array_equal(np.sort(b.sample_id), np.sort(a_after.sample_id))
    assert scored == {"a", "b"}


@pytest.mark.timeout(120)
def test_a_config_pointing_at_nothing_is_still_a_config_error(s3_server):
    from zoorank.errors import ConfigError
    from zoorank.zoo import resolve_models

    bucket = s3_server.bucket("fault-missing").removeprefix("s3://")
    s3_server.bucket("fault-stores")
    direct = f"{s3_server.host}:{s3_server.port}"
    with pytest.raises(ConfigError, match="not found") as err:
        resolve_models(_config(direct, "fault-stores/missing", bucket))
    assert "fault-missing/a.safetensors" in str(err.value)
    assert "testing:testing" not in str(err.value)
