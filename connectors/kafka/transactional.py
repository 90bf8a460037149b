"""Exactly-once sink: one producer transaction per micro-batch (Kafka Streams ``exactly_once_v2`` style).

``transactional.id`` is stable per instance (``<client_id>-<group_id>-<instance_id>``),
so a restarted instance's ``init_transactions`` fences its dead predecessor and
aborts the transaction it left open. Per micro-batch the engine calls
``begin``, ``send`` (predictions, dead letters, changelog records), then
``commit(offsets, group)``: ``send_offsets_to_transaction`` with the consumer's
group metadata (KIP-447 fencing of stale members) and ``commit_transaction``.
On a failure before ``commit_transaction`` (a record not acknowledged, the
offsets refused) the engine calls ``abort``; a failed abort, or a fatal error
(fenced, bad state), drops the producer, and the next ``begin`` starts a new
one whose ``init_transactions`` aborts whatever was left open.

Once ``commit_transaction`` was called, an error that is not the coordinator's
refusal (fenced, invalid state: then nothing committed) leaves the outcome
unknown: the EndTxn request may have reached the coordinator, which then
completes the commit whatever happens to this producer. kafka-python (3.0.x)
cannot resume such a commit (a second ``commit_transaction`` is an invalid
state transition, unlike the Java client's), so ``commit`` raises
``CommitOutcomeUnknownError`` and drops the producer without aborting;
``settle`` then starts a new producer with the same ``transactional.id``, whose
``init_transactions`` returns only once the coordinator has finished that
transaction (committed if it received the commit, aborted otherwise), after
which the group's committed offsets say which (ktstream.engine.engine).

Tansu (the embedded broker) commits, aborts and fences correctly and holds
read_committed fetches below the last stable offset, but it returns no
aborted-transaction list in fetch responses (tansu-broker/src/broker/fetch.rs:
``aborted_transactions(Some([].into()))``), so a stock read_committed consumer
still receives aborted records there. ``connectors.kafka.committed`` reads a
partition dropping them by their abort markers.
"""

from __future__ import annotations

import logging
import socket

import kafka.errors
from kafka import TopicPartition
from kafka.structs import OffsetAndMetadata

from connectors.kafka.sink import KafkaSink
from ktstream.config import KafkaSettings, StateSettings
from ktstream.core import TopicPartition as TP
from ktstream.engine.exceptions import CommitError, CommitOutcomeUnknownError, SinkError

log = logging.getLogger(__name__)

FATAL = (kafka.errors.ProducerFencedError, kafka.errors.IllegalStateError,
         kafka.errors.InvalidProducerEpochError, kafka.errors.InvalidTxnStateError)
#: The coordinator's answers to a commit that mean it did not commit (and the producer is unusable).
REFUSED = (kafka.errors.ProducerFencedError, kafka.errors.InvalidProducerEpochError,
           kafka.errors.InvalidTxnStateError, kafka.errors.TransactionalIdAuthorizationFailedError)


def transactional_id(k: KafkaSettings, s: StateSettings) -> str:
    return f"{k.client_id}-{k.group_id}-{s.instance_id or socket.gethostname()}"


class TransactionalSink(KafkaSink):
    transactional = True

    def __init__(self, settings: KafkaSettings, state: StateSettings, track_acked: bool = True, **overrides):
        super().__init__(settings, track_acked, transactional_id=transactional_id(settings, state),
                         transaction_timeout_ms=state.transaction_timeout_ms, **overrides)
        self.in_transaction = False

    @property
    def producer(self):
        fresh = self._producer is None
        producer = super().producer
        if fresh:
            try:
                producer.init_transactions()  # fences the previous holder of this id, aborts its open transaction
            except kafka.errors.KafkaError as exc:
                self._drop()
                raise SinkError(f"init_transactions failed: {exc}") from exc
        return producer

    def begin(self) -> None:
        assert not self.in_transaction, "a transaction is already open"
        try:
            self.producer.begin_transaction()
        except kafka.errors.KafkaError as exc:
            self._drop()
            raise SinkError(f"begin_transaction failed: {exc}") from exc
        self.in_transaction, self.acked = True, {}

    def flush(self, timeout_s: float) -> None:
        raise SinkError("a transactional sink is flushed by commit(), not flush()")

    def commit(self, offsets: dict[TP, int], group_metadata, timeout_s: float = 30.0) -> None:
        """Offsets into the transaction, then commit it. CommitError: not committed (the engine aborts and
        retries the batch); CommitOutcomeUnknownError: the commit was asked for and may have happened."""
        assert self.in_transaction, "commit() without begin()"
        pending, self._pending = self._pending, []
        p = self.producer
        try:
            p.flush(timeout=timeout_s)
            self._check(pending)
            p.send_offsets_to_transaction({TopicPartition(t, n): OffsetAndMetadata(o, "", -1)
                                           for (t, n), o in offsets.items()}, group_metadata)
        except FATAL as exc:
            self._drop()
            raise CommitError(f"transaction failed (producer reset): {exc!r}") from exc
        except (kafka.errors.KafkaError, SinkError) as exc:
            raise CommitError(f"transaction failed: {exc}") from exc
        try:
            p.commit_transaction()
        except REFUSED as exc:
            self._drop()
            raise CommitError(f"transaction commit refused (producer reset): {exc!r}") from exc
        except kafka.errors.KafkaError as exc:
            self._drop()  # closing does not abort: the transaction stays as the coordinator has it
            raise CommitOutcomeUnknownError(f"transaction commit outcome unknown: {exc!r}") from exc
        self.in_transaction = False

    def settle(self) -> None:
        """After CommitOutcomeUnknownError: a new producer whose ``init_transactions`` (bounded by
        ``max_block_ms``) returns once the coordinator has finished the transaction, committed or
        aborted; SinkError if it cannot."""
        self._drop()
        _ = self.producer  # creating it runs init_transactions

    def abort(self) -> None:
        """Abort the open transaction (if any); on failure, drop the producer (its successor aborts it)."""
        self._pending = []
        if not self.in_transaction or self._producer is None:
            self.in_transaction = False
            return
        try:
            self._producer.abort_transaction()
        except kafka.errors.KafkaError as exc:
            log.warning("abort_transaction failed (%s); the producer is reset", exc)
            self._drop()
        self.in_transaction = False

    def _drop(self) -> None:
        """Close the producer; an open transaction is left to the successor's init_transactions."""
        if self._producer is not None:
            try:
                self._producer.close(timeout=5)
            except kafka.errors.KafkaError:
                pass
        self._producer, self.in_transaction, self._pending = None, False, []

    def close(self) -> None:
        self.abort()
        super().close()
