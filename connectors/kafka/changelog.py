"""Kafka side of the state changelog: a sink that honours explicit partitions and headers, and a reader.

``StateSink`` is the engine's ``KafkaSink`` that sends a ``ChangelogOutput`` to
its own partition (the input partition its learner came from) with its source
headers; other outputs go as before (partitioned by key).

``read_changelog`` reads one changelog partition from the beginning without a
consumer group (``assign``). It stops at the high-watermark the fetcher reported
(never ``end_offsets``: Tansu reports the last batch's base offset + 1) or,
when no fetch reported one, after ``idle_polls`` empty polls in a row.
"""

from __future__ import annotations

import time
from typing import Iterator

import kafka.errors
from kafka import KafkaConsumer, TopicPartition

from connectors.kafka.clients import common_config
from connectors.kafka.sink import KafkaSink
from ktstream.config import KafkaSettings
from ktstream.engine.exceptions import EngineError, SinkError
from ktstream.engine.records import Record
from ktstream.state.changelog import ChangelogOutput


class StateSink(KafkaSink):
    def send(self, outputs) -> None:
        producer = self.producer
        try:
            for o in outputs:
                if isinstance(o, ChangelogOutput):
                    fut = producer.send(o.topic, key=o.key, value=o.value, partition=o.partition,
                                        headers=list(o.headers))
                else:
                    fut = producer.send(o.topic, key=o.key, value=o.value)
                self._pending.append(fut)
        except kafka.errors.KafkaError as exc:
            raise SinkError(f"send failed: {exc}") from exc


def read_changelog(settings: KafkaSettings, topic: str, partition: int, timeout_s: float = 60.0,
                   idle_polls: int = 5) -> Iterator[Record]:
    cfg = common_config(settings) | {"group_id": None, "enable_auto_commit": False,
                                     "isolation_level": settings.isolation_level, "fetch_max_wait_ms": 100,
                                     "client_id": f"{settings.client_id}-restore"}
    try:
        consumer = KafkaConsumer(**cfg)
    except kafka.errors.KafkaError as exc:
        raise EngineError(f"cannot create the changelog consumer: {exc}") from exc
    tp = TopicPartition(topic, partition)
    try:
        consumer.assign([tp])
        consumer.seek_to_beginning(tp)
        deadline, idle = time.monotonic() + timeout_s, 0
        while time.monotonic() < deadline:
            got = consumer.poll(timeout_ms=200, max_records=5000).get(tp, [])
            for m in got:
                yield Record(m.topic, m.partition, m.offset, m.key, m.value, m.timestamp)
            hw = consumer.highwater(tp)
            if hw is not None and consumer.position(tp) >= hw:
                return
            idle = 0 if got else idle + 1
            if idle >= idle_polls:
                return
        raise EngineError(f"restoring from {topic}[{partition}] took longer than {timeout_s}s")
    finally:
        consumer.close(autocommit=False)
