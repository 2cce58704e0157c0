"""Shared fixtures: one local Ray per test session (loopback only), real data locations."""

from __future__ import annotations

import os
import shutil
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


class S3Server:
    """A moto S3 server on 127.0.0.1 (the ``s3_server`` fixture).

    Calling it, ``s3_server("bucket/prefix")``, returns a store URI with the loopback endpoint and
    dummy credentials in its query (for Ray workers started before the environment was set);
    ``endpoint_url`` is ``http://127.0.0.1:PORT``; ``bucket(name)`` creates a bucket once and returns
    the plain ``s3://name`` (reached through the environment that ``s3_env`` sets).
    """

    def __init__(self, host: str, port: int) -> None:
        import boto3

        self.host, self.port = host, port
        self.endpoint_url = f"http://{host}:{port}"
        self.client = boto3.client("s3", endpoint_url=self.endpoint_url, region_name="us-east-1",
                                   aws_access_key_id="testing", aws_secret_access_key="testing")
        self._buckets: set[str] = set()

    def bucket(self, name: str) -> str:
        if name not in self._buckets:
            self.client.create_bucket(Bucket=name)
            self._buckets.add(name)
        return f"s3://{name}"

    def __call__(self, path: str) -> str:
        self.bucket(path.split("/", 1)[0])
        # Credentials ride in the URI (Arrow reads user:password as the key pair) because Ray
        # workers started before this fixture do not see environment variables set here.
        return (f"s3://testing:testing@{path}?endpoint_override={self.host}:{self.port}"
                "&scheme=http&region=us-east-1")


@pytest.fixture(scope="session")
def s3_server():
    """A real S3 API (moto's server mode) on 127.0.0.1 for the session: an :class:`S3Server`."""
    from moto.server import ThreadedMotoServer

    server = ThreadedMotoServer(ip_address="127.0.0.1", port=0, verbose=False)
    server.start()
    host, port = server.get_host_and_port()
    for key, value in {"AWS_ACCESS_KEY_ID": "testing", "AWS_SECRET_ACCESS_KEY": "testing",
                       "AWS_DEFAULT_REGION": "us-east-1"}.items():
        os.environ.setdefault(key, value)
    yield S3Server(host, port)
    server.stop()


@pytest.fixture
def s3_env(s3_server, monkeypatch):
    """The environment a user sets for S3 (endpoint + credentials), for one test; yields the endpoint.

    Plain ``s3://bucket/key`` URIs then reach the moto server (pyarrow.fs and boto3 read
    ``AWS_ENDPOINT_URL``); create buckets with ``s3_server.bucket(name)``.
    """
    for key, value in {"AWS_ENDPOINT_URL": s3_server.endpoint_url,
                       "AWS_ACCESS_KEY_ID": "testing", "AWS_SECRET_ACCESS_KEY": "testing",
                       "AWS_DEFAULT_REGION": "us-east-1"}.items():
        monkeypatch.setenv(key, value)
    yield s3_server.endpoint_url


@pytest.fixture(scope="session")
def template(tmp_path_factory) -> Path:
    """The hand-written digits store of ``rank_fixtures`` (``write_store``), written once per
    session; never written to: tests take a copy (``store_root``)."""
    from rank_fixtures import write_store

    root = tmp_path_factory.mktemp("rank-template")
    write_store(str(root))
    return root


@pytest.fixture
def store_root(template, tmp_path) -> Path:
    """A copy of ``template`` for one test, at ``tmp_path / "store"``."""
    root = tmp_path / "store"
    shutil.copytree(template, root)
    return root


@pytest.fixture(scope="session")
def e2e_zoo(tmp_path_factory) -> dict[str, str]:
    """The end-to-end TorchScript zoo of ``e2e_models`` (model id → file), trained and written once
    per session; read only."""
    from e2e_models import build_zoo

    return build_zoo(tmp_path_factory.mktemp("e2e-zoo"))


def pytest_collection_modifyitems(config, items):
    """Test files with end-to-end (``slow``) cases first, each file's tests in their own order.

    ``make test`` runs the files on two pytest-xdist workers (``--dist loadfile``), handed out in
    this order: the long files start at once and the many short ones fill in behind them, so the
    workers end together instead of one finishing a long file alone.
    """
    slow_files = {item.path for item in items if item.get_closest_marker("slow")}
    items.sort(key=lambda item: item.path not in slow_files)  # stable: file order kept


#: Debian's chromium (``apt-get install -y chromium``; ``.ci/run`` installs it), driven by Playwright.
CHROMIUM = "/usr/bin/chromium"
CHROMIUM_ARGS = ["--headless", "--no-sandbox", "--disable-gpu", "--no-first-run",
                 "--disable-background-networking", "--disable-component-update", "--disable-sync"]


@pytest.fixture
def chromium():
    """A headless Chromium browser (Playwright) for one test, closed after it. Skipped, naming the
    binary, where chromium is not installed; Playwright is a dev dependency, so its absence is a
    broken install and fails, never skips."""
    if not os.path.exists(CHROMIUM):
        pytest.skip(f"no chromium at {CHROMIUM} (apt-get install -y chromium; .ci/run does)")
    from playwright import sync_api

    with sync_api.sync_playwright() as p:
        browser = p.chromium.launch(executable_path=CHROMIUM, args=CHROMIUM_ARGS)
        try:
            yield browser
        finally:
            browser.close()
