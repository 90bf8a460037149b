"""The HTTP endpoints under idle, half-sent requests: threads stay bounded, each request has a deadline,
and the probes still answer.

A slowloris client opens many connections and sends part of a request head, then nothing. With a
thread per connection and no timeout (http.server's ThreadingHTTPServer) 300 of them held 302 threads
for ever. Here they cost sockets, not threads; each is closed after ``request_timeout_s``; and
``/healthz`` answers meanwhile.
"""

from __future__ import annotations

import socket
import threading
import urllib.request

import pytest
from prometheus_client import CollectorRegistry, Gauge

from ktstream.engine.server import MetricsServer

HALF = b"GET /healthz HTTP/1.1\r\nHost: ktstream\r\n"  # no blank line: the head never ends


@pytest.fixture
def server():
    registry = CollectorRegistry()
    Gauge("ktstream_up", "Up.", registry=registry).set(1)
    srv = MetricsServer(registry, lambda: True, lambda: True, port=0, request_timeout_s=1.0,
                        max_connections=64, workers=2)
    yield srv
    srv.close()


def idle_clients(port: int, n: int) -> list[socket.socket]:
    clients = []
    for _ in range(n):
        c = socket.create_connection(("127.0.0.1", port), timeout=10)
        c.sendall(HALF)
        clients.append(c)
    return clients


def get(port: int, path: str) -> tuple[int, bytes]:
    try:
        with urllib.request.urlopen(f"http://127.0.0.1:{port}{path}", timeout=10) as r:
            return r.status, r.read()
    except urllib.error.HTTPError as exc:
        return exc.code, exc.read()


def test_http_limits_idle_half_sent_requests_hold_no_threads_and_healthz_answers(server):
    before = threading.active_count()
    clients = idle_clients(server.port, 300)
    try:
        assert get(server.port, "/healthz") == (200, b"alive\n")  # queued behind all 300 idle connections
        code, body = get(server.port, "/metrics")
        assert code == 200 and b"\nktstream_up 1.0\n" in body
        assert threading.active_count() - before <= 2, "at most the worker threads were added"
    finally:
        for c in clients:
            c.close()


def test_http_limits_a_half_sent_request_is_closed_after_the_request_timeout(server):
    (client,) = idle_clients(server.port, 1)
    with client:
        assert client.recv(1024) == b"", "the server closed the idle connection (recv waits at most 10 s)"


def test_http_limits_answer_bad_requests_plainly(server):
    assert get(server.port, "/nowhere")[0] == 404
    with socket.create_connection(("127.0.0.1", server.port), timeout=10) as c:
        c.sendall(b"POST /metrics HTTP/1.1\r\nHost: k\r\n\r\n")
        assert c.recv(1024).startswith(b"HTTP/1.0 405 ")
    with socket.create_connection(("127.0.0.1", server.port), timeout=10) as c:
        c.sendall(b"GET /" + b"x" * 10_000)
        assert c.recv(1024).startswith(b"HTTP/1.0 431 ")


def test_http_limits_a_connection_dropped_for_room_is_not_read_again(server):
    """One select round can report a connection readable after an accept in the same round dropped it
    (the oldest makes room): reading it then is a no-op. It was an error that ended the server's thread
    (recv on the closed socket, then unregistering an invalid file descriptor), and /healthz with it."""
    (client,) = idle_clients(server.port, 1)
    with client:
        for _ in range(500):  # until the server thread has accepted it (at most 5 s)
            if server._heads:
                break
            threading.Event().wait(0.01)
        server._stop.set()  # the round below runs on this thread, as the server's own would
        server._waker.send(b"x")
        server._thread.join(5)
        assert not server._thread.is_alive()
        conn = next(iter(server._heads))
        server._drop(conn)  # what _accept does to the oldest connection when it needs room
        server._read(conn)  # the same round's readiness event for it
    assert conn not in server._heads
