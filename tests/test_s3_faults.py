"""Storage faults: a run on a loopback S3 behind a fault-injecting proxy (``s3_faults``).

With 10% of the requests failing (500s, reset connections) or stalling, the store and the
checkpoints are read and written through retries with backoff, and the run gives exactly the
embeddings and metrics of the same run without faults. A permanently failing object is never
skipped silently: the run stops on it with its name (credentials removed) and the reason.
"""

from __future__ import annotations

import numpy as np
import pandas as pd
import pytest
from s3_faults import FaultyProxy
from safetensors.torch import save

from zoorank.config.loading import parse_config
from zoorank.errors import ZoorankError
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


def _config(endpoint: str, store: str, bucket: str):
    return parse_config({
        "store": _uri(endpoint, store), "seed": 0, "metrics": ["rankme", "alpha_req"],
        "datasets": [{"name": "digits", "source": "sklearn_digits", "limit": 60}],
        "models": [{"id": m, "source": "timm", "name": ARCH, "input_size": 32,
                    "checkpoint": _uri(endpoint, f"{bucket}/{m}.safetensors")} for m in MODELS],
    })


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


@pytest.mark.timeout(300)
def test_a_permanently_failing_checkpoint_is_named_with_its_reason(ray_session, s3_server,
                                                                   monkeypatch):
    from zoorank.zoo import resolve_models

    # 3 attempts per request instead of 10: giving up takes 75 ms of backoff, not 13 s per request
    monkeypatch.setenv("ZOORANK_S3_MAX_ATTEMPTS", "3")

    bucket = s3_server.bucket("fault-broken").removeprefix("s3://")
    for name, data in _states().items():
        s3_server.client.put_object(Bucket=bucket, Key=f"{name}.safetensors", Body=data)
    s3_server.bucket("fault-stores")
    with FaultyProxy(s3_server.host, s3_server.port, broken=("/b.safetensors",)) as proxy:
        config = _config(proxy.endpoint, "fault-stores/broken", bucket)
        with pytest.raises(ZoorankError) as err:
            resolve_models(config)
    message = str(err.value)
    assert "fault-broken/b.safetensors" in message and "testing:testing" not in message
    assert "INTERNAL" in message.upper() or "500" in message
    # retried before giving up: every request to it was tried exactly the 3 attempts set above
    assert proxy.counts["broken"] >= 3 and proxy.counts["broken"] % 3 == 0, proxy.counts
