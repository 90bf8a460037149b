"""Kafka sink: predictions, dead letters and changelog records through one idempotent producer (acks=all).

Messages are keyed by learner id (the engine sets the key), so a learner's
predictions land on one partition, in order (idempotence keeps order with up
to 5 requests in flight). An output's ``partition`` (None: the partitioner
chooses by key) and ``headers`` go with it (a changelog record names both,
ktstream.state.changelog). ``flush`` waits for every acknowledgement and
raises ``SinkError`` if any send failed, so the engine does not commit the
batch; ``acked`` then holds, per (topic, partition), the offset after the
last acknowledged record (the changelog checkpoint the store records), unless
the sink was made with ``track_acked=False`` (no durable state reads it).
Every failure (send, flush) forgets the pending sends, so a batch processed
again after its rollback never waits on, or counts, an earlier attempt's.
``max_record_bytes`` is the producer's ``max_request_size``: the engine
dead-letters what would be larger before sending (kafka-python refuses it).
Lazy: constructing it makes no network call.
"""

from __future__ import annotations

from typing import Iterable

import kafka.errors
from kafka import KafkaProducer

from connectors.kafka.clients import producer_config
from ktstream.config import KafkaSettings
from ktstream.core import Output, TopicPartition
from ktstream.engine.exceptions import SinkError


#: kafka-python's default ``max_request_size`` (as Apache Kafka's ``max.request.size``).
DEFAULT_MAX_REQUEST_SIZE = 1_048_576


class KafkaSink:
    def __init__(self, settings: KafkaSettings, track_acked: bool = True, **overrides):
        self.config = producer_config(settings) | overrides
        self.track_acked = track_acked  # False: acked stays empty (a sink without a changelog reader)
        self.max_record_bytes = int(self.config.get("max_request_size", DEFAULT_MAX_REQUEST_SIZE))
        self._producer: KafkaProducer | None = None
        self._pending: list = []
        self.acked: dict[TopicPartition, int] = {}  # of the last flush

    @property
    def producer(self) -> KafkaProducer:
        if self._producer is None:
            try:
                self._producer = KafkaProducer(**self.config)
            except kafka.errors.KafkaError as exc:
                raise SinkError(f"cannot create the Kafka producer: {exc}") from exc
        return self._producer

    def send(self, outputs: Iterable[Output]) -> None:
        producer = self.producer
        try:
            for o in outputs:
                self._pending.append(producer.send(o.topic, key=o.key, value=o.value, partition=o.partition,
                                                   headers=list(o.headers) or None))
        except kafka.errors.KafkaError as exc:
            self._pending = []
            raise SinkError(f"send failed: {exc}") from exc

    def flush(self, timeout_s: float) -> None:
        """Block until every pending message is acknowledged; raise SinkError on any failure."""
        pending, self._pending = self._pending, []
        self.acked = {}
        if self._producer is None:
            return
        try:
            self._producer.flush(timeout=timeout_s)
        except kafka.errors.KafkaError as exc:
            raise SinkError(f"flush failed: {exc}") from exc
        self._check(pending)

    def _check(self, pending: list) -> None:
        failed = [f for f in pending if not f.is_done or f.failed()]
        if failed:
            first = failed[0].exception if failed[0].is_done else "not acknowledged in time"
            raise SinkError(f"{len(failed)} of {len(pending)} messages not acknowledged: {first}")
        if not self.track_acked:
            return
        for f in pending:
            md = f.value
            key = (md.topic, md.partition)
            self.acked[key] = max(self.acked.get(key, 0), md.offset + 1)

    def close(self) -> None:
        if self._producer is not None:
            self._producer.close(timeout=10)
            self._producer = None
