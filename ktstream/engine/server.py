"""The engine's HTTP endpoints: ``/metrics`` (Prometheus text), ``/healthz`` and ``/readyz``.

``/healthz`` answers 200 while the engine loop is alive (it has polled within
the liveness window) and 503 otherwise; ``/readyz`` answers 200 once the
model is loaded and the consumer has joined its group, 503 before. Both take
plain callables so this module knows nothing of the engine.
"""

from __future__ import annotations

import threading
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer
from typing import Callable

from prometheus_client import CONTENT_TYPE_LATEST


class MetricsServer:
    """Serve on ``host:port`` (port 0: any free port, see ``.port``) in a daemon thread.

    >>> srv = MetricsServer(lambda: b"x 1\\n", lambda: True, lambda: False, port=0)
    >>> import urllib.request, urllib.error
    >>> urllib.request.urlopen(f"http://127.0.0.1:{srv.port}/healthz").status
    200
    >>> try:
    ...     urllib.request.urlopen(f"http://127.0.0.1:{srv.port}/readyz")
    ... except urllib.error.HTTPError as exc:
    ...     print(exc.code)
    503
    >>> srv.close()
    """

    def __init__(self, exposition: Callable[[], bytes], healthy: Callable[[], bool], ready: Callable[[], bool],
                 host: str = "127.0.0.1", port: int = 9464):
        routes = {
            "/metrics": lambda: (200, CONTENT_TYPE_LATEST, exposition()),
            "/healthz": lambda: _status(healthy(), "alive", "stalled"),
            "/readyz": lambda: _status(ready(), "ready", "not ready"),
        }

        class Handler(BaseHTTPRequestHandler):
            def do_GET(self) -> None:  # noqa: N802  (http.server's naming)
                route = routes.get(self.path.split("?", 1)[0])
                code, ctype, body = route() if route else (404, "text/plain", b"not found\n")
                self.send_response(code)
                self.send_header("Content-Type", ctype)
                self.send_header("Content-Length", str(len(body)))
                self.end_headers()
                self.wfile.write(body)

            def log_message(self, *args) -> None:  # keep scrapes out of the service log
                return None

        self._server = ThreadingHTTPServer((host, port), Handler)
        self._server.daemon_threads = True
        self.host, self.port = host, self._server.server_address[1]
        self._thread = threading.Thread(target=self._server.serve_forever, name="ktstream-http", daemon=True)
        self._thread.start()

    def close(self) -> None:
        self._server.shutdown()
        self._server.server_close()
        self._thread.join(timeout=5)

    def __enter__(self) -> "MetricsServer":
        return self

    def __exit__(self, *exc) -> None:
        self.close()


def _status(ok: bool, yes: str, no: str) -> tuple[int, str, bytes]:
    return (200, "text/plain", f"{yes}\n".encode()) if ok else (503, "text/plain", f"{no}\n".encode())
