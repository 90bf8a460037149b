"""Kafka source on confluent-kafka (librdkafka): the same interface as ``KafkaSource`` (kafka-python).

- Batched consume: ``consume(num_messages, timeout=0)`` takes up to ``max_records`` messages
  that librdkafka's fetcher thread has prefetched; only when there are none does ``poll`` wait
  (up to the engine's poll timeout) for the first, then takes what arrived with it. A blocking
  ``consume(num_messages, timeout)`` would hold every micro-batch until it is full or the timeout
  passed (50 ms by default: that much latency at low rates). Each message becomes one ``Record``
  (the engine's only per-message object), nothing else is made per message.
- Assignment: ``cooperative-sticky`` by default (librdkafka's incremental rebalancing). The
  rebalance callbacks (``on_assign`` / ``on_revoke`` / ``on_lost``) run inside ``consume`` on the
  engine's thread; here they only queue the event (confluent-kafka applies the incremental
  assignment itself when the callback does not), and ``poll`` hands the queued events to the
  engine's callables before it returns any record, as ``KafkaSource`` does.
- Offsets are committed by the engine (``commit``, synchronous), never automatically (no auto
  commit, no auto offset store).
- Lag: librdkafka's cached high-watermark (from the last fetch response) minus the next offset to
  read; never a broker round trip, never offsets-for-times.
- ``generation``: the group generation, read from librdkafka's serialised group metadata.
- ``read_partition`` (a state restore) uses the kafka-python committed reader: on the embedded
  broker (Tansu) a read_committed fetch lists no aborted transactions, and librdkafka does not
  expose the control records that tell them, so only that reader drops aborted records there
  (connectors.kafka.committed). kafka-python is a core dependency; a restore is not the hot path.
- Lazy: constructing it makes no network call; the first ``poll`` connects.
"""

from __future__ import annotations

import logging
from collections import deque
from typing import Iterator

from kafka.partitioner.default import murmur2

from connectors.kafka.confluent_clients import confluent_kafka, consumer_config, generation_of
from connectors.kafka.source import dispatch_rebalance
from ktstream.config import KafkaSettings
from ktstream.core import Record, TopicPartition as TP
from ktstream.engine.exceptions import CommitError, EngineError
from ktstream.engine.records import ignore_partitions

log = logging.getLogger(__name__)

#: librdkafka's "no offset" (OFFSET_INVALID): nothing committed.
NO_OFFSET = -1001


class ConfluentSource:
    def __init__(self, settings: KafkaSettings, topics: list[str] | None = None, max_poll_records: int = 1000,
                 **overrides):
        self.ck = confluent_kafka()  # ConfigError now, not at the first poll, when the extra is missing
        self.settings, self.topics = settings, topics or [settings.topics.events]
        self.config = consumer_config(settings) | overrides
        self.max_poll_records = max_poll_records
        self.on_assigned = self.on_revoked = self.on_lost = ignore_partitions
        self._consumer = None
        self._events: deque = deque()
        self._next: dict[TP, int] = {}  # next offset to read, per partition we got records from
        self._partitions: dict[str, list[int]] = {}  # partition ids per topic (partition_of)

    @property
    def consumer(self):
        if self._consumer is None:
            try:
                self._consumer = self.ck.Consumer(self.config, logger=log)
            except (self.ck.KafkaException, ValueError, TypeError) as exc:
                raise EngineError(f"cannot create the Kafka consumer: {exc}") from exc
            queue = self._events.append
            self._consumer.subscribe(
                self.topics,
                on_assign=lambda c, tps: queue(("assigned", sorted((tp.topic, tp.partition) for tp in tps))),
                on_revoke=lambda c, tps: queue(("revoked", sorted((tp.topic, tp.partition) for tp in tps))),
                on_lost=lambda c, tps: queue(("lost", sorted((tp.topic, tp.partition) for tp in tps))))
        return self._consumer

    def poll(self, timeout_s: float, max_records: int) -> list[Record]:
        consumer = self.consumer
        try:
            messages = consumer.consume(num_messages=max_records, timeout=0)  # what is prefetched now
            if not messages:  # wait for the first record only, then take what is there: consume(n, timeout)
                first = consumer.poll(timeout_s)  # would hold every micro-batch until n or the timeout
                if first is not None:
                    messages = [first] + (consumer.consume(num_messages=max_records - 1, timeout=0)
                                          if max_records > 1 else [])
        except self.ck.KafkaException as exc:
            raise EngineError(f"poll failed: {exc}") from exc
        out, last, ordered, previous, new = [], {}, True, None, tuple.__new__
        for m in messages:
            err = m.error()
            if err is not None:
                if err.fatal():
                    raise EngineError(f"poll failed: {err}")
                log.warning("consumer: %s", err)
                continue
            topic, partition, offset = m.topic(), m.partition(), m.offset()
            tp = (topic, partition)  # tuple.__new__: Record's own constructor is a Python call, once per record
            rec = new(Record, (topic, partition, offset, m.key(), m.value(), m.timestamp()[1],
                               tuple(m.headers() or ()), tp))
            out.append(rec)
            last[tp] = offset
            if previous is not None and previous > tp:
                ordered = False
            previous = tp
        try:
            self._dispatch()
        except BaseException:  # e.g. a failed restore: records fetched in this poll must be fetched again
            firsts: dict[TP, int] = {}
            for r in out:
                firsts.setdefault(r.tp, r.offset)
            mine = self.assignment()
            self.seek({tp: off for tp, off in firsts.items() if tp in mine})
            raise
        for tp, offset in last.items():
            self._next[tp] = offset + 1
        if not ordered:
            out.sort(key=lambda r: r.tp)  # stable: each partition's records stay in offset order
        return out

    def _dispatch(self) -> None:
        dispatch_rebalance(self)

    def commit(self, offsets: dict[TP, int]) -> None:
        tps = [self.ck.TopicPartition(t, p, o) for (t, p), o in offsets.items()]
        try:
            result = self.consumer.commit(offsets=tps, asynchronous=False)
        except self.ck.KafkaException as exc:
            raise CommitError(f"commit failed: {exc}") from exc
        failed = [tp for tp in result or () if tp.error is not None]
        if failed:
            raise CommitError(f"commit failed for {[(tp.topic, tp.partition) for tp in failed]}: {failed[0].error}")

    def seek(self, offsets: dict[TP, int]) -> None:
        for (t, p), off in offsets.items():
            try:
                self.consumer.seek(self.ck.TopicPartition(t, p, off))
            except self.ck.KafkaException as exc:
                raise EngineError(f"cannot seek {(t, p)} to {off}: {exc}") from exc
            self._next[(t, p)] = off

    def assignment(self) -> set[TP]:
        return {(tp.topic, tp.partition) for tp in self.consumer.assignment()}

    def partition_of(self, key: bytes) -> TP | None:
        """The input partition a record keyed ``key`` goes to under Kafka's default partitioner (murmur2 over
        the topic's sorted partition ids); None before the consumer knows the topic. Engine thread only."""
        if self._consumer is None:
            return None
        topic = self.topics[0]
        ordered = self._partitions.get(topic)
        if not ordered:
            try:
                meta = self._consumer.list_topics(topic, timeout=2.0).topics.get(topic)
            except self.ck.KafkaException:
                return None
            if meta is None or meta.error is not None or not meta.partitions:
                return None
            ordered = self._partitions[topic] = sorted(meta.partitions)
        return topic, ordered[(murmur2(key) & 0x7FFFFFFF) % len(ordered)]

    def lag(self) -> dict[TP, int]:
        """High-watermark (librdkafka's, from the last fetch response) minus the next offset to read."""
        out: dict[TP, int] = {}
        if self._consumer is None:
            return out
        for tp in self._consumer.assignment():
            key = (tp.topic, tp.partition)
            if key not in self._next:
                continue
            try:
                _, hw = self._consumer.get_watermark_offsets(tp, cached=True)
            except self.ck.KafkaException:
                continue
            if hw is not None and hw >= 0:
                out[key] = max(hw - self._next[key], 0)
        return out

    def committed(self, tp: TP) -> int | None:
        try:
            [answer] = self.consumer.committed([self.ck.TopicPartition(*tp)], timeout=30.0)
        except self.ck.KafkaException as exc:
            raise EngineError(f"cannot read the committed offset of {tp}: {exc}") from exc
        if answer.error is not None:
            raise EngineError(f"cannot read the committed offset of {tp}: {answer.error}")
        return None if answer.offset < 0 else answer.offset

    def group_metadata(self):
        """The consumer's group metadata, for ``send_offsets_to_transaction`` (exactly-once)."""
        return self.consumer.consumer_group_metadata()

    def generation(self) -> int:
        """The consumer group generation this member is in (-1 before it joined); fences changelog writers."""
        if self._consumer is None:
            return -1
        return generation_of(self._consumer.consumer_group_metadata())

    def read_partition(self, topic: str, partition: int, start: int = 0) -> Iterator[Record]:
        """Another topic's partition from ``start`` to its end, committed records only, streamed (a state
        restore: connectors.kafka.committed.stream_partition, which drops aborted records on any broker)."""
        from connectors.kafka.committed import stream_partition

        return stream_partition(self.settings, topic, partition, start, self.settings.read_stall_timeout_s)

    def close(self) -> None:
        if self._consumer is not None:
            try:
                self._consumer.close()  # leaves the group: the revoke callback queues, dispatched below
            except (self.ck.KafkaException, RuntimeError) as exc:
                log.warning("closing the consumer: %s", exc)
            self._dispatch()
            self._consumer = None
