"""Read one partition to its end as a read_committed consumer should: aborted transactions dropped.

A broker answers a read_committed fetch with the records below the last
stable offset *and* the list of aborted transactions in that range; the
client drops their records. Tansu (the embedded broker) sends the records but
an empty list, so a stock read_committed consumer there still sees aborted
records (connectors/kafka/transactional.py). This reader does not need the
list: it watches the raw record batches of every fetch (the fetcher's
``_parse_fetched_data``, per consumer instance) and resolves each producer's
transactional batches by the control marker that ends them (COMMIT keeps,
ABORT drops). Below the last stable offset every transaction has its marker,
so a bounded read resolves all of them. On Apache Kafka it is merely redundant.

``read_partition`` is bounded: it stops at the high-watermark the fetcher
reported (never ``end_offsets``: Tansu reports the last batch's base offset + 1)
or after ``idle_polls`` empty polls in a row.
"""

from __future__ import annotations

import time

import kafka.errors
from kafka import KafkaConsumer, TopicPartition
from kafka.record import MemoryRecords

from connectors.kafka.clients import common_config
from ktstream.config import KafkaSettings
from ktstream.engine.exceptions import EngineError
from ktstream.engine.records import Record


class _Markers:
    """Offsets of transactional records, resolved by their producers' COMMIT / ABORT markers."""

    def __init__(self):
        self.open: dict[int, list[tuple[int, int]]] = {}  # producer id -> [(first, last offset)]
        self.aborted: set[int] = set()

    def see(self, raw: bytes | None) -> None:
        if not raw:
            return
        records = MemoryRecords(raw)
        batch = records.next_batch()
        while batch is not None:
            if batch.magic == 2 and batch.is_transactional:
                if batch.is_control_batch:
                    marker = next(batch, None)
                    for first, last in self.open.pop(batch.producer_id, []):
                        if marker is not None and marker.abort:
                            self.aborted.update(range(first, last + 1))
                else:
                    self.open.setdefault(batch.producer_id, []).append((batch.base_offset, batch.last_offset))
            batch = records.next_batch()

    def committed(self, offset: int) -> bool:
        if offset in self.aborted:
            return False
        return not any(first <= offset <= last for spans in self.open.values() for first, last in spans)


def read_partition(settings: KafkaSettings, topic: str, partition: int, start: int = 0, timeout_s: float = 60.0,
                   idle_polls: int = 5, max_records: int | None = None) -> list[Record]:
    """The committed records of ``topic[partition]`` from offset ``start`` to its end, in offset order."""
    cfg = common_config(settings) | {"group_id": None, "enable_auto_commit": False,
                                     "isolation_level": "read_committed", "fetch_max_wait_ms": 100,
                                     "client_id": f"{settings.client_id}-reader", "check_crcs": False}
    try:
        consumer = KafkaConsumer(**cfg)
    except kafka.errors.KafkaError as exc:
        raise EngineError(f"cannot create a reader for {topic}[{partition}]: {exc}") from exc
    markers, parse = _Markers(), consumer._fetcher._parse_fetched_data

    def watching(completed_fetch):
        markers.see(completed_fetch.partition_data.records)
        return parse(completed_fetch)

    consumer._fetcher._parse_fetched_data = watching
    tp, out = TopicPartition(topic, partition), []
    try:
        consumer.assign([tp])
        if start > 0:
            consumer.seek(tp, start)
        else:
            consumer.seek_to_beginning(tp)
        deadline, idle = time.monotonic() + timeout_s, 0
        while time.monotonic() < deadline:
            got = consumer.poll(timeout_ms=200, max_records=5000).get(tp, [])
            out.extend(Record(m.topic, m.partition, m.offset, m.key, m.value, m.timestamp, tuple(m.headers or ()))
                       for m in got)
            hw = consumer.highwater(tp)
            idle = 0 if got else idle + 1
            if (hw is not None and consumer.position(tp) >= hw) or idle >= idle_polls \
                    or (max_records is not None and len(out) >= max_records):
                return [r for r in out if markers.committed(r.offset)]
        raise EngineError(f"reading {topic}[{partition}] took longer than {timeout_s}s")
    finally:
        consumer.close(autocommit=False)
