"""Checkpoints and zoo files on S3 (a moto server on loopback, credentials in the environment)."""

from __future__ import annotations

import argparse
import hashlib

import torch
import yaml
from zoo_helpers import ARCH, backbone_state, features, reference_features, resolve, save_safetensors

from zoorank.store import Store
from zoorank.store.layout import DIGESTS

X = torch.randn(3, 3, 32, 32, generator=torch.Generator().manual_seed(2))


def _upload(s3_server, bucket: str, key: str, data: bytes) -> str:
    s3_server.client.put_object(Bucket=bucket, Key=key, Body=data)
    return f"s3://{bucket}/{key}"


def test_s3_glob_gives_the_ids_fingerprints_and_weights_of_the_same_files_on_disk(
    tmp_path, s3_server, s3_env
):
    s3_server.bucket("zoo-ckpts")
    states = {run: backbone_state(seed) for seed, run in enumerate(["lr0.1-s0", "lr0.3-s1"])}
    for run, state in states.items():
        path = save_safetensors(state, tmp_path / "runs" / run / "last.safetensors")
        _upload(s3_server, "zoo-ckpts", f"sweep/runs/{run}/last.safetensors", path.read_bytes())

    spec = {"id": "r", "source": "timm", "name": ARCH, "input_size": 32}
    Store(tmp_path / "store-remote")  # an existing store keeps the digest cache
    local = resolve({**spec, "checkpoint": str(tmp_path / "runs" / "*" / "last.safetensors")},
                    store=tmp_path / "store-local")
    remote = resolve({**spec, "checkpoint": "s3://zoo-ckpts/sweep/runs/*/last.safetensors"},
                     store=tmp_path / "store-remote")

    assert [m.model_id for m in remote] == [m.model_id for m in local] == [
        "r-lr0.1-s0-last", "r-lr0.3-s1-last"]
    assert [m.fingerprint for m in remote] == [m.fingerprint for m in local]
    assert remote[0].spec.checkpoint == "s3://zoo-ckpts/sweep/runs/lr0.1-s0/last.safetensors"
    for model_local, model_remote, state in zip(local, remote, states.values(), strict=True):
        expected = hashlib.sha256((tmp_path / "runs" / model_local.model_id.split("-", 1)[1]
                                   .removesuffix("-last") / "last.safetensors").read_bytes())
        assert model_remote.checkpoint_digest == expected.hexdigest()
        assert torch.equal(features(model_remote, X), reference_features(state, X))
        assert torch.equal(features(model_remote, X), features(model_local, X))

    # the digests are kept in the store, keyed by the URI, for the next stage
    cached = Store(tmp_path / "store-remote").read_frame(DIGESTS).to_dict("records")
    assert {(r["uri"], r["digest"]) for r in cached} == {
        (m.spec.checkpoint, m.checkpoint_digest) for m in remote}


def test_a_pickled_checkpoint_with_metadata_loads_from_s3(tmp_path, s3_server, s3_env):
    s3_server.bucket("zoo-pickles")
    state = backbone_state(seed=5)
    path = tmp_path / "last.ckpt"
    torch.save({"state_dict": {f"backbone.{k}": v for k, v in state.items()},
                "hyper_parameters": {"args": argparse.Namespace(lr=0.1)}}, path)
    uri = _upload(s3_server, "zoo-pickles", "solo/last.ckpt", path.read_bytes())
    (model,) = resolve({"id": "solo", "source": "timm", "name": ARCH, "checkpoint": uri,
                        "state_dict_prefix": "solo-learn"}, store=tmp_path / "store")
    assert torch.equal(features(model, X), reference_features(state, X))


def test_from_tune_zoo_file_on_s3_rebases_relative_checkpoints(tmp_path, s3_server, s3_env):
    s3_server.bucket("zoo-tune")
    state = backbone_state(seed=1)
    path = save_safetensors(state, tmp_path / "t0.safetensors")
    _upload(s3_server, "zoo-tune", "exp/trials/t0.safetensors", path.read_bytes())
    zoo = [{"id": "t0", "source": "timm", "name": ARCH, "checkpoint": "trials/t0.safetensors"}]
    _upload(s3_server, "zoo-tune", "exp/zoo.yaml", yaml.safe_dump(zoo).encode())

    (model,) = resolve({"from_tune": "s3://zoo-tune/exp"}, store=tmp_path / "store")
    assert model.model_id == "t0"
    assert model.spec.checkpoint == "s3://zoo-tune/exp/trials/t0.safetensors"
    assert torch.equal(features(model, X), reference_features(state, X))
