"""Kafka sinks on confluent-kafka (librdkafka): the interfaces of ``KafkaSink`` and ``TransactionalSink``.

``ConfluentSink``: one idempotent producer (acks=all); ``send`` hands every output to librdkafka's
queue (``produce``: key, value, ``partition`` when the output names one, ``headers``), and ``flush``
returns once every delivery report of the batch arrived, raising ``SinkError`` if any failed or did
not arrive in time, so the engine does not commit the batch. One delivery callback per producer
(set in its configuration, no closure per message) keeps ``acked``: per (topic, partition), the
offset after the last acknowledged record (the changelog checkpoint the store records). Made with
``track_acked=False`` (no durable state reads ``acked``), the producer reports failed deliveries only
(``delivery.report.only.error``): no Python callback per message; ``flush`` still returns only once
librdkafka's queue is empty, every record acknowledged or failed. Every
failure forgets the pending sends' reports, so a batch processed again after its rollback never
counts an earlier attempt's. librdkafka's ``flush`` sends what waits for ``linger.ms`` at once.
The producer is created with the sink: the call does not block, and librdkafka's threads connect and
get the idempotent producer id meanwhile (on the embedded broker that held the first micro-batch's
flush for 0.5 s when it waited for the first ``send``, while the consumer group was joining anyway).

``ConfluentTransactionalSink``: one producer transaction per micro-batch, as
connectors.kafka.transactional (``transactional.id`` = ``<client_id>-<group_id>-<instance_id>``;
``begin``, ``send``, ``commit(offsets, group_metadata)``, ``abort``, ``settle``). librdkafka
classifies each error: ``txn_requires_abort`` (the engine aborts and retries the batch), fatal
(fenced, ...: the producer is dropped, its successor's ``init_transactions`` aborts what was open),
retriable (a ``commit_transaction`` that timed out is resumed by calling it again, which librdkafka
supports, up to the commit timeout). A commit whose outcome is still unknown after that raises
``CommitOutcomeUnknownError`` and drops the producer without aborting; ``settle`` starts the
successor, whose ``init_transactions`` returns once the coordinator has finished it.
"""

from __future__ import annotations

import logging
import time
from typing import Iterable

from connectors.kafka.confluent_clients import confluent_kafka, producer_config
from connectors.kafka.transactional import transactional_id
from ktstream.config import KafkaSettings, StateSettings
from ktstream.core import Output, TopicPartition as TP
from ktstream.engine.exceptions import CommitError, CommitOutcomeUnknownError, SinkError

log = logging.getLogger(__name__)

#: librdkafka's default ``message.max.bytes`` (the largest record the producer accepts).
DEFAULT_MAX_MESSAGE_BYTES = 1_000_000


class ConfluentSink:
    transactional = False

    def __init__(self, settings: KafkaSettings, track_acked: bool = True, **overrides):
        self.ck = confluent_kafka()  # ConfigError now when the extra is missing
        self.track_acked = track_acked
        only_errors = {} if track_acked else {"delivery.report.only.error": True}
        self.config = producer_config(settings) | only_errors | overrides
        self.max_record_bytes = int(self.config.get("message.max.bytes", DEFAULT_MAX_MESSAGE_BYTES))
        self._producer = None
        self._errors: list = []  # failed delivery reports since the batch's first send
        self._fresh = True  # the next send starts a batch
        self.acked: dict[TP, int] = {}  # of the last flush
        if not self.transactional:  # a transactional producer starts at its first begin (init_transactions)
            try:
                _ = self.producer  # non-blocking: connects and gets its producer id while the group joins
            except SinkError:
                pass  # a configuration librdkafka refuses fails the first send, as it did

    def _delivered(self, err, msg) -> None:
        """The producer's one delivery callback (served inside flush / poll, on the caller's thread)."""
        if err is not None:
            self._errors.append(err)
            return
        key = (msg.topic(), msg.partition())
        if msg.offset() >= self.acked.get(key, 0):
            self.acked[key] = msg.offset() + 1

    @property
    def producer(self):
        if self._producer is None:
            try:
                self._producer = self.ck.Producer(self.config | {"on_delivery": self._delivered}, logger=log)
            except (self.ck.KafkaException, ValueError, TypeError) as exc:
                raise SinkError(f"cannot create the Kafka producer: {exc}") from exc
        return self._producer

    def send(self, outputs: Iterable[Output]) -> None:
        producer = self.producer
        if self._fresh:
            self._fresh, self.acked, self._errors = False, {}, []
        produce = producer.produce
        try:
            for o in outputs:
                while True:
                    try:  # positional, and headers only when there are some: each keyword costs a parse
                        if o.headers:
                            if o.partition is None:
                                produce(o.topic, o.value, o.key, headers=list(o.headers))
                            else:
                                produce(o.topic, o.value, o.key, o.partition, headers=list(o.headers))
                        elif o.partition is None:
                            produce(o.topic, o.value, o.key)
                        else:
                            produce(o.topic, o.value, o.key, o.partition)
                        break
                    except BufferError:  # librdkafka's queue is full: serve reports, then try again
                        producer.poll(0.05)
        except self.ck.KafkaException as exc:
            self._fresh = True
            raise SinkError(f"send failed: {exc}") from exc

    def flush(self, timeout_s: float) -> None:
        """Block until every pending message is acknowledged; raise SinkError on any failure."""
        self._await(timeout_s)

    def _await(self, timeout_s: float) -> None:
        """Every delivery report of the batch served (librdkafka's queue empty), none failed; else SinkError.
        A report of an earlier, rolled-back attempt that arrives now can only fail this batch (it is retried)."""
        self._fresh = True
        if self._producer is None:
            self.acked = {}
            return
        left = self._producer.flush(timeout_s)
        if self._errors or left:
            errors, self._errors = self._errors, []
            first = errors[0] if errors else "not acknowledged in time"
            raise SinkError(f"{len(errors) + left} messages not acknowledged: {first}")

    def close(self) -> None:
        if self._producer is not None:
            self._producer.flush(10)
            self._producer = None


class ConfluentTransactionalSink(ConfluentSink):
    transactional = True

    def __init__(self, settings: KafkaSettings, state: StateSettings, track_acked: bool = True, **overrides):
        super().__init__(settings, track_acked, **({"transactional.id": transactional_id(settings, state),
                                       "transaction.timeout.ms": state.transaction_timeout_ms} | overrides))
        self.init_timeout_s = max(30.0, state.transaction_timeout_ms / 1000)
        self.in_transaction = False

    @property
    def producer(self):
        fresh = self._producer is None
        producer = super().producer
        if fresh:
            try:
                producer.init_transactions(self.init_timeout_s)  # fences the previous holder, finishes its txn
            except self.ck.KafkaException as exc:
                self._drop()
                raise SinkError(f"init_transactions failed: {exc}") from exc
        return producer

    def begin(self) -> None:
        assert not self.in_transaction, "a transaction is already open"
        try:
            self.producer.begin_transaction()
        except self.ck.KafkaException as exc:
            self._drop()
            raise SinkError(f"begin_transaction failed: {exc}") from exc
        self.in_transaction, self.acked, self._errors, self._fresh = True, {}, [], False

    def send(self, outputs: Iterable[Output]) -> None:
        self._fresh = False  # acked and errors belong to the transaction (reset by begin)
        super().send(outputs)

    def flush(self, timeout_s: float) -> None:
        raise SinkError("a transactional sink is flushed by commit(), not flush()")

    def commit(self, offsets: dict[TP, int], group_metadata, timeout_s: float = 30.0) -> None:
        """Offsets into the transaction, then commit it. CommitError: not committed (the engine aborts and
        retries the batch); CommitOutcomeUnknownError: the commit was asked for and may have happened."""
        assert self.in_transaction, "commit() without begin()"
        p, ck = self.producer, self.ck
        try:
            self._await(timeout_s)  # every record's delivery report first: acked is the changelog checkpoint
            p.send_offsets_to_transaction([ck.TopicPartition(t, n, o) for (t, n), o in offsets.items()],
                                          group_metadata, timeout_s)
        except ck.KafkaException as exc:
            err = exc.args[0]
            if err.fatal():
                self._drop()
                raise CommitError(f"transaction failed (producer reset): {err}") from exc
            raise CommitError(f"transaction failed: {err}") from exc
        except SinkError as exc:
            raise CommitError(f"transaction failed: {exc}") from exc
        deadline = time.monotonic() + timeout_s
        while True:
            try:
                p.commit_transaction(max(deadline - time.monotonic(), 1.0))
                break
            except ck.KafkaException as exc:
                err = exc.args[0]
                if err.retriable() and time.monotonic() < deadline:
                    continue  # librdkafka resumes the same commit
                if err.txn_requires_abort():
                    raise CommitError(f"transaction commit refused: {err}") from exc
                self._drop()  # closing does not abort: the transaction stays as the coordinator has it
                if err.fatal():
                    raise CommitError(f"transaction commit refused (producer reset): {err}") from exc
                raise CommitOutcomeUnknownError(f"transaction commit outcome unknown: {err}") from exc
        self.in_transaction = False

    def settle(self) -> None:
        """After CommitOutcomeUnknownError: a new producer whose ``init_transactions`` returns once the
        coordinator has finished the transaction, committed or aborted; SinkError if it cannot."""
        self._drop()
        _ = self.producer  # creating it runs init_transactions

    def abort(self) -> None:
        """Abort the open transaction (if any); on failure, drop the producer (its successor aborts it)."""
        self._errors, self._fresh = [], True
        if not self.in_transaction or self._producer is None:
            self.in_transaction = False
            return
        try:
            self._producer.abort_transaction(10.0)
        except self.ck.KafkaException as exc:
            log.warning("abort_transaction failed (%s); the producer is reset", exc)
            self._drop()
        self.in_transaction = False

    def _drop(self) -> None:
        """Forget the producer; an open transaction is left to the successor's init_transactions."""
        self._producer, self.in_transaction, self._errors, self._fresh = None, False, [], True

    def close(self) -> None:
        self.abort()
        if self._producer is not None:
            self._producer.flush(10)
            self._producer = None
