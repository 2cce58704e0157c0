"""No secret leaves the process: planted secrets appear in no byte zoorank writes anywhere.

Three secrets, each holding ``/``, ``+`` and ``=`` (as AWS secrets do), are planted: one in the
environment (``AWS_SECRET_ACCESS_KEY`` of every process, Ray workers included), one in the store
URI's user-info and one in checkpoint URIs' user-info, on a loopback S3 (moto). A pipeline with a
failing entry (a corrupt checkpoint, its error naming the URI) and a succeeding one (a checkpoint
read from S3), one whose checkpoint URI cannot be parsed (pyarrow repeats the URI in its error) and
a tiny Tune search run as ``zoorank`` subprocesses with their own Ray; then every byte written is
searched for each secret, raw and percent-encoded: every object of the S3 buckets, the
subprocesses' stdout and stderr, and every file under ``RAY_TMPDIR`` (Ray's session logs) and the
test's directory.
"""

from __future__ import annotations

import os
import shutil
import subprocess
import sys
import tempfile
from pathlib import Path
from urllib.parse import quote

import pytest
import yaml

REPO = Path(__file__).resolve().parents[2]
SECRETS = {
    "env": "EnvS3cr3t/wJalrXUtn+FEMI/K7MDENG=bPxRfiCY==",
    "store": "St0reS3cr3t/Ab+Cd/Ef+Gh==",
    "checkpoint": "Ckpt/S3cr3t+Xy/Zw+Vu=",
}
FORMS = {name: {s, quote(s, safe=""), quote(s, safe="/")} for name, s in SECRETS.items()}


def _uri(s3_server, path: str, secret: str, *, encode: bool = True) -> str:
    s3_server.bucket(path.split("/", 1)[0])
    info = quote(secret, safe="") if encode else secret
    return f"s3://testing:{info}@{path}"  # the endpoint comes from AWS_ENDPOINT_URL


def _run(args: list[str], cwd: Path, env: dict[str, str], log: Path) -> int:
    with open(log, "wb") as out, open(log.with_suffix(".err"), "wb") as err:
        return subprocess.run([sys.executable, "-m", "zoorank", *args], cwd=cwd, env=env,
                              stdout=out, stderr=err, timeout=420).returncode


def _leaks(data: bytes) -> list[str]:
    return [name for name, forms in FORMS.items() if any(f.encode() in data for f in forms)]


@pytest.mark.timeout(1500)
def test_planted_secrets_appear_in_no_byte_written(tmp_path, s3_server):
    from safetensors.torch import save

    sys.path.insert(0, str(REPO / "tests" / "zoo"))
    from zoo_helpers import ARCH, backbone_state

    ckpts = s3_server.bucket("secret-ckpts").removeprefix("s3://")
    s3_server.client.put_object(Bucket=ckpts, Key="good.safetensors",
                                Body=save({k: v.contiguous() for k, v in
                                           backbone_state(seed=3).items()}))
    s3_server.client.put_object(Bucket=ckpts, Key="corrupt.pt", Body=b"PK\x03\x04 not a zip")

    ray_tmp = Path(tempfile.mkdtemp(prefix="zr-secrets-", dir="/tmp"))  # short: Ray's sockets
    env = dict(os.environ, PYTHONPATH=os.pathsep.join([str(REPO / "tests"), str(REPO)]),
               AWS_ACCESS_KEY_ID="testing", AWS_SECRET_ACCESS_KEY=SECRETS["env"],
               AWS_DEFAULT_REGION="us-east-1", AWS_ENDPOINT_URL=s3_server.endpoint_url,
               RAY_TMPDIR=str(ray_tmp), RAY_ENABLE_WINDOWS_OR_OSX_CLUSTER="0",
               RAY_USAGE_STATS_ENABLED="0", RAY_DATA_DISABLE_PROGRESS_BARS="1",
               HF_HUB_OFFLINE="1", TRANSFORMERS_OFFLINE="1")
    store = _uri(s3_server, "secret-store/run", SECRETS["store"])
    model = {"source": "timm", "name": ARCH, "input_size": 32}

    def config(name: str, models: list[dict]) -> Path:
        path = tmp_path / f"{name}.yaml"
        path.write_text(yaml.safe_dump({
            "store": store, "seed": 0, "metrics": ["rankme"], "models": models,
            "datasets": [{"name": "digits", "source": "sklearn_digits", "limit": 40}]}))
        return path

    corrupt = _uri(s3_server, f"{ckpts}/corrupt.pt", SECRETS["checkpoint"])
    good = _uri(s3_server, f"{ckpts}/good.safetensors", SECRETS["checkpoint"])
    unparseable = _uri(s3_server, f"{ckpts}/good.safetensors", SECRETS["checkpoint"],
                       encode=False)
    mixed = config("mixed", [{"id": "corrupt", **model, "checkpoint": corrupt},
                             {"id": "good", **model, "checkpoint": good}])
    bad_uri = config("bad-uri", [{"id": "bad", **model, "checkpoint": unparseable}])
    tune = tmp_path / "tune.yaml"
    tune.write_text(yaml.safe_dump({
        "store": store, "dataset": {"name": "digits", "source": "sklearn_digits", "limit": 64},
        "backbone": {"name": "small_cnn", "width": 8, "depth": 2}, "epochs": 1,
        "batch_size": 32, "proj_hidden": 16, "proj_dim": 8,
        "probe": {"samples": 32, "per_sample": 2}, "objective": {"metric": "rankme"},
        "space": {"method": {"grid": ["simclr"]}}, "search": {"name": "secret", "scheduler": "fifo"}}))

    try:
        codes = {name: _run(args, tmp_path, env, tmp_path / f"{name}.out") for name, args in [
            ("mixed", ["run", str(mixed)]),
            ("bad-uri", ["run", str(bad_uri)]), ("tune", ["tune", str(tune)])]}
        logs = {p.name: p.read_bytes() for p in tmp_path.glob("*.out")} | {
            p.name: p.read_bytes() for p in tmp_path.glob("*.err")}
        assert codes == {"mixed": 0, "bad-uri": 2, "tune": 0}, (
            codes, {k: v[-3000:].decode(errors="replace") for k, v in logs.items()
                    if k.endswith(".err")})

        # the runs did what they say, with the URIs redacted where they are named
        assert b"***@secret-ckpts/corrupt.pt" in logs["mixed.out"] + logs["mixed.err"]
        assert b"1 of 2 embeddings failed" in logs["mixed.out"]  # the corrupt entry, the good one
        assert b"***@secret-ckpts/good.safetensors" in logs["bad-uri.err"]
        # piped `zoorank tune` prints its own lines only (Ray Tune's experiment box and TensorBoard
        # hint only with --debug), none over 100 columns
        tune_out = logs["tune.out"].decode()
        assert "winner: " in tune_out and "Configuration for experiment" not in tune_out, tune_out
        assert "tensorboard" not in tune_out.lower(), tune_out
        assert max(map(len, tune_out.splitlines())) <= 100, tune_out

        written: dict[str, bytes] = dict(logs)
        client = s3_server.client
        for bucket in ("secret-store", ckpts):
            for page in client.get_paginator("list_objects_v2").paginate(Bucket=bucket):
                for obj in page.get("Contents", []):
                    body = client.get_object(Bucket=bucket, Key=obj["Key"])["Body"].read()
                    written[f"s3://{bucket}/{obj['Key']}"] = body
                    written[f"key s3://{bucket}/{obj['Key']}"] = obj["Key"].encode()
        assert any(k.startswith("s3://secret-store/run/manifest") for k in written)
        assert any("tune_config.json" in k for k in written)
        for root in (ray_tmp, tmp_path):
            for path in root.rglob("*"):
                if path.is_file() and not path.is_symlink() and path.suffix != ".yaml":
                    written[str(path)] = path.read_bytes()
        assert any("session_" in k and "/logs/" in k for k in written)

        leaks = {where: _leaks(data) for where, data in written.items() if _leaks(data)}
        assert not leaks, sorted(leaks.items())
    finally:
        shutil.rmtree(ray_tmp, ignore_errors=True)
