"""The two ports the engine needs: a source of ``Record`` objects and a sink of ``Output`` objects.

The engine never imports a Kafka client (connectors/ does). A source hands it
``Record`` objects and a sink takes ``Output`` objects; anything that
implements the two small protocols below can drive it: the Kafka connectors in
production, in-memory lists in the unit tests.

Offsets follow Kafka's convention: a committed offset is the *next* offset to
read, so committing ``{("events", 0): 42}`` means records 0..41 are done.
"""

from __future__ import annotations

from collections import Counter, deque
from typing import Callable, Iterable, Protocol

from ktstream.core import Output, Record, TopicPartition

PartitionsCallback = Callable[[list[TopicPartition]], None]


class Source(Protocol):
    """What the engine needs from an input connector.

    Rebalance callbacks (``on_assigned``, ``on_revoked``, ``on_lost``) are plain
    attributes the engine sets; a source calls them on the thread that calls
    ``poll``, before it returns records of a newly assigned partition.
    """

    on_assigned: PartitionsCallback
    on_revoked: PartitionsCallback
    on_lost: PartitionsCallback

    def poll(self, timeout_s: float, max_records: int) -> list[Record]: ...

    def commit(self, offsets: dict[TopicPartition, int]) -> None: ...

    def seek(self, offsets: dict[TopicPartition, int]) -> None: ...

    def assignment(self) -> set[TopicPartition]: ...

    def lag(self) -> dict[TopicPartition, int]: ...

    def close(self) -> None: ...

    # durable state and exactly-once also need: committed(tp) -> int | None,
    # read_partition(topic, partition, start) -> list[Record], group_metadata() -> object


class Sink(Protocol):
    """What the engine needs from an output connector: send, then flush (acks=all)."""

    def send(self, outputs: Iterable[Output]) -> None: ...

    def flush(self, timeout_s: float) -> None: ...

    def close(self) -> None: ...


class TransactionalSink(Sink, Protocol):
    """A sink for exactly-once: one transaction per micro-batch, holding the input offsets too.

    ``commit`` puts ``offsets`` into the transaction for the consumer group described by
    ``group_metadata`` (the source's ``group_metadata()``) and commits; it raises CommitError
    (or SinkError) on failure, after which the engine calls ``abort``.
    """

    transactional: bool

    def begin(self) -> None: ...

    def commit(self, offsets: dict[TopicPartition, int], group_metadata: object, timeout_s: float) -> None: ...

    def abort(self) -> None: ...


def ignore_partitions(partitions: list[TopicPartition]) -> None:
    return None


class MemorySource:
    """A list-backed source for tests and offline runs: one partition per list, commits recorded.

    >>> src = MemorySource([Record("ev", 0, 0, b"u1", b"{}")])
    >>> [r.offset for r in src.poll(0.0, 10)], src.poll(0.0, 10)
    ([0], [])
    >>> src.commit({("ev", 0): 1}); src.committed
    {('ev', 0): 1}
    """

    def __init__(self, records: Iterable[Record] = ()):
        self.pending: deque[Record] = deque(records)  # a poll takes from the front in O(records it returns)
        self.committed: dict[TopicPartition, int] = {}
        self.on_assigned = self.on_revoked = self.on_lost = ignore_partitions
        self._announced = False

    def poll(self, timeout_s: float, max_records: int) -> list[Record]:
        if not self._announced:
            self._announced = True
            self.on_assigned(sorted(self.assignment()))
        return [self.pending.popleft() for _ in range(min(max_records, len(self.pending)))]

    def commit(self, offsets: dict[TopicPartition, int]) -> None:
        self.committed.update(offsets)

    def seek(self, offsets: dict[TopicPartition, int]) -> None:
        raise NotImplementedError("MemorySource cannot rewind")

    def assignment(self) -> set[TopicPartition]:
        return {r.tp for r in self.pending} | set(self.committed)

    def lag(self) -> dict[TopicPartition, int]:
        lag = {tp: 0 for tp in self.assignment()}
        for r in self.pending:
            lag[r.tp] = lag.get(r.tp, 0) + 1
        return lag

    def close(self) -> None:
        return None


class MemorySink:
    """Collects outputs; ``flushed`` holds what a flush made durable, ``acked`` (as a Kafka sink's) the
    offset after the last record each flush made durable per (topic, partition), partition None as 0.

    >>> sink = MemorySink()
    >>> sink.send([Output("cl", b"a", b"1", 1), Output("cl", b"b", b"2", 1)]); sink.flush(1.0)
    >>> sink.acked
    {('cl', 1): 2}
    """

    def __init__(self):
        self.sent: list[Output] = []
        self.flushed: list[Output] = []
        self.acked: dict[TopicPartition, int] = {}  # of the last flush
        self._logs: Counter = Counter()  # records flushed per (topic, partition)

    def send(self, outputs: Iterable[Output]) -> None:
        self.sent.extend(outputs)

    def flush(self, timeout_s: float) -> None:
        self.acked = {}
        for o in self.sent:
            tp = (o.topic, o.partition or 0)
            self._logs[tp] += 1
            self.acked[tp] = self._logs[tp]
        self.flushed.extend(self.sent)
        self.sent = []

    def close(self) -> None:
        return None
