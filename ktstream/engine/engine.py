"""The engine loop and the one place that knows the commit order.

Per micro-batch (at-least-once; the Kafka Streams / Quix Streams order):
1. ``poll`` the source (rebalance callbacks run here, before new records: with
   durable state, ``state.on_assigned`` restores a new partition's store first);
2. ``process``: predictions computed, learner states *staged* (nothing applied);
   with durable state, ``state.changelog`` adds one changelog record per staged
   state to the outputs;
3. ``sink.send`` + ``sink.flush``: predictions, dead letters and changelog
   records acknowledged (acks=all);
4. ``source.commit`` the input offsets;
5. ``cache.apply`` the staged states: the store under the cache first (with
   durable state, ``state.write``: per partition one store transaction holding
   the states, the input offset and the changelog checkpoint the sink
   acknowledged), then the cache. Never before the commit.
Between steps 2 and 3 every output is checked against the largest record the sink may
send (``Processor.drop_oversized``): a learner whose prediction or changelog
record is larger is dead-lettered (``output_too_large``) with its staged state
dropped, so one learner can never stall the batch.
If step 3 or 4 fails the staged states are dropped and the batch's partitions
that are still ours are rewound to its first offsets, so they are processed
again from the committed state; consumers drop the repeated predictions by
their source (topic, partition, offset). A batch is processed again at most
``max_batch_retries`` times in a row (``ktstream_batch_retries_total``); then the
engine stops with ``RetriesExhaustedError`` (as Flink's fixed-delay restart
strategy gives up), rolled back, so a restart resumes from the committed offsets.

Overlapped delivery (``overlap_delivery``, at-least-once; ``run``, full batches):
step 3 only sends, and the next turn runs its step 1 and the decoding part of step 2 before
it flushes, commits and applies the batch in flight; a failure there rewinds
that batch and the records polled after it. A rebalance or a swap inside the
poll delivers the batch in flight first (a loss drops it).

Exactly-once (a sink with ``transactional = True``, connectors.kafka.transactional)
replaces steps 3-4 by one producer transaction: ``begin``; ``send`` the outputs;
``commit(offsets, group metadata)`` = ``send_offsets_to_transaction`` +
``commit_transaction``. A failure before the commit was asked for aborts the
transaction, drops the staged states and rewinds, as above; read_committed
consumers never see the batch. A commit whose outcome is unknown (it timed out
or its connection broke after the request went out: the broker may have
committed) is never aborted: the sink settles it (``settle``: a new producer with
the same ``transactional.id`` whose ``init_transactions`` makes the coordinator
finish the commit it received or abort it), then the group's committed offsets
tell which: committed, the batch goes on to step 5; not, it is rolled back. If it
cannot be settled the engine stops with ``CommitOutcomeUnknownError``, neither
aborting nor rewinding, and the restart's ``init_transactions`` settles it.

With a ``collector`` (ktstream.engine.collector; on with ``engine.gc_tuning``) the engine,
while ``run`` loops (or after ``collector.start()``), collects garbage itself between
micro-batches: the objects made since the last collection, once there are enough of them, in
a pause of a few milliseconds however large the cache grows (timed as the loop's ``gc``
phase). Right after a rebalance it collects everything but the frozen objects: waiting for
the group leaves cyclic garbage behind (a client's timeouts, with their tracebacks; about
170,000-250,000 objects at a first join on the embedded broker), and there it falls in a
pause the group already takes.

At the top of each micro-batch the engine answers the live per-learner queries its HTTP
workers have queued (``queries``, ktstream.engine.queries): read only, on this thread, so they
see the state as of the last committed micro-batch without a lock.

Between micro-batches (never inside one, so a batch is served by one model
version) the engine asks its registry watcher for a newly promoted version,
swaps it in (ktstream.engine.swap) and rebuilds up to ``rebuild_chunk`` stale
cached learner states per loop, so an idle engine converts its whole cache.
"""

from __future__ import annotations

import logging
import threading
import time
from typing import Callable, Protocol

from ktstream.engine.collector import BatchCollector
from ktstream.engine.exceptions import (CommitError, CommitOutcomeUnknownError, EngineError, RetriesExhaustedError,
                                        SinkError)
from ktstream.core import TopicPartition
from ktstream.engine.messages import now_ms
from ktstream.engine.metrics import EngineMetrics
from ktstream.engine.processor import Batch, Processor
from ktstream.engine.records import Sink, Source
from ktstream.serving.runner import ModelRunner

log = logging.getLogger(__name__)


class Watcher(Protocol):
    """Looks for a newly promoted model version (ktstream.finetune.watcher.RegistryWatcher)."""

    def poll(self) -> object | None: ...


class Queries(Protocol):
    """Questions about learners queued by HTTP workers (ktstream.engine.queries.LearnerQueries)."""

    def answer(self, engine: "Engine") -> int: ...


class DurableState(Protocol):
    """The engine's state collaborator (ktstream.state.manager.StateManager): the engine calls its
    rebalance hooks from its own (``on_assigned`` before the engine's bookkeeping: a partition is
    restored before any of its records is processed) and its ``changelog`` commit step; it is also
    the store under the engine's cache (``StateCache(store=...)``), so ``cache.apply`` writes it."""

    @property
    def ready(self) -> bool:
        """False once a partition's restore failed for good."""
        ...

    def on_assigned(self, partitions: list[TopicPartition]) -> None: ...

    def on_revoked(self, partitions: list[TopicPartition]) -> None: ...

    def on_lost(self, partitions: list[TopicPartition]) -> None: ...

    def changelog(self, batch: Batch) -> None:
        """Add the batch's changelog records (one per staged state) to its outputs."""
        ...

    def close(self) -> None:
        """Close the store (``Service.close``, after the engine's clients)."""
        ...


class Engine:
    def __init__(self, source: Source, sink: Sink, processor: Processor, metrics: EngineMetrics | None = None,
                 max_batch: int = 1000, poll_timeout_s: float = 0.05, flush_timeout_s: float = 30.0,
                 gauge_interval_s: float = 1.0, rebuild_chunk: int = 256, collector: BatchCollector | None = None,
                 max_output_bytes: int = 1_048_576, max_batch_retries: int = 10, state: DurableState | None = None,
                 overlap_delivery: bool = True):
        """``state``: durable state (ktstream.state.wiring.durable_state), which must also be the store under
        ``processor.cache``; None: learner state lives in the cache only. ``overlap_delivery``: ``run``
        polls and decodes the next micro-batch while the last one's outputs are in flight (at-least-once
        only; ``step``)."""
        assert state is None or processor.cache.store is state, "durable state must be the store under the cache"
        self.source, self.sink, self.processor, self.state = source, sink, processor, state
        # the largest record sent: the setting, or less if the sink's producer refuses less
        self.max_output_bytes = min(max_output_bytes, getattr(sink, "max_record_bytes", max_output_bytes))
        self.max_batch_retries, self.retries = max_batch_retries, 0  # rollbacks in a row
        self.cache = processor.cache
        self.metrics = metrics or EngineMetrics()
        self.max_batch, self.poll_timeout_s, self.flush_timeout_s = max_batch, poll_timeout_s, flush_timeout_s
        self.gauge_interval_s, self.rebuild_chunk = gauge_interval_s, rebuild_chunk
        self.watcher: Watcher | None = None  # set by watch()
        self.queries: Queries | None = None  # live per-learner queries (ktstream.engine.queries), set by the service
        self.transactional = bool(getattr(sink, "transactional", False))  # exactly-once
        self.joined = False  # a first assignment arrived (readiness)
        self.collector = collector
        self._idle = False  # the last poll returned nothing
        self.overlap_delivery = overlap_delivery and not self.transactional
        self._pending: Batch | None = None  # sent, not yet flushed, committed or applied (overlap_delivery)
        self._polled_stale = False  # the pending batch was rolled back inside a poll: drop what that poll returned
        self._rewound: dict[TopicPartition, int] = {}  # where rollbacks of this loop turn sought partitions
        self._deferred: EngineError | None = None  # raised in a rebalance callback, re-raised after its poll
        self._rebalanced = False
        self.last_loop = time.monotonic()
        self._last_gauges = 0.0
        source.on_assigned, source.on_revoked, source.on_lost = self.on_assigned, self.on_revoked, self.on_lost
        self.metrics.model_info(processor.runner.name, processor.runner.version)

    # -- rebalance callbacks (run inside source.poll, on the engine's thread) --
    def on_assigned(self, partitions: list[TopicPartition]) -> None:
        if self.state is not None:
            self.state.on_assigned(partitions)  # RestoreError: nothing of these partitions is processed
        self.joined = self._rebalanced = True
        self.metrics.rebalances.labels("assigned").inc(len(partitions))
        log.info("partitions assigned: %s", partitions)

    def on_revoked(self, partitions: list[TopicPartition]) -> None:
        """Everything polled so far is committed (a batch in flight is delivered first): drop their learners."""
        self._deliver_pending_in_callback()
        dropped = self.cache.evict_partitions(partitions)
        if self.state is not None:
            self.state.on_revoked(partitions)
        self._rebalanced = True
        self.metrics.rebalances.labels("revoked").inc(len(partitions))
        self.metrics.forget_partitions(partitions)
        log.info("partitions revoked: %s (%d learner states dropped)", partitions, dropped)

    def on_lost(self, partitions: list[TopicPartition]) -> None:
        """The group moved on without this member: a batch in flight is not committed, nor applied."""
        if self._pending is not None:
            pending, self._pending = self._pending, None
            self._polled_stale = True  # the poll's records come after the dropped batch: rewound with it
            self._in_callback(lambda: self._roll_back(pending, "commit"))
        self.cache.evict_partitions(partitions)
        if self.state is not None:
            self.state.on_lost(partitions)
        self._rebalanced = True
        self.metrics.rebalances.labels("lost").inc(len(partitions))
        self.metrics.forget_partitions(partitions)
        log.warning("partitions lost (group membership expired): %s", partitions)

    # -- hot swap ---------------------------------------------------------
    def watch(self, watcher: Watcher) -> None:
        """Poll ``watcher`` between micro-batches; its callback must be ``self.swap``."""
        self.watcher = watcher

    def swap(self, version) -> None:
        """Serve ``version`` (model, items, concepts, version) from the next micro-batch on."""
        self._deliver_pending_in_callback()  # its staged states are the old model's: applied first, then made stale
        old = self.processor.runner
        self.processor.swap(ModelRunner(version.model.eval(), version.items, version.concepts, version.version,
                                        old.describes))
        self.metrics.model_info(version.model.name, version.version)
        self.metrics.swaps.inc()
        log.info("model swapped: %s %s -> %s %s (%d cached learners to rebuild)", old.name, old.version,
                 version.model.name, version.version, len(self.processor.stale))

    # -- the loop --------------------------------------------------------
    def step(self, overlap: bool = False) -> Batch | None:
        """Poll and process one micro-batch through the whole commit protocol (a batch an earlier turn
        left in flight is delivered first). With ``overlap`` (as ``run`` calls it when
        ``overlap_delivery`` is on) and a full batch (a backlog), the batch's outputs are only sent:
        the next turn polls and decodes (step 1, which reads no learner state) while they are in
        flight, then flushes them, commits and applies (``_deliver_pending``) before it processes
        anything. A batch that is not full is delivered within its turn: the records that arrive
        during its flush then go into the next batch instead of waiting for a further one. Nothing
        is committed before it was acknowledged, and no state is applied before its offsets were
        committed, either way."""
        self.last_loop = time.monotonic()
        if self.collector is not None and self.collector.started:  # the previous batch is garbage by now
            start = time.perf_counter()
            if self.collector.between_batches(idle=self._idle, joined=self.joined):
                self._timed("gc", start)
        if self.queries is not None:
            self.queries.answer(self)
        if self.watcher is not None:
            self.watcher.poll()
        start = time.perf_counter()
        self._polled_stale, self._rewound = False, {}
        # a batch in flight is delivered at once when nothing new is there: no waiting for records first
        records = self.source.poll(0.0 if self._pending is not None else self.poll_timeout_s, self.max_batch)
        self._timed("poll", start)
        if self._polled_stale:  # the batch in flight was rolled back during the poll: these come again
            self._rewind(records)
            exc, self._deferred = self._deferred, None
            if exc is not None:
                raise exc
            return None
        self._idle = not records
        if self._rebalanced:
            self._rebalanced = False
            if self.collector is not None:
                self._collect()
        self._gauges()
        start = time.perf_counter()
        decoded = self.processor.decode(records) if records else None
        self._timed("process", start)
        try:
            settled = self._deliver_pending()
        except SinkError:
            self._rewind(records)
            raise
        if not settled:
            self._rewind(records)
            return None
        if not records:
            self._rebuild_some()
            return None
        start = time.perf_counter()
        batch = self.processor.process_decoded(*decoded)
        if self.state is not None:
            self.state.changelog(batch)
        self.processor.drop_oversized(batch, self.max_output_bytes)
        self._timed("process", start)
        if overlap and self.overlap_delivery and len(records) >= self.max_batch:  # a backlog: more are waiting
            self._send(batch)
            self._pending = batch
        elif self._transaction(batch) if self.transactional else self._flush_and_commit(batch):
            self._applied(batch)
        else:
            return None
        self._rebuild_some()  # stale cached states after a swap, a chunk per turn
        return batch

    def _applied(self, batch: Batch) -> None:
        """Step 5: the batch's offsets are committed, so its staged states become current."""
        self.retries = 0
        flushed, start = now_ms(), time.perf_counter()
        self.cache.apply(batch.staged, batch.offsets)
        self._timed("apply", start)
        self.metrics.observe_batch(batch, flushed)

    def _deliver_pending(self) -> bool:
        """Flush, commit and apply the batch in flight, if any; False if its commit failed (rolled back)."""
        if self._pending is None:
            return True
        pending, self._pending = self._pending, None
        if not self._flush_and_commit(pending, sent=True):
            return False
        self._applied(pending)
        return True

    def _deliver_pending_in_callback(self) -> None:
        """``_deliver_pending`` inside the source's poll (a rebalance callback, a swap): a failure rolls the batch
        back, the poll's records are dropped (``_polled_stale``) and an error is raised after the poll."""
        if self._pending is not None:
            self._in_callback(self._deliver_pending)

    def _in_callback(self, action: Callable[[], object]) -> None:
        try:
            if action() is False:
                self._polled_stale = True
        except EngineError as exc:  # the clients' callback machinery would swallow it or wrap it
            self._polled_stale = True
            self._deferred = exc

    def _rewind(self, records: list) -> None:
        """Seek each partition of ``records`` back to the first of them, or to where a rollback of this turn
        sought it if that is earlier (a poll after the rollback's seek may have read on from there)."""
        firsts: dict[TopicPartition, int] = {}
        for rec in records:
            firsts.setdefault(rec.tp, rec.offset)
        mine = self.source.assignment()
        positions = {tp: min(off, self._rewound.get(tp, off)) for tp, off in firsts.items() if tp in mine}
        if positions:
            self.source.seek(positions)

    def run(self, stop: threading.Event, until: Callable[[], bool] | None = None) -> None:
        """Loop until ``stop`` is set (or ``until()`` holds); sink failures are retried after a pause, at
        most ``max_batch_retries`` times in a row (then ``RetriesExhaustedError`` stops the loop).
        While it loops, the engine's collector (if any) does the process's garbage collection."""
        if self.collector is not None:
            self.collector.start()
        try:
            while not stop.is_set() and not (until is not None and until()):
                try:
                    self.step(overlap=True)
                except SinkError as exc:
                    log.error("sink failed, retrying the batch: %s", exc)
                    stop.wait(1.0)
            self.finish()
        finally:
            if self.collector is not None:
                self.collector.stop()
        self._gauges(force=True)

    def finish(self) -> None:
        """Flush, commit and apply the batch in flight (or roll it back), as ``run`` does when it stops."""
        try:
            self._deliver_pending()
        except SinkError as exc:
            log.error("sink failed on the last batch; its records will be processed again: %s", exc)

    def close(self) -> None:
        for part in (self.source, self.sink):
            try:
                part.close()
            except EngineError as exc:
                log.warning("closing %s: %s", type(part).__name__, exc)
        if self.collector is not None:
            self.collector.stop()

    # -- health ----------------------------------------------------------
    def healthy(self, window_s: float = 60.0) -> bool:
        return time.monotonic() - self.last_loop < window_s

    def ready(self) -> bool:
        return self.joined and (self.state is None or self.state.ready)

    # -- commit protocol, steps 3-4 ---------------------------------------
    def _send(self, batch: Batch) -> None:
        try:
            start = time.perf_counter()
            self.sink.send(batch.outputs)
            self._timed("send", start)
        except SinkError:
            self._roll_back(batch, "sink")
            raise

    def _flush_and_commit(self, batch: Batch, sent: bool = False) -> bool:
        """At-least-once: flush (acks=all), then commit the input offsets."""
        if not sent:
            self._send(batch)
        try:
            start = time.perf_counter()
            self.sink.flush(self.flush_timeout_s)
            start = self._timed("flush", start)
        except SinkError:
            self._roll_back(batch, "sink")
            raise
        try:
            self.source.commit(batch.offsets)
            self._timed("commit", start)
        except CommitError:
            self._roll_back(batch, "commit")
            log.warning("commit failed for %s; batch will be processed again", sorted(batch.offsets))
            return False
        return True

    def _transaction(self, batch: Batch) -> bool:
        """Exactly-once: outputs and input offsets in one producer transaction; abort on a failure before
        the commit was asked for, settle one whose outcome is unknown (``_settle``)."""
        try:
            start = time.perf_counter()
            self.sink.begin()
            self.sink.send(batch.outputs)
            start = self._timed("send", start)
        except SinkError:
            self.sink.abort()
            self._roll_back(batch, "sink")
            raise
        try:
            self.sink.commit(batch.offsets, self.source.group_metadata(), self.flush_timeout_s)
            self._timed("commit", start)  # the transaction's commit waits for its records too (no flush phase)
        except CommitOutcomeUnknownError as exc:
            return self._settle(batch, exc)
        except (CommitError, SinkError) as exc:
            self.sink.abort()
            self._roll_back(batch, "commit")
            log.warning("transaction aborted for %s (%s); batch will be processed again", sorted(batch.offsets), exc)
            return False
        return True

    def _timed(self, phase: str, start: float) -> float:
        """Add the time since ``start`` to ``phase`` (ktstream_loop_seconds_total); returns now."""
        now = time.perf_counter()
        self.metrics.loop_time(phase, now - start)
        return now

    def _settle(self, batch: Batch, unknown: CommitOutcomeUnknownError) -> bool:
        """Learn whether a transaction whose commit outcome is unknown committed; True if it did."""
        self.metrics.failures.labels("commit_unknown").inc()
        log.warning("transaction commit outcome unknown for %s (%s); settling it", sorted(batch.offsets), unknown)
        try:
            if not hasattr(self.sink, "settle"):
                raise EngineError(f"{type(self.sink).__name__} cannot settle a transaction")
            self.sink.settle()
            committed = {tp: self._committed(tp) for tp in batch.offsets}
        except EngineError as exc:
            raise CommitOutcomeUnknownError(f"{unknown}; settling it failed ({exc}): stopping without an abort or "
                                            f"a rewind, a restart's init_transactions settles it") from exc
        if all(c is not None and c >= batch.offsets[tp] for tp, c in committed.items()):
            log.warning("the transaction had committed: the batch goes on")
            return True
        if all(c is None or c <= batch.first_offsets[tp] for tp, c in committed.items()):
            self._roll_back(batch, "commit")
            log.warning("the transaction had not committed: the batch will be processed again")
            return False
        raise CommitOutcomeUnknownError(f"{unknown}; the committed offsets {committed} are neither the batch's "
                                        f"{batch.offsets} nor before it")

    def _committed(self, tp: TopicPartition) -> int | None:
        """The group's committed offset of ``tp`` (a consumer asks the broker; MemorySource keeps a dict)."""
        committed = getattr(self.source, "committed", None)
        if committed is None:
            raise EngineError("the source cannot tell its committed offsets")
        return committed(tp) if callable(committed) else committed.get(tp)

    def _roll_back(self, batch: Batch, stage: str) -> None:
        """Drop the batch (its staged states are never applied) and seek back to its first offsets; stop
        once batches were rolled back more than ``max_batch_retries`` times in a row."""
        self.metrics.failures.labels(stage).inc()
        mine = self.source.assignment()
        self.source.seek({tp: off for tp, off in batch.first_offsets.items() if tp in mine})
        for tp, off in batch.first_offsets.items():
            self._rewound[tp] = min(off, self._rewound.get(tp, off))
        self.retries += 1
        if self.retries > self.max_batch_retries:
            raise RetriesExhaustedError(f"a micro-batch was rolled back {self.retries} times in a row (last at "
                                        f"{stage}; engine.max_batch_retries = {self.max_batch_retries}): stopping")
        self.metrics.retries.inc()

    def _collect(self) -> None:
        """After a rebalance. Nothing is frozen before the first assignment, so the join's garbage is
        among the unfrozen objects here."""
        found, seconds = self.collector.after_rebalance()
        self.metrics.loop_time("gc", seconds)
        log.info("garbage collection after the rebalance: %d unreachable objects in %.0f ms", found, seconds * 1000)

    def _rebuild_some(self) -> None:
        if self.processor.stale:
            self.metrics.rebuilt.labels("background").inc(self.processor.rebuild_stale(self.rebuild_chunk))

    def _gauges(self, force: bool = False) -> None:
        now = time.monotonic()
        if force or now - self._last_gauges >= self.gauge_interval_s:
            self._last_gauges = now
            self.metrics.observe_state(len(self.cache), self.cache.bytes, self.cache.evictions, self.source.lag())
