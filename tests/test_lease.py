"""One writer at a time: two real processes on one store."""

from __future__ import annotations

import json
import os
import signal
import subprocess
import sys
import textwrap
import time

import pytest

from zoorank.lease import LEASE, StoreLeaseError, store_lease
from zoorank.store import Store

pytestmark = pytest.mark.timeout(120)

HOLDER = textwrap.dedent("""
    import sys, time
    from zoorank.lease import store_lease
    from zoorank.store import Store
    with store_lease(Store(sys.argv[1]), "embed"):
        print("held", flush=True)
        time.sleep(60)
""")


def _start_holder(root) -> subprocess.Popen:
    proc = subprocess.Popen([sys.executable, "-c", HOLDER, str(root)], stdout=subprocess.PIPE,
                            text=True)
    assert proc.stdout.readline().strip() == "held"
    return proc


def test_a_second_process_is_refused_with_the_first_named_then_gets_the_store(tmp_path):
    import yaml
    from rank_fixtures import config_dict


    root = tmp_path / "store"
    holder = _start_holder(root)
    try:
        with pytest.raises(StoreLeaseError) as err, store_lease(Store(str(root)), "rank"):
            pass
        assert f"pid {holder.pid}" in str(err.value) and "zoorank embed" in str(err.value)
        # the CLI turns it into exit 2 naming the holder, before touching the store
        path = tmp_path / "run.yaml"
        path.write_text(yaml.safe_dump(config_dict(str(root))))
        proc = subprocess.run([sys.executable, "-m", "zoorank", "rank", str(path)],
                              capture_output=True, text=True, timeout=60)
        assert proc.returncode == 2 and f"pid {holder.pid}" in proc.stderr
    finally:
        holder.send_signal(signal.SIGINT)  # an interrupted holder releases on its way out
        holder.wait(timeout=10)
    # released on exit: the store is free again
    assert not (root / LEASE).exists()
    with store_lease(Store(str(root)), "rank"):
        assert json.loads((root / LEASE).read_text())["pid"] == os.getpid()
    assert not (root / LEASE).exists()


def test_the_lease_of_a_killed_process_is_taken_over(tmp_path):
    root = tmp_path / "store"
    holder = _start_holder(root)
    os.kill(holder.pid, signal.SIGKILL)
    holder.wait(timeout=10)
    assert (root / LEASE).exists()  # SIGKILL leaves it behind
    with store_lease(Store(str(root)), "score"):
        assert json.loads((root / LEASE).read_text())["command"] == "score"


def test_nested_stages_of_one_process_share_the_lease(tmp_path):
    store = Store(str(tmp_path / "store"))
    with store_lease(store, "run"):
        with store_lease(Store(store.uri), "embed"):
            assert json.loads(store.read_text(LEASE))["command"] == "run"
        assert store.exists(LEASE)
    assert not store.exists(LEASE)


def test_an_expired_lease_on_another_host_is_taken_over(tmp_path):
    store = Store(str(tmp_path / "store"))
    store.write_text(LEASE, json.dumps({"owner": "x", "host": "elsewhere", "pid": 1,
                                        "command": "embed", "started": 0,
                                        "expires": time.time() - 1}))
    with store_lease(store, "rank"):
        assert json.loads(store.read_text(LEASE))["host"] != "elsewhere"
