"""One writer at a time: a lease on the store.

Every command that writes a store (``run``, ``embed``, ``score``, ``rank``, ``report``, ``gc``)
holds its lease, ``<store>/lease.json``: owner, host, pid, command, start and expiry. A second
process gets :class:`StoreLeaseError` (exit 2) naming the first. The holder renews the expiry
from a background thread; a lease whose holder died (expired, or on this host a pid that no
longer runs) is taken over.

Local stores create the lease file with ``O_CREAT | O_EXCL`` (atomic). Object stores have no
create-if-absent through ``pyarrow.fs``: the lease object is written with a random token and read
back after a short settle time, and the process whose token is not there gives way.
A process may take the lease of a store it already holds (nested stages of one run).
"""

from __future__ import annotations

import getpass
import json
import os
import socket
import threading
import time
import uuid
from collections.abc import Iterator
from contextlib import contextmanager
from typing import Any

from zoorank.errors import ZoorankError
from zoorank.store import Store

LEASE = "lease.json"
#: seconds a lease lasts without renewal (renewed every third of it).
LEASE_SECONDS = 120.0
#: seconds an object-store lease is left to settle before it is read back.
SETTLE_SECONDS = 0.5

_held: dict[str, int] = {}
_held_lock = threading.Lock()


class StoreLeaseError(ZoorankError):
    """Another zoorank process holds the store's lease; the message names it."""


def _describe(lease: dict[str, Any]) -> str:
    started = time.strftime("%Y-%m-%d %H:%M:%S UTC", time.gmtime(lease.get("started", 0)))
    return (f"`zoorank {lease.get('command', '?')}` by {lease.get('owner', '?')} on host "
            f"{lease.get('host', '?')}, pid {lease.get('pid', '?')}, since {started}")


def _alive(lease: dict[str, Any]) -> bool:
    """Whether the lease still binds: not expired and, on this host, its process still runs."""
    if float(lease.get("expires", 0)) < time.time():
        return False
    if lease.get("host") == socket.gethostname():
        try:
            os.kill(int(lease.get("pid", -1)), 0)
        except (ProcessLookupError, ValueError):
            return False
        except PermissionError:  # a process of another user: it runs
            return True
    return True


def _read(store: Store) -> dict[str, Any] | None:
    try:
        return json.loads(store.read_text(LEASE))
    except (FileNotFoundError, OSError, ValueError):
        return None


def _record(command: str, token: str) -> dict[str, Any]:
    now = time.time()
    try:
        owner = getpass.getuser()
    except (KeyError, OSError):
        owner = "unknown"
    return {"owner": owner, "host": socket.gethostname(), "pid": os.getpid(), "command": command,
            "token": token, "started": now, "expires": now + LEASE_SECONDS}


def _create_local(store: Store, record: dict[str, Any]) -> bool:
    path = store.path(LEASE)
    try:
        fd = os.open(path, os.O_CREAT | os.O_EXCL | os.O_WRONLY, 0o644)
    except FileExistsError:
        return False
    with os.fdopen(fd, "w") as f:
        json.dump(record, f)
    return True


def _acquire(store: Store, command: str) -> dict[str, Any]:
    token = uuid.uuid4().hex
    record = _record(command, token)
    for _ in range(2):  # a dead holder's lease is removed once, then we try again
        current = _read(store)
        if current is not None and _alive(current):
            raise StoreLeaseError(
                f"{store.name} is in use by {_describe(current)}; wait for it to finish (or, if "
                f"that process is gone, delete {store.name}/{LEASE})")
        if store.is_local:
            if current is not None:
                store.delete(LEASE)
            if _create_local(store, record):
                return record
            continue
        store.write_text(LEASE, json.dumps(record))
        time.sleep(SETTLE_SECONDS)
        back = _read(store)
        if back is not None and back.get("token") == token:
            return record
    current = _read(store) or {}
    raise StoreLeaseError(f"{store.name} is in use by {_describe(current)}")


def _renew(store: Store, record: dict[str, Any], stop: threading.Event) -> None:
    while not stop.wait(LEASE_SECONDS / 3):
        current = _read(store)
        if current is None or current.get("token") != record["token"]:
            return  # taken over (we were presumed dead): nothing to renew
        record["expires"] = time.time() + LEASE_SECONDS
        try:
            store.write_text(LEASE, json.dumps(record))
        except OSError:
            pass


@contextmanager
def store_lease(store: Store, command: str) -> Iterator[None]:
    """Hold ``store``'s lease for the block; StoreLeaseError when another process holds it."""
    with _held_lock:
        if _held.get(store.uri):
            _held[store.uri] += 1
            nested = True
        else:
            nested = False
    if nested:
        try:
            yield
        finally:
            with _held_lock:
                _held[store.uri] -= 1
        return
    record = _acquire(store, command)
    with _held_lock:
        _held[store.uri] = 1
    stop = threading.Event()
    renewer = threading.Thread(target=_renew, args=(store, record, stop), daemon=True)
    renewer.start()
    try:
        yield
    finally:
        stop.set()
        renewer.join(timeout=5)
        with _held_lock:
            _held.pop(store.uri, None)
        current = _read(store)
        if current is not None and current.get("token") == record["token"]:
            store.delete(LEASE)
