"""Kafka side of the state changelog: the reader a restore uses.

``read_changelog`` reads one changelog partition from ``start`` (the changelog
offset the local store already reflects; 0: the beginning) to its end, without
a consumer group, dropping records of aborted transactions even where the
broker does not (connectors.kafka.committed). The sink side is the plain
``KafkaSink``: it honours a changelog record's partition and headers.
"""

from __future__ import annotations

from typing import Iterator

from connectors.kafka.committed import read_partition
from connectors.kafka.sink import KafkaSink
from ktstream.config import KafkaSettings
from ktstream.engine.records import Record

StateSink = KafkaSink  # kept for callers of the previous name


def read_changelog(settings: KafkaSettings, topic: str, partition: int, start: int = 0, timeout_s: float = 60.0,
                   idle_polls: int = 5) -> Iterator[Record]:
    return iter(read_partition(settings, topic, partition, start, timeout_s, idle_polls))
