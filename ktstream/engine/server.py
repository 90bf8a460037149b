"""The HTTP endpoints of every long-running command: ``/metrics``, ``/healthz``, ``/readyz``, and any
read-only routes the caller adds (the engine's ``/learners/{id}`` and ``/instances``).

``/metrics`` is prometheus_client's own exposition of a registry, with its content
negotiation: the Prometheus text format, or OpenMetrics when the scraper's ``Accept``
header asks for ``application/openmetrics-text``. ``/healthz`` answers 200 while
``healthy()`` holds and 503 otherwise; ``/readyz`` the same with ``ready()``. Both take
plain callables so this module knows nothing of the engine or the trainer
(ktstream.finetune.metrics serves the trainer's registry with this same class).

Bounded by construction, so that slow or idle clients cannot starve the probes:
one thread reads request heads from every connection at once (a selector), so
a connection costs a socket, not a thread; a connection that has not sent its
whole request head within ``request_timeout_s`` is closed; at most
``max_connections`` wait for their heads (beyond that the oldest is closed);
a request head is at most ``MAX_HEAD_BYTES`` (no request bodies: GET and HEAD only);
and complete requests are answered by ``workers`` threads. Responses close the
connection (HTTP/1.0 style), as http.server's default did.
"""

from __future__ import annotations

import selectors
import socket
import threading
import time
from concurrent.futures import ThreadPoolExecutor
from dataclasses import dataclass, field
from typing import Callable
from urllib.parse import parse_qs, unquote, urlsplit

from prometheus_client import CollectorRegistry, disable_created_metrics
from prometheus_client.exposition import choose_encoder

# No ``_created`` series: one per counter and histogram doubles the series count for a value
# nobody graphs (a restart shows as a counter reset already). Process-wide, as the setting is.
disable_created_metrics()

MAX_HEAD_BYTES = 8192
REASONS = {200: "OK", 307: "Temporary Redirect", 400: "Bad Request", 404: "Not Found", 405: "Method Not Allowed",
           421: "Misdirected Request", 431: "Request Header Fields Too Large", 500: "Internal Server Error",
           503: "Service Unavailable"}


@dataclass(frozen=True)
class Request:
    """A request as a route sees it: the decoded path, the query string's values, the headers
    (names lower-case)."""

    method: str
    path: str
    query: dict[str, list[str]] = field(default_factory=dict)
    headers: dict[str, str] = field(default_factory=dict)


#: A route: request -> (status code, content type, body) or (..., {header: value}) with more response
#: headers (a redirect's ``Location``). It runs on a worker thread.
Handler = Callable[[Request], "tuple[int, str, bytes] | tuple[int, str, bytes, dict[str, str]]"]


class MetricsServer:
    """Serve ``registry`` and the probes on ``host:port`` (port 0: any free port, see ``.port``) from a
    daemon thread. ``routes``: more paths (a key ending in ``/`` takes every path under it).

    >>> from prometheus_client import CollectorRegistry, Gauge
    >>> registry = CollectorRegistry()
    >>> Gauge("demo_up", "Demo.", registry=registry).set(1)
    >>> srv = MetricsServer(registry, lambda: True, lambda: False, port=0)
    >>> import urllib.request, urllib.error
    >>> urllib.request.urlopen(f"http://127.0.0.1:{srv.port}/healthz").status
    200
    >>> try:
    ...     urllib.request.urlopen(f"http://127.0.0.1:{srv.port}/readyz")
    ... except urllib.error.HTTPError as exc:
    ...     print(exc.code)
    503
    >>> asks = urllib.request.Request(f"http://127.0.0.1:{srv.port}/metrics",
    ...                               headers={"Accept": "application/openmetrics-text; version=1.0.0"})
    >>> with urllib.request.urlopen(asks) as r:
    ...     r.headers["Content-Type"].split(";")[0], r.read().decode().splitlines()[-1]
    ('application/openmetrics-text', '# EOF')
    >>> srv.close()
    """

    def __init__(self, registry: CollectorRegistry, healthy: Callable[[], bool], ready: Callable[[], bool],
                 host: str = "127.0.0.1", port: int = 9464, request_timeout_s: float = 5.0,
                 max_connections: int = 64, workers: int = 2, routes: dict[str, Handler] | None = None):
        self.registry = registry
        self.routes: dict[str, Handler] = {
            "/metrics": self._exposition,
            "/healthz": lambda req: _status(healthy(), "alive", "stalled"),
            "/readyz": lambda req: _status(ready(), "ready", "not ready"),
            **(routes or {}),
        }
        self._prefixes = sorted((p for p in self.routes if p.endswith("/")), key=len, reverse=True)
        self.request_timeout_s, self.max_connections = request_timeout_s, max_connections
        self._listener = socket.create_server((host, port), backlog=128)
        self._listener.setblocking(False)
        self.host, self.port = host, self._listener.getsockname()[1]
        self._wake, self._waker = socket.socketpair()
        self._selector = selectors.DefaultSelector()
        self._selector.register(self._listener, selectors.EVENT_READ)
        self._selector.register(self._wake, selectors.EVENT_READ)
        self._heads: dict[socket.socket, tuple[float, bytearray]] = {}  # reading, oldest first: deadline, bytes
        self._pool = ThreadPoolExecutor(workers, thread_name_prefix="ktstream-http-worker")
        self._stop = threading.Event()
        self._thread = threading.Thread(target=self._serve, name="ktstream-http", daemon=True)
        self._thread.start()

    @property
    def url(self) -> str:
        return f"http://{self.host}:{self.port}"

    def _exposition(self, request: Request) -> tuple[int, str, bytes]:
        encoder, content_type = choose_encoder(request.headers.get("accept", ""))
        return 200, content_type, encoder(self.registry)

    # -- the selector thread ------------------------------------------------
    def _serve(self) -> None:
        while not self._stop.is_set():
            for key, _ in self._selector.select(timeout=min(0.5, self.request_timeout_s)):
                if key.fileobj is self._listener:
                    self._accept()
                elif key.fileobj is not self._wake:
                    self._read(key.fileobj)
            self._expire(time.monotonic())

    def _accept(self) -> None:
        while True:
            try:
                conn, _ = self._listener.accept()
            except (BlockingIOError, InterruptedError):
                return
            except OSError:  # out of file descriptors, a reset before accept: try again on the next event
                return
            if len(self._heads) >= self.max_connections:
                self._drop(next(iter(self._heads)))  # the oldest waiting connection makes room
            conn.setblocking(False)
            self._heads[conn] = (time.monotonic() + self.request_timeout_s, bytearray())
            self._selector.register(conn, selectors.EVENT_READ)

    def _read(self, conn: socket.socket) -> None:
        if conn not in self._heads:  # dropped earlier in this select round (made room for a newer one)
            return
        try:
            data = conn.recv(4096)
        except (BlockingIOError, InterruptedError):
            return
        except OSError:
            data = b""
        if not data:
            self._drop(conn)
            return
        head = self._heads[conn][1]
        head += data
        if b"\r\n\r\n" in head or b"\n\n" in head or len(head) > MAX_HEAD_BYTES:
            self._selector.unregister(conn)
            del self._heads[conn]
            self._pool.submit(self._respond, conn, bytes(head))

    def _expire(self, now: float) -> None:
        for conn, (deadline, _) in list(self._heads.items()):
            if deadline > now:
                break  # the rest arrived later
            self._drop(conn)

    def _drop(self, conn: socket.socket) -> None:
        self._selector.unregister(conn)
        del self._heads[conn]
        conn.close()

    # -- a worker thread ----------------------------------------------------
    def _respond(self, conn: socket.socket, head: bytes) -> None:
        try:
            conn.setblocking(True)
            conn.settimeout(self.request_timeout_s)  # a client that does not read its response is let go
            code, ctype, body, method, extra = self._answer(head)
            status = f"HTTP/1.0 {code} {REASONS[code]}\r\nContent-Type: {ctype}\r\n"
            status += "".join(f"{name}: {value}\r\n" for name, value in extra.items())
            status += f"Content-Length: {len(body)}\r\nConnection: close\r\n\r\n"
            conn.sendall(status.encode("latin-1") + (b"" if method == "HEAD" else body))
        except OSError:
            pass
        finally:
            conn.close()

    def _answer(self, head: bytes) -> tuple[int, str, bytes, str, dict[str, str]]:
        if len(head) > MAX_HEAD_BYTES:
            return 431, "text/plain", b"request head too large\n", "GET", {}
        lines = head.decode("latin-1").splitlines()
        parts = lines[0].split() if lines else []
        if len(parts) != 3 or not parts[2].startswith("HTTP/"):
            return 400, "text/plain", b"bad request\n", "GET", {}
        method, target = parts[0], parts[1]
        if method not in ("GET", "HEAD"):
            return 405, "text/plain", b"GET or HEAD only\n", method, {}
        url = urlsplit(target)
        path = unquote(url.path)
        route = self.routes.get(path) or next((self.routes[p] for p in self._prefixes if path.startswith(p)), None)
        if route is None:
            return 404, "text/plain", b"not found\n", method, {}
        headers = {}
        for line in lines[1:]:
            name, sep, value = line.partition(":")
            if sep:
                headers[name.strip().lower()] = value.strip()
        try:
            code, ctype, body, *extra = route(Request(method, path, parse_qs(url.query), headers))
        except Exception as exc:  # noqa: BLE001  (a failing callable is the engine's problem, not the client's)
            return 500, "text/plain", f"{type(exc).__name__}: {exc}\n".encode(), method, {}
        return code, ctype, body, method, (extra[0] if extra else {})

    # -- lifecycle ----------------------------------------------------------
    def close(self) -> None:
        self._stop.set()
        self._waker.send(b"x")
        self._thread.join(timeout=5)
        self._pool.shutdown(wait=True, cancel_futures=True)
        for conn in list(self._heads):
            self._drop(conn)
        for s in (self._listener, self._wake, self._waker):
            s.close()
        self._selector.close()

    def __enter__(self) -> "MetricsServer":
        return self

    def __exit__(self, *exc) -> None:
        self.close()


def _status(ok: bool, yes: str, no: str) -> tuple[int, str, bytes]:
    return (200, "text/plain", f"{yes}\n".encode()) if ok else (503, "text/plain", f"{no}\n".encode())
