"""Kafka side of the state changelog: the reader a restore uses.

``read_changelog`` streams one changelog partition from ``start`` (the
changelog offset the local store already reflects; 0: the beginning) to the end
taken when the read starts (the last stable offset of the first fetch), without
a consumer group, dropping records of aborted transactions even where the
broker does not (connectors.kafka.committed). It never stops on an empty poll;
a read without progress for ``stall_timeout_s`` raises ReadStalledError. The
sink side is the plain ``KafkaSink``: it sends every output to its
``partition`` with its ``headers``.
"""

from __future__ import annotations

from typing import Iterator

from connectors.kafka.committed import stream_partition
from ktstream.config import KafkaSettings
from ktstream.core import Record


def read_changelog(settings: KafkaSettings, topic: str, partition: int, start: int = 0,
                   stall_timeout_s: float = 30.0) -> Iterator[Record]:
    return stream_partition(settings, topic, partition, start, stall_timeout_s)
