"""Shared fixtures: one local Ray per test session (loopback only), real data locations."""

from __future__ import annotations

import os
from pathlib import Path

import zoorank.runtime  # noqa: F401  (sets the loopback/quiet Ray environment before Ray starts)

os.environ.setdefault("RAY_DATA_DISABLE_PROGRESS_BARS", "1")
os.environ.setdefault("HF_HUB_OFFLINE", "1")
os.environ.setdefault("TRANSFORMERS_OFFLINE", "1")

import pytest  # noqa: E402

REPO = Path(__file__).resolve().parents[1]
SHARED_DATA = Path(os.environ.get("ZOORANK_SHARED_DATA", REPO.parent / "shared" / "data"))


@pytest.fixture(scope="session")
def ray_session():
    """One local Ray for the whole test session (2 CPUs, loopback); shut down at the end."""
    import ray

    from zoorank.runtime import ensure_ray

    ensure_ray(num_cpus=2)
    yield ray
    ray.shutdown()


@pytest.fixture(scope="session")
def shared_data() -> Path:
    """``../shared/data`` beside the checkout; tests that need it skip with the reason when absent."""
    if not SHARED_DATA.is_dir():
        pytest.skip(f"real image data not found at {SHARED_DATA} (set ZOORANK_SHARED_DATA)")
    return SHARED_DATA


@pytest.fixture(scope="session")
def digits():
    """scikit-learn's bundled 8×8 digits: (images float64 (1797, 8, 8) in 0..16, labels)."""
    from sklearn.datasets import load_digits

    d = load_digits()
    return d.images, d.target


@pytest.fixture(scope="session")
def s3_server():
    """A real S3 API (moto's server mode) on 127.0.0.1 for the session; yields a URI factory.

    ``s3_server("bucket/prefix")`` returns a store URI that pyarrow.fs understands, with the
    loopback endpoint in its query string. Credentials are dummy values set in the environment.
    """
    import boto3
    from moto.server import ThreadedMotoServer

    server = ThreadedMotoServer(ip_address="127.0.0.1", port=0, verbose=False)
    server.start()
    host, port = server.get_host_and_port()
    for key, value in {"AWS_ACCESS_KEY_ID": "testing", "AWS_SECRET_ACCESS_KEY": "testing",
                       "AWS_DEFAULT_REGION": "us-east-1"}.items():
        os.environ.setdefault(key, value)
    client = boto3.client("s3", endpoint_url=f"http://{host}:{port}", region_name="us-east-1")
    buckets: set[str] = set()

    def uri(path: str) -> str:
        bucket = path.split("/", 1)[0]
        if bucket not in buckets:
            client.create_bucket(Bucket=bucket)
            buckets.add(bucket)
        # Credentials ride in the URI (Arrow reads user:password as the key pair) because Ray
        # workers started before this fixture do not see environment variables set here.
        return (f"s3://testing:testing@{path}?endpoint_override={host}:{port}"
                "&scheme=http&region=us-east-1")

    yield uri
    server.stop()
