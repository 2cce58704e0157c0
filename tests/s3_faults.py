"""A fault-injecting HTTP proxy in front of a loopback S3 (moto), for the storage-fault tests.

:class:`FaultyProxy` listens on 127.0.0.1 and forwards every request to the upstream server,
except that a seeded fraction ``rate`` of requests meets a fault *before* it is forwarded (so a
retried request is never applied twice):

* ``500``: an S3 ``InternalError`` response (retryable by every S3 client),
* ``reset``: the connection is closed with a TCP reset, no response,
* ``slow``: the request stalls ``stall_s`` seconds, then is forwarded and answered.

``latency_s`` delays every request that is forwarded by that much (an object store's round trip,
for benchmarks; at most 1 s).

Objects whose key contains one of ``broken`` fail every time with a 500 (a permanently failing
object). Only loopback addresses are served and forwarded to; the stall is bounded; ``counts``
says how many requests met each fault. Use it as a context manager or ``start()``/``stop()``.
"""

from __future__ import annotations

import http.client
import random
import socket
import struct
import threading
import time
from collections import Counter
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer

FAULTS = ("500", "reset", "slow")
_HOP = {"connection", "keep-alive", "proxy-connection", "transfer-encoding", "te", "upgrade",
        "trailer", "proxy-authenticate", "proxy-authorization"}
_INTERNAL_ERROR = (b'<?xml version="1.0" encoding="UTF-8"?>\n<Error><Code>InternalError</Code>'
                   b"<Message>injected fault</Message></Error>")


def _read_chunked(rfile) -> bytes:
    """A chunked request body, framing included (read to its last chunk and trailers)."""
    raw = bytearray()
    while True:
        line = rfile.readline(65537)
        raw += line
        size = int(line.split(b";", 1)[0].strip() or b"0", 16)
        if size == 0:
            while True:  # trailers, up to the blank line
                trailer = rfile.readline(65537)
                raw += trailer
                if trailer in (b"\r\n", b"\n", b""):
                    return bytes(raw)
        raw += rfile.read(size + 2)


class FaultyProxy:
    """See the module docstring. ``endpoint`` is ``127.0.0.1:PORT`` (for ``endpoint_override``)."""

    def __init__(self, upstream_host: str, upstream_port: int, *, rate: float = 0.0,
                 faults: tuple[str, ...] = FAULTS, stall_s: float = 1.0, seed: int = 0,
                 broken: tuple[str, ...] = (), latency_s: float = 0.0) -> None:
        if upstream_host not in ("127.0.0.1", "localhost", "::1"):
            raise ValueError("the proxy forwards to loopback only")
        if not 0.0 <= rate < 1.0 or not 0.0 <= stall_s <= 10.0:
            raise ValueError("rate must be in [0, 1) and stall_s in [0, 10]")
        if not 0.0 <= latency_s <= 1.0:
            raise ValueError("latency_s must be in [0, 1]")
        self.latency_s = latency_s
        self.upstream = (upstream_host, upstream_port)
        self.rate, self.faults, self.stall_s, self.broken = rate, faults, stall_s, broken
        self.counts: Counter[str] = Counter()
        self._rng = random.Random(seed)
        self._lock = threading.Lock()
        proxy = self

        class Handler(BaseHTTPRequestHandler):
            protocol_version = "HTTP/1.1"

            def log_message(self, format: str, *args: object) -> None:
                pass

            def _any(self) -> None:
                proxy._handle(self)

            do_GET = do_PUT = do_POST = do_HEAD = do_DELETE = _any  # noqa: N815

        self._server = ThreadingHTTPServer(("127.0.0.1", 0), Handler)
        self._server.daemon_threads = True
        self.host, self.port = self._server.server_address[:2]
        self.endpoint = f"{self.host}:{self.port}"
        self._thread: threading.Thread | None = None

    # -- lifecycle

    def start(self) -> FaultyProxy:
        self._thread = threading.Thread(target=self._server.serve_forever, daemon=True)
        self._thread.start()
        return self

    def stop(self) -> None:
        self._server.shutdown()
        self._server.server_close()

    def __enter__(self) -> FaultyProxy:
        return self.start()

    def __exit__(self, *exc: object) -> None:
        self.stop()

    # -- requests

    def _draw(self, path: str) -> str | None:
        with self._lock:
            self.counts["requests"] += 1
            if any(key in path for key in self.broken):
                self.counts["broken"] += 1
                return "broken"
            if self.rate and self._rng.random() < self.rate:
                fault = self._rng.choice(self.faults)
                self.counts[fault] += 1
                return fault
        return None

    def _handle(self, h: BaseHTTPRequestHandler) -> None:
        chunked = "chunked" in (h.headers.get("Transfer-Encoding") or "").lower()
        length = int(h.headers.get("Content-Length") or 0)
        body = _read_chunked(h.rfile) if chunked else h.rfile.read(length) if length else b""
        with self._lock:
            self.counts[h.command] += 1  # requests by method: "HEAD", "GET", ...
        fault = self._draw(h.path)
        if fault in ("500", "broken"):
            self._reply(h, 500, {"Content-Type": "application/xml"}, _INTERNAL_ERROR)
            return
        if fault == "reset":
            sock = h.connection
            sock.setsockopt(socket.SOL_SOCKET, socket.SO_LINGER, struct.pack("ii", 1, 0))
            h.close_connection = True
            sock.close()
            return
        if fault == "slow":
            time.sleep(self.stall_s)
        if self.latency_s:
            time.sleep(self.latency_s)
        headers = {k: v for k, v in h.headers.items() if k.lower() not in _HOP}
        if chunked:  # forwarded as it came: the chunk framing (and aws-chunked trailers) intact
            headers["Transfer-Encoding"] = "chunked"
        conn = http.client.HTTPConnection(*self.upstream, timeout=60)
        try:
            conn.request(h.command, h.path, body=body, headers=headers)
            resp = conn.getresponse()
            data = resp.read()
            out = {k: v for k, v in resp.getheaders() if k.lower() not in _HOP}
            if h.command != "HEAD":
                out["Content-Length"] = str(len(data))
            self._reply(h, resp.status, out, data if h.command != "HEAD" else b"")
        finally:
            conn.close()

    @staticmethod
    def _reply(h: BaseHTTPRequestHandler, status: int, headers: dict[str, str],
               body: bytes) -> None:
        h.send_response_only(status)
        for key, value in headers.items():
            if key.lower() not in ("date", "server"):
                h.send_header(key, value)
        if "Content-Length" not in headers and "content-length" not in {k.lower() for k in
                                                                         headers}:
            h.send_header("Content-Length", str(len(body)))
        h.end_headers()
        if body and h.command != "HEAD":  # a HEAD reply has no body, or the connection's next
            h.wfile.write(body)           # reply starts inside it ("Invalid status line")
