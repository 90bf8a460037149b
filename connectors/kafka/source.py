"""Kafka source: a kafka-python 3.0 consumer-group member that returns micro-batches of plain records.

- Assignment: ``cooperative-sticky`` (KIP-429, supported by kafka-python 3.0 and
  by Tansu) by default, so a rebalance moves only the partitions that change
  owner; ``range`` / ``roundrobin`` on request.
- Rebalance callbacks: kafka-python may run its listener on its IO thread;
  here it only queues the event, and ``poll`` hands the queued events to the
  engine's plain callables (``on_assigned`` / ``on_revoked`` / ``on_lost``) on the
  polling thread, before it returns any record.
- Offsets are committed by the engine (``commit``), never automatically.
- Lag = the fetcher's high-watermark minus the next offset to read. Never
  ``end_offsets`` (Tansu reports the last batch's base offset + 1) and never
  offsets-for-times.
- Lazy: constructing it makes no network call; the first ``poll`` connects.
"""

from __future__ import annotations

import logging
from collections import deque
from typing import Iterator

import kafka.errors
from kafka import KafkaConsumer, TopicPartition
from kafka.consumer.subscription_state import ConsumerRebalanceListener
from kafka.partitioner.default import murmur2
from kafka.structs import OffsetAndMetadata

from connectors.kafka.clients import consumer_config
from ktstream.config import KafkaSettings
from ktstream.core import Record, TopicPartition as TP
from ktstream.engine.exceptions import CommitError, EngineError
from ktstream.engine.records import ignore_partitions

log = logging.getLogger(__name__)


def dispatch_rebalance(source) -> None:
    """Hand the queued rebalance events to the source's callbacks, in order, on the caller's thread;
    a partition that is revoked or lost forgets its next offset. Shared by both clients' sources."""
    while source._events:
        kind, partitions = source._events.popleft()
        if kind != "assigned":
            for tp in partitions:
                source._next.pop(tp, None)
        {"assigned": source.on_assigned, "revoked": source.on_revoked, "lost": source.on_lost}[kind](partitions)


class _Queued(ConsumerRebalanceListener):
    def __init__(self, events: deque):
        self.events = events

    def on_partitions_revoked(self, revoked):
        self.events.append(("revoked", sorted((tp.topic, tp.partition) for tp in revoked)))

    def on_partitions_assigned(self, assigned):
        self.events.append(("assigned", sorted((tp.topic, tp.partition) for tp in assigned)))

    def on_partitions_lost(self, lost):
        self.events.append(("lost", sorted((tp.topic, tp.partition) for tp in lost)))


class KafkaSource:
    def __init__(self, settings: KafkaSettings, topics: list[str] | None = None, max_poll_records: int = 1000,
                 **overrides):
        self.settings, self.topics = settings, topics or [settings.topics.events]
        self.config = consumer_config(settings, max_poll_records) | overrides
        self.on_assigned = self.on_revoked = self.on_lost = ignore_partitions
        self._consumer: KafkaConsumer | None = None
        self._events: deque = deque()
        self._next: dict[TP, int] = {}  # next offset to read, per partition we got records from

    @property
    def consumer(self) -> KafkaConsumer:
        if self._consumer is None:
            try:
                self._consumer = KafkaConsumer(**self.config)
            except kafka.errors.KafkaError as exc:
                raise EngineError(f"cannot create the Kafka consumer: {exc}") from exc
            self._consumer.subscribe(self.topics, listener=_Queued(self._events))
        return self._consumer

    def poll(self, timeout_s: float, max_records: int) -> list[Record]:
        try:
            batches = self.consumer.poll(timeout_ms=int(timeout_s * 1000), max_records=max_records)
        except kafka.errors.KafkaError as exc:
            raise EngineError(f"poll failed: {exc}") from exc
        try:
            self._dispatch()
        except BaseException:  # e.g. a failed restore: records fetched in this poll must be fetched again
            for tp, msgs in batches.items():
                if msgs and tp in self.consumer.assignment():
                    self.consumer.seek(tp, msgs[0].offset)
            raise
        new = tuple.__new__  # Record's own constructor is a Python call, once per record
        out = [new(Record, (m.topic, m.partition, m.offset, m.key, m.value, m.timestamp, (), (m.topic, m.partition)))
               for tp in sorted(batches) for m in batches[tp]]
        for tp, msgs in batches.items():
            if msgs:
                self._next[(tp.topic, tp.partition)] = msgs[-1].offset + 1
        return out

    def _dispatch(self) -> None:
        dispatch_rebalance(self)

    def commit(self, offsets: dict[TP, int]) -> None:
        try:
            self.consumer.commit({TopicPartition(t, p): OffsetAndMetadata(o, "", -1) for (t, p), o in offsets.items()})
        except (kafka.errors.CommitFailedError, kafka.errors.IllegalStateError,
                kafka.errors.RebalanceInProgressError) as exc:
            raise CommitError(str(exc)) from exc
        except kafka.errors.KafkaError as exc:
            raise CommitError(f"commit failed: {exc}") from exc

    def seek(self, offsets: dict[TP, int]) -> None:
        for (t, p), off in offsets.items():
            self.consumer.seek(TopicPartition(t, p), off)
            self._next[(t, p)] = off

    def assignment(self) -> set[TP]:
        return {(tp.topic, tp.partition) for tp in self.consumer.assignment()}

    def partition_of(self, key: bytes) -> TP | None:
        """The input partition a record keyed ``key`` goes to under Kafka's default partitioner (murmur2 over
        the topic's sorted partition ids, as producers keying by learner id use); None before the
        consumer knows the topic. Engine thread only (the consumer is not thread-safe)."""
        if self._consumer is None:
            return None
        topic = self.topics[0]
        partitions = self._consumer.partitions_for_topic(topic)
        if not partitions:
            return None
        ordered = sorted(partitions)
        return topic, ordered[(murmur2(key) & 0x7FFFFFFF) % len(ordered)]

    def lag(self) -> dict[TP, int]:
        """High-watermark (from the last fetch response) minus the next offset to read."""
        out: dict[TP, int] = {}
        if self._consumer is None:
            return out
        for tp in self._consumer.assignment():
            key = (tp.topic, tp.partition)
            hw = self._consumer.highwater(tp)
            if hw is not None and key in self._next:
                out[key] = max(hw - self._next[key], 0)
        return out

    def committed(self, tp: TP) -> int | None:
        try:
            return self.consumer.committed(TopicPartition(*tp))
        except kafka.errors.KafkaError as exc:
            raise EngineError(f"cannot read the committed offset of {tp}: {exc}") from exc

    def group_metadata(self):
        """The consumer's group metadata, for ``send_offsets_to_transaction`` (exactly-once)."""
        return self.consumer.group_metadata()

    def generation(self) -> int:
        """The consumer group generation this member is in (-1 before it joined); fences changelog writers."""
        if self._consumer is None:
            return -1
        return self._consumer.group_metadata().generation_id

    def read_partition(self, topic: str, partition: int, start: int = 0) -> Iterator[Record]:
        """Another topic's partition from ``start`` to its end, committed records only, streamed (a state
        restore; connectors.kafka.committed.stream_partition, failing after ``read_stall_timeout_s``
        without progress)."""
        from connectors.kafka.committed import stream_partition

        return stream_partition(self.settings, topic, partition, start, self.settings.read_stall_timeout_s)

    def close(self) -> None:
        if self._consumer is not None:
            self._consumer.close(autocommit=False)
            self._dispatch()
            self._consumer = None
