"""Inputs anywhere ``pyarrow.fs`` reaches: local paths and ``s3://`` / ``gs://`` URIs.

Credentials come from the environment or the instance role (for S3: ``AWS_ACCESS_KEY_ID``,
``AWS_SECRET_ACCESS_KEY``, ``AWS_ENDPOINT_URL``, ...), never from the URI; a URI that carries them
still works, but :func:`redact` removes them from everything zoorank prints or writes.

Content digests (checkpoints, dataset files) cost a full read, so :class:`DigestCache` computes one
once per (URI, size, modification time) and keeps it in the store's digest table
(``cache/digests``); a changed file has a new size or time and is read again.

This module is the one place URIs are parsed (:func:`parse`), turned into filesystems
(:func:`resolve`) or Delta Lake locations (:func:`delta_location`), and redacted (:func:`redact`).
It imports nothing from the store (the store stands on it).
"""

from __future__ import annotations

import hashlib
import os
import re
import threading
from dataclasses import dataclass
from pathlib import Path
from typing import Any, BinaryIO
from urllib.parse import parse_qsl, unquote

import pyarrow.fs as pafs

# Python 3.13's glob.translate, backported (recursive, hidden files matched); we support 3.10+
from fsspec.utils import glob_translate

from zoorank.errors import InputError

GLOB_CHARS = "*?["
#: attempts per object-store request (pyarrow's default is 3: at a 10% fault rate one request in
#: a thousand would still fail); backoff is the AWS standard strategy's (exponential: a request
#: that always fails takes seconds to give up after 10 attempts).
#: ``ZOORANK_S3_MAX_ATTEMPTS`` overrides it, read by :func:`s3_retry_settings` each time a
#: filesystem is built (the test suite lowers it where a permanent failure is the point).
S3_MAX_ATTEMPTS = 10
#: seconds before an S3 request that got no answer is abandoned (and retried);
#: ``ZOORANK_S3_REQUEST_TIMEOUT`` overrides it.
S3_REQUEST_TIMEOUT_S = 20.0
S3_CONNECT_TIMEOUT_S = 10.0


def is_uri(path: str | os.PathLike[str]) -> bool:
    """True for ``scheme://...`` (object stores, ``file://``); False for plain local paths."""
    return "://" in str(path)


def redact(uri: str | os.PathLike[str] | None) -> str:
    """``uri`` (or any text) without credentials: see :func:`zoorank.store.redact.redact`.

    >>> redact("s3://AKIA:s3/cr+t=@bucket/store?region=eu&secret_key=abc")
    's3://***@bucket/store?region=eu&secret_key=***'
    """
    from zoorank.store.redact import redact as _redact

    return _redact(uri)


@dataclass(frozen=True)
class ParsedURI:
    """The parts of ``scheme://[user[:password]@]bucket/key?query`` (local paths: scheme "")."""

    scheme: str
    user: str
    password: str
    path: str  # bucket/key for object stores, the absolute path for local ones
    query: dict[str, str]


def parse(uri: str | os.PathLike[str]) -> ParsedURI:
    """Split a store or input URI; the only URI parser in zoorank."""
    text = str(uri)
    if not is_uri(text):
        return ParsedURI("", "", "", str(Path(text).expanduser().resolve()), {})
    scheme, rest = text.split("://", 1)
    rest, _, query = rest.partition("?")
    user = password = ""
    head, sep, tail = rest.partition("/")
    if "@" in head:
        info, head = head.rsplit("@", 1)
        user, _, password = info.partition(":")
        user, password = unquote(user), unquote(password)
    return ParsedURI(scheme.lower(), user, password, head + sep + tail, dict(parse_qsl(query)))


def child(uri: str, relpath: str) -> str:
    """``uri`` with ``relpath`` appended to its path; credentials and query are kept.

    >>> child("s3://k:s@bucket/store?scheme=http", "tune")
    's3://k:s@bucket/store/tune?scheme=http'
    """
    if not is_uri(uri):
        return str(Path(uri) / relpath)
    head, sep, query = str(uri).partition("?")
    return f"{head.rstrip('/')}/{relpath.strip('/')}" + (f"?{query}" if sep else "")


def basename(uri: str | None) -> str:
    """The last part of ``uri``'s path (its query string left out)."""
    return str(uri).split("?", 1)[0].rstrip("/").rsplit("/", 1)[-1]


def parent(uri: str) -> str:
    """``uri`` without its last path part; the query string (an endpoint, ...) is kept."""
    base, _, query = str(uri).partition("?")
    head = base.rstrip("/").rsplit("/", 1)[0]
    return head + (f"?{query}" if query else "")


def delta_location(store_uri: str, path: str) -> tuple[str, dict[str, str]]:
    """(URI, storage options) for delta-rs of ``path`` on ``store_uri``'s object store.

    Options come from the URI the way pyarrow reads it (``user:password@`` credentials,
    ``endpoint_override``, ``scheme=http``, ``region``) and from the environment
    (``AWS_ENDPOINT_URL``, ``AWS_ACCESS_KEY_ID`` ..., read by delta-rs itself).
    """
    p = parse(store_uri)
    scheme = {"gcs": "gs"}.get(p.scheme, p.scheme)
    options: dict[str, str] = {}
    if scheme == "s3":
        if p.user:
            options["AWS_ACCESS_KEY_ID"] = p.user
        if p.password:
            options["AWS_SECRET_ACCESS_KEY"] = p.password
        endpoint = p.query.get("endpoint_override")
        if endpoint:
            if "://" not in endpoint:
                endpoint = f"{p.query.get('scheme', 'https')}://{endpoint}"
        else:
            endpoint = os.environ.get("AWS_ENDPOINT_URL_S3") or os.environ.get("AWS_ENDPOINT_URL")
        if endpoint:
            options["AWS_ENDPOINT_URL"] = endpoint
            if endpoint.startswith("http://"):  # a local or test endpoint (MinIO, moto)
                options["AWS_ALLOW_HTTP"] = "true"
                # no idle connection reuse: a dev server that drops kept-alive connections
                # otherwise stalls a request until its timeout (seen with moto under load)
                options["pool_max_idle_per_host"] = "0"
        region = p.query.get("region") or os.environ.get("AWS_REGION") or os.environ.get(
            "AWS_DEFAULT_REGION")
        if region:
            options["AWS_REGION"] = region
    return f"{scheme}://{path}", options


def resolve(uri: str | os.PathLike[str]) -> tuple[pafs.FileSystem, str]:
    """(filesystem, path) for a local path or any URI pyarrow.fs understands."""
    text = str(uri)
    if not is_uri(text):
        return pafs.LocalFileSystem(), str(Path(text).expanduser().resolve())
    try:
        fs, path = pafs.FileSystem.from_uri(text)
    except (ValueError, OSError) as err:  # pyarrow's ArrowInvalid is a ValueError
        raise InputError(redact(f"{text}: cannot open ({type(err).__name__}: {err})")) from None
    return with_retry_strategy(fs), path


def without_credentials(fs: pafs.FileSystem) -> pafs.FileSystem:
    """``fs`` (with its retry strategy) taking its credentials from the environment or the instance role,
    not from the URI it was built from: for a filesystem that a library pickles into files it
    writes (Ray Tune's experiment state), where explicit credentials would be written too."""
    if not isinstance(fs, pafs.S3FileSystem):
        return fs
    options = dict(fs.__reduce__()[1][0], access_key=None, secret_key=None, session_token=None)
    return with_retry_strategy(pafs.S3FileSystem(**options))


def with_retry_strategy(fs: pafs.FileSystem) -> pafs.FileSystem:
    """``fs`` retrying transient object-store failures (500s, throttling, resets, timeouts).

    S3: the AWS standard retry strategy (exponential backoff with jitter) with
    :data:`S3_MAX_ATTEMPTS` attempts per request and a :data:`S3_REQUEST_TIMEOUT_S` request
    timeout (both overridable, :func:`s3_retry_settings`), so a stalled request is retried rather
    than waited on; the other options (endpoint, credentials, region) are kept. Other
    filesystems are returned as they are. A filesystem
    pickled to a Ray worker loses its retry strategy (pyarrow does not pickle it): workers build
    theirs from the URI through :func:`resolve` (``Store`` pickles as its URI).
    """
    if not isinstance(fs, pafs.S3FileSystem):
        return fs
    attempts, request_timeout = s3_retry_settings()
    options = dict(fs.__reduce__()[1][0])
    if options.get("request_timeout", -1) is None or options.get("request_timeout", -1) < 0:
        options["request_timeout"] = request_timeout
    if options.get("connect_timeout", -1) is None or options.get("connect_timeout", -1) < 0:
        options["connect_timeout"] = S3_CONNECT_TIMEOUT_S
    # a small object (a shard, a report file) goes up in one PUT, not a three-request multipart
    # upload: the upload starts only when a part fills or the stream closes
    options["allow_delayed_open"] = True
    return pafs.S3FileSystem(**options,
                             retry_strategy=pafs.AwsStandardS3RetryStrategy(attempts))


def s3_retry_settings() -> tuple[int, float]:
    """(attempts per S3 request, request timeout in s): :data:`S3_MAX_ATTEMPTS` and
    :data:`S3_REQUEST_TIMEOUT_S`, or ``ZOORANK_S3_MAX_ATTEMPTS`` / ``ZOORANK_S3_REQUEST_TIMEOUT``
    from this process's environment (the one place they are read)."""
    attempts = int(os.environ.get("ZOORANK_S3_MAX_ATTEMPTS", S3_MAX_ATTEMPTS))
    timeout = float(os.environ.get("ZOORANK_S3_REQUEST_TIMEOUT", S3_REQUEST_TIMEOUT_S))
    if attempts < 1 or timeout <= 0:
        raise InputError("ZOORANK_S3_MAX_ATTEMPTS must be >= 1 and ZOORANK_S3_REQUEST_TIMEOUT > 0")
    return attempts, timeout


def join(uri: str, path: str) -> str:
    """Rebuild a URI for ``path`` on the filesystem of ``uri`` (the scheme and query are kept)."""
    if not is_uri(uri):
        return path
    scheme = uri.split("://", 1)[0]
    query = uri.split("?", 1)[1] if "?" in uri else ""
    return f"{scheme}://{path}" + (f"?{query}" if query else "")


@dataclass(frozen=True)
class FileStat:
    """What identifies a file's version cheaply: its URI, size and modification time (ns)."""

    uri: str
    size: int
    mtime_ns: int


def stat(uri: str | os.PathLike[str]) -> FileStat | None:
    """The file's size and modification time, or None when it is missing or not a file."""
    fs, path = resolve(uri)
    info = fs.get_file_info(path)
    if info.type != pafs.FileType.File:
        return None
    mtime = info.mtime_ns if info.mtime_ns is not None else -1
    return FileStat(str(uri) if is_uri(uri) else path, int(info.size or 0), int(mtime))


def is_file(uri: str | os.PathLike[str]) -> bool:
    try:
        return stat(uri) is not None
    except (InputError, OSError):
        return False


def glob_files(pattern: str) -> list[str]:
    """Files matching a glob, sorted; URIs stay URIs (see :func:`glob_stats`)."""
    return [s.uri for s in glob_stats(pattern)]


def glob_stats(pattern: str) -> list[FileStat]:
    """:class:`FileStat` of the files matching a glob (``*``, ``?``, ``[...]``, ``**``), sorted by
    URI; URIs stay URIs. On an object store the sizes and times come from the listing itself, so a
    caller that needs them asks for no object one by one (one HEAD request per file saved).

    Only the part before the first wildcard is listed (recursively), so ``s3://b/runs/*/last.pt``
    lists ``s3://b/runs`` once. Local paths are matched by :func:`glob.glob` (``recursive=True``),
    URIs by the regex of :func:`fsspec.utils.glob_translate` (Python 3.13's ``glob.translate``):
    ``*`` stays within one path segment, ``**`` spans any number of segments (zero included), and
    names starting with ``.`` match too. In a URI ``?`` starts the query and Arrow's URI parser
    refuses ``[``: both work on local paths only.
    """
    if not is_uri(pattern):
        import glob

        found = sorted(p for p in glob.glob(os.path.expanduser(pattern), recursive=True)
                       if os.path.isfile(p))
        return [st for p in found if (st := _local_stat(p)) is not None]
    fs, path = resolve(pattern)
    if not any(c in path for c in GLOB_CHARS):  # the "?" was a query's: one file, or none
        try:
            return [st] if (st := stat(pattern)) is not None else []
        except OSError as err:  # unreadable, not missing: say why
            raise InputError(redact(f"{pattern}: cannot read ({err})")) from None
    parts = path.split("/")
    fixed = []
    for part in parts:
        if any(c in part for c in GLOB_CHARS):
            break
        fixed.append(part)
    base = "/".join(fixed)
    try:
        infos = fs.get_file_info(pafs.FileSelector(base, recursive=True, allow_not_found=True))
    except OSError as err:
        raise InputError(redact(f"{pattern}: cannot list ({err})")) from None
    regex = re.compile(glob_translate(path))
    return sorted((FileStat(join(pattern, i.path), int(i.size or 0),
                            int(i.mtime_ns) if i.mtime_ns is not None else -1)
                   for i in infos if i.type == pafs.FileType.File and regex.fullmatch(i.path)),
                  key=lambda st: st.uri)


def _local_stat(path: str) -> FileStat | None:
    """A local file's :class:`FileStat`, named by ``path`` as the glob gave it."""
    try:
        st = os.stat(path)
    except OSError:  # gone between the listing and now
        return None
    return FileStat(path, st.st_size, st.st_mtime_ns)


def open_input(uri: str | os.PathLike[str]) -> BinaryIO:
    """A readable binary stream over a local file or an object (streamed, not loaded)."""
    fs, path = resolve(uri)
    try:
        return fs.open_input_file(path)
    except (FileNotFoundError, OSError) as err:
        raise InputError(redact(f"{uri}: cannot read ({err})")) from None


def read_bytes(uri: str | os.PathLike[str]) -> bytes:
    with open_input(uri) as f:
        return f.read()


def content_digest(uri: str | os.PathLike[str], chunk: int = 1 << 22) -> str:
    """sha256 of the file's bytes (streamed in ``chunk``-byte reads)."""
    h = hashlib.sha256()
    with open_input(uri) as f:
        while block := f.read(chunk):
            h.update(block)
    return h.hexdigest()


class DigestCache:
    """Content digests keyed by (URI, size, mtime), kept in the store's ``cache/digests`` table.

    ``digest(uri)`` reads a file in full only the first time a (URI, size, mtime) is seen by any run
    on this store; :meth:`save` writes new entries back (one MERGE commit).
    Without a store the cache lives for the process only.
    """

    def __init__(self, store: Any = None) -> None:  # a zoorank.store.Store
        self.store = store
        self._lock = threading.Lock()
        self._known: dict[tuple[str, int, int], str] = {}
        self._listed: dict[str, FileStat] = {}
        self._dirty = False
        if store is not None:
            frame = store.read_frame(store.DIGESTS)
            for r in frame.itertuples(index=False):
                self._known[(str(r.uri), int(r.size), int(r.mtime_ns))] = str(r.digest)

    def listed(self, stats: list[FileStat]) -> None:
        """Remember what a listing (:func:`glob_stats`) said of these objects: :meth:`stat` and
        :meth:`digest` take it from there rather than asking the store once more per object.
        Local files are left out: their stat is cheap and stays fresh."""
        with self._lock:
            self._listed.update((st.uri, st) for st in stats if is_uri(st.uri))

    def stat(self, uri: str | os.PathLike[str]) -> FileStat | None:
        """The listing's :class:`FileStat` of ``uri`` where it was :meth:`listed`, else :func:`stat`."""
        with self._lock:
            known = self._listed.get(str(uri))
        return known if known is not None else stat(uri)

    def digest(self, uri: str | os.PathLike[str]) -> str:
        info = self.stat(uri)
        if info is None:
            raise InputError(f"{redact(str(uri))}: file not found")
        key = (redact(info.uri), info.size, info.mtime_ns)
        with self._lock:
            if key in self._known:
                return self._known[key]
        value = content_digest(uri)
        with self._lock:
            self._known[key] = value
            self._dirty = True
        return value

    def save(self) -> None:
        if self.store is None or not self._dirty:
            return
        import pandas as pd

        with self._lock:
            rows = [{"uri": u, "size": s, "mtime_ns": t, "digest": d}
                    for (u, s, t), d in sorted(self._known.items())]
            self._dirty = False
        self.store.upsert_rows(self.store.DIGESTS, pd.DataFrame(rows), ["uri", "size", "mtime_ns"])
