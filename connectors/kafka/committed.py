"""Read one partition to its end as a read_committed consumer should: aborted transactions dropped.

The end is taken once, from the first fetch response after the reader is
assigned: the last stable offset (read_committed: below it every transaction
has its COMMIT / ABORT marker; Tansu reports it correctly), or the
high-watermark where a broker reports no last stable offset. Never
``end_offsets``: Tansu answers it with the last batch's base offset + 1 (0 for
read_committed). The read ends only when the position reaches that end:
an empty poll is never the end (a slow broker answers late, not "nothing
left"). A read that makes no progress (no record, no position advance) for
``stall_timeout_s`` raises ``ReadStalledError``; the caller retries or fails.
There is no cap on the total time: a slow broker that keeps moving is waited for.

A broker answers a read_committed fetch with the records below the last
stable offset *and* the list of aborted transactions in that range; the
client drops their records. Tansu sends the records but an empty list, so a
stock read_committed consumer there still sees aborted records
(connectors/kafka/transactional.py). This reader does not need the list: it
watches the raw record batches of every fetch (the fetcher's
``_parse_fetched_data``, per consumer instance) and resolves each producer's
transactional batches by the control marker that ends them (COMMIT keeps,
ABORT drops). On Apache Kafka it is merely redundant.

``stream_partition`` yields records as they resolve: memory holds one poll's
records and the records of transactions whose marker has not arrived yet, never
the whole partition. ``read_partition`` collects the stream into a list (tests,
harnesses reading an output topic).
"""

from __future__ import annotations

import time
from contextlib import closing
from typing import Iterator

import kafka.errors
from kafka import KafkaConsumer, TopicPartition
from kafka.record import MemoryRecords

from connectors.kafka.clients import common_config
from ktstream.config import KafkaSettings
from ktstream.core import Record
from ktstream.engine.exceptions import EngineError


class ReadStalledError(EngineError):
    """A partition read made no progress for its stall timeout (a stalled or unreachable broker)."""


class _Markers:
    """Transactional record spans, resolved by their producers' COMMIT / ABORT markers.

    ``see`` runs when a fetch response is parsed, before its records leave ``poll``; ``resolve`` then
    sorts a record into committed, aborted or still open. Resolved spans are forgotten once the
    read position has passed them, so memory follows the open transactions, not the partition.
    """

    def __init__(self):
        self.open: dict[int, list[tuple[int, int]]] = {}  # producer id -> [(first, last offset)]
        self.aborted: list[tuple[int, int]] = []  # spans below the markers seen so far

    def see(self, raw: bytes | None) -> None:
        if not raw:
            return
        records = MemoryRecords(raw)
        batch = records.next_batch()
        while batch is not None:
            if batch.magic == 2 and batch.is_transactional:
                if batch.is_control_batch:
                    marker = next(batch, None)
                    spans = self.open.pop(batch.producer_id, [])
                    if marker is not None and marker.abort:
                        self.aborted.extend(spans)
                else:
                    self.open.setdefault(batch.producer_id, []).append((batch.base_offset, batch.last_offset))
            batch = records.next_batch()

    def is_open(self, offset: int) -> bool:
        return any(first <= offset <= last for spans in self.open.values() for first, last in spans)

    def is_aborted(self, offset: int) -> bool:
        return any(first <= offset <= last for first, last in self.aborted)

    def forget_before(self, offset: int) -> None:
        self.aborted = [(first, last) for first, last in self.aborted if last >= offset]


class _Fetches:
    """The fetcher's parse step, watched: markers of every response and the end from the first one."""

    def __init__(self, consumer: KafkaConsumer, markers: _Markers):
        self.markers, self.end = markers, None
        self.parse = consumer._fetcher._parse_fetched_data
        consumer._fetcher._parse_fetched_data = self

    def __call__(self, completed_fetch):
        data = completed_fetch.partition_data
        if data.error_code == 0:
            self.markers.see(data.records)
            if self.end is None:
                lso = getattr(data, "last_stable_offset", -1)
                self.end = lso if lso is not None and lso >= 0 else (
                    data.high_watermark if data.high_watermark >= 0 else None)
        return self.parse(completed_fetch)


def _record(m) -> Record:
    return Record(m.topic, m.partition, m.offset, m.key, m.value, m.timestamp, tuple(m.headers or ()))


def stream_partition(settings: KafkaSettings, topic: str, partition: int, start: int = 0,
                     stall_timeout_s: float = 30.0, max_poll_records: int = 2000) -> Iterator[Record]:
    """The committed records of ``topic[partition]`` from ``start`` to the end taken at the first fetch.

    Committed records come in offset order except that a transaction's records wait for its COMMIT
    marker. Raises ReadStalledError after ``stall_timeout_s`` without progress and EngineError when
    the client fails.
    """
    cfg = common_config(settings) | {"group_id": None, "enable_auto_commit": False,
                                     "isolation_level": "read_committed", "fetch_max_wait_ms": 100,
                                     "client_id": f"{settings.client_id}-reader", "check_crcs": False,
                                     "max_poll_records": max_poll_records,
                                     "bootstrap_timeout_ms": max(1000, int(stall_timeout_s * 1000))}
    try:
        consumer = KafkaConsumer(**cfg)
    except kafka.errors.KafkaError as exc:
        raise EngineError(f"cannot create a reader for {topic}[{partition}]: {exc}") from exc
    markers = _Markers()
    fetches = _Fetches(consumer, markers)
    tp, held = TopicPartition(topic, partition), []  # held: records of transactions without a marker yet
    position, last_progress = max(start, 0), time.monotonic()
    try:
        consumer.assign([tp])
        consumer.seek(tp, position)
        while True:
            got = [_record(m) for m in consumer.poll(timeout_ms=200).get(tp, [])]
            held.extend(got)
            still = []
            for rec in held:
                if markers.is_open(rec.offset):
                    still.append(rec)
                elif not markers.is_aborted(rec.offset):
                    yield rec
            held = still
            now_at = consumer.position(tp)
            if got or now_at > position:
                position, last_progress = now_at, time.monotonic()
                markers.forget_before(min([position] + [r.offset for r in held]))
            if fetches.end is not None and position >= fetches.end:
                return  # records still held belong to transactions open at the end: not committed
            if time.monotonic() - last_progress > stall_timeout_s:
                raise ReadStalledError(
                    f"reading {topic}[{partition}] made no progress for {stall_timeout_s}s at offset {position} "
                    f"(end {'unknown: no fetch answered' if fetches.end is None else fetches.end})")
    except kafka.errors.KafkaError as exc:
        raise EngineError(f"reading {topic}[{partition}] failed at offset {position}: {exc}") from exc
    finally:
        consumer.close(autocommit=False)


def read_partition(settings: KafkaSettings, topic: str, partition: int, start: int = 0, timeout_s: float = 60.0,
                   idle_polls: int | None = None, max_records: int | None = None) -> list[Record]:
    """The committed records of ``topic[partition]`` from ``start`` to its end, in offset order.

    ``timeout_s`` is the stall timeout (ReadStalledError); ``idle_polls`` is accepted for older callers
    and has no effect: empty polls never end a read. ``max_records`` stops after that many records.
    """
    out: list[Record] = []
    with closing(stream_partition(settings, topic, partition, start, stall_timeout_s=timeout_s)) as records:
        for rec in records:
            out.append(rec)
            if max_records is not None and len(out) >= max_records:
                break
    return sorted(out, key=lambda r: r.offset)
