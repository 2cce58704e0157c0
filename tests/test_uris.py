"""zoorank.uris.glob_files on URIs: the same files as the standard library's glob on disk."""

from __future__ import annotations

import glob
import os

import pytest

from zoorank.uris import glob_files

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
