"""zoorank.store.uris.glob_files on URIs: the same files as the standard library's glob on disk."""

from __future__ import annotations

import glob
import os

import pytest

from zoorank.store.uris import glob_files

FILES = ["runs/a/last.pt", "runs/a/deep/er/last.pt", "runs/b/last.pt", "runs/last.pt",
         "runs/.hidden/last.pt", "runs/c/last.ptx", "run1.pt", "run2.pt", "runx.pt", "x/y.pt"]


@pytest.fixture(scope="module")
def tree(tmp_path_factory):
    root = tmp_path_factory.mktemp("globs")
    for f in FILES:
        (root / f).parent.mkdir(parents=True, exist_ok=True)
        (root / f).write_bytes(b"x")
    return root


@pytest.mark.parametrize("pattern", [
    "runs/*/last.pt", "runs/**/last.pt", "**/*.pt", "runs/**", "run*.pt", "runs/*",
    "*/last.pt", "r*/**/l*.pt", "nothing/*.pt",
])
def test_a_uri_glob_matches_what_glob_matches_on_disk(tree, pattern):
    """``*`` within a segment, ``**`` over any number (zero too), names starting with ``.``
    included (Python's ``include_hidden``). In a URI ``?`` starts the query and Arrow's URI
    parser refuses ``[``, so those two are for local paths."""
    expected = sorted(p for p in glob.glob(str(tree / pattern), recursive=True,
                                           include_hidden=True) if os.path.isfile(p))
    got = glob_files(f"file://{tree}/{pattern}")
    assert [g.removeprefix("file://") for g in got] == expected
    assert all(g.startswith("file://") for g in got)
    if pattern == "runs/**/last.pt":  # depths 0, 1 (a, b, .hidden) and 3
        assert len(got) == 5


def test_a_checkpoint_glob_on_s3_is_resolved_from_its_listing_with_no_request_per_object(
        s3_server):
    """Resolving checkpoints named by one glob on S3 takes their sizes and times from the listing:
    once their digests are known, 2 and 6 checkpoints cost the same requests and no HEAD at all;
    and what the listing says of each object is what a HEAD of it says."""
    from s3_faults import FaultyProxy

    from zoorank.config.loading import parse_config
    from zoorank.store.uris import DigestCache, glob_stats, stat
    from zoorank.zoo.resolve import resolve_models

    s3_server.bucket("listed-ckpts")
    for folder, n in (("two", 2), ("z", 6)):
        for i in range(n):
            s3_server.client.put_object(Bucket="listed-ckpts", Key=f"{folder}/c{i}.safetensors",
                                        Body=b"w" * (10 + i))
    with FaultyProxy(s3_server.host, s3_server.port) as proxy:
        def uri(path: str) -> str:
            return (f"s3://testing:testing@listed-ckpts/{path}?endpoint_override="
                    f"{proxy.endpoint}&scheme=http&region=us-east-1")

        listing = glob_stats(uri("z/c*.safetensors"))
        assert [s.size for s in listing] == list(range(10, 16))
        for listed in listing:
            head = stat(listed.uri)
            assert (head.uri, head.size) == (listed.uri, listed.size)
            assert abs(head.mtime_ns - listed.mtime_ns) < 1e9  # HTTP dates are whole seconds

        def requests_to_resolve(pattern: str) -> dict[str, int]:
            config = parse_config({
                "store": "/tmp/unused-store", "seed": 0,
                "datasets": [{"name": "digits", "source": "sklearn_digits", "limit": 10}],
                "models": [{"source": "python", "name": "zoorank.tune.models:small_cnn",
                            "input_size": 28, "checkpoint": uri(pattern)}]})
            digests = DigestCache()
            assert len(resolve_models(config, digests)) == len(glob_stats(uri(pattern)))
            before = dict(proxy.counts)
            resolve_models(config, digests)  # digests known: only the listing is left to ask
            return {k: v - before.get(k, 0) for k, v in proxy.counts.items()
                    if v != before.get(k, 0)}

        two, six = requests_to_resolve("two/c*.safetensors"), requests_to_resolve("z/c*.safetensors")
    assert two == six
    assert "HEAD" not in six
