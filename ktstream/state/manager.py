"""The engine's state collaborator: restore on assignment, changelog records and the store write per batch.

``StateManager`` is passed to ``Engine(state=...)``; the engine calls it, it
never calls the engine. The source calls the engine's rebalance callbacks inside
``poll`` before it returns any record of a newly assigned partition, and the
engine calls ``on_assigned`` here first, so restoring there *is* pausing the
partition: no record of it is processed until its store reflects the committed
offset.

- ``on_assigned``: open the partition's store, apply the changelog records it
  is missing (ktstream.state.changelog.restore), and note the group generation
  it was assigned in (its changelog records carry it);
- ``on_revoked`` / ``on_lost``: forget the partitions (the engine evicts their
  learners from the cache, which closes their stores: every committed batch was
  already written, so closing is the checkpoint; nothing is pending);
- ``changelog(batch)``: a commit step (before the output size check): one
  changelog record per staged learner state joins the batch's outputs;
- ``load`` / ``write`` / ``drop_partitions``: the cache's store seam
  (ktstream.engine.state_cache.StateStore); ``write`` is the commit's store step:
  per partition one transaction with the states, the input offset and the
  changelog checkpoint (the offsets the sink acknowledged for the batch's
  changelog records, its ``acked``).

A restore attempt that fails (the changelog read stalled, the broker errored)
writes nothing; it is retried after ``state.restore_backoff_s``, doubled each
time, up to ``state.restore_attempts`` attempts. Then the partition is marked
failed (``ready`` turns false, ``ktstream_state_restore_failures_total`` counts
it, an error line names it) and ``RestoreError`` leaves ``poll``: the engine
stops before processing any record of it, as a Kafka Streams thread stops when
a task's restore outlives ``task.timeout.ms``. Continuing would serve learners
from missing state and move the checkpoint past it for good.

The commit order itself stays in ktstream.engine.engine.
"""

from __future__ import annotations

import logging
import time
from typing import Callable, Iterable, Protocol

from ktstream.config import StateSettings
from ktstream.core import LearnerState, Record, TopicPartition
from ktstream.engine.exceptions import EngineError
from ktstream.engine.processor import Batch
from ktstream.state.changelog import restore, to_changelog
from ktstream.state.metrics import StateMetrics
from ktstream.state.store import Store

log = logging.getLogger(__name__)

Reader = Callable[[TopicPartition, int], Iterable[Record]]  # an input partition's changelog records from an offset
MAX_BACKOFF_S = 30.0


class RestoreError(EngineError):
    """A partition's state could not be restored from the changelog: none of its records is processed."""

    def __init__(self, message: str, partition: TopicPartition):
        super().__init__(message)
        self.partition = partition


class AckingSink(Protocol):
    """A sink that tells, after a flush or a committed transaction, the offset after its last
    acknowledged record per (topic, partition) (connectors.kafka's sinks, MemorySink)."""

    acked: dict[TopicPartition, int]


class StateManager:
    def __init__(self, store: Store, changelog: str, sink: AckingSink, read_changelog: Reader,
                 committed: Callable[[TopicPartition], int | None], settings: StateSettings = StateSettings(),
                 generation: Callable[[], int] = lambda: -1, metrics: StateMetrics | None = None,
                 sleep: Callable[[float], None] = time.sleep):
        """``changelog``: the changelog topic; ``read_changelog(tp, start)``: ``tp``'s changelog records from
        ``start`` to the end taken when the read starts; ``committed(tp)``: the group's committed offset;
        ``generation()``: the group generation now (-1: unknown)."""
        if not getattr(sink, "track_acked", True):
            raise ValueError("durable state records the sink's acknowledged changelog offsets: make the sink "
                             "with track_acked=True (connectors.kafka.sink_for does when state.dir is set)")
        self.store, self.changelog_topic, self.sink = store, changelog, sink
        self.read_changelog, self.committed = read_changelog, committed
        self.settings, self.generation, self.metrics, self.sleep = settings, generation, metrics, sleep
        self.restored_records = 0  # learner states applied from the changelog
        self.read_records = 0  # changelog records read to find them
        self.restore_seconds = 0.0
        self.assigned: set[TopicPartition] = set()
        self.failed: set[TopicPartition] = set()  # restores that failed every attempt
        self.generations: dict[TopicPartition, int] = {}  # the generation each partition was assigned in

    @property
    def ready(self) -> bool:
        """False once a partition's restore has failed for good."""
        return not self.failed

    def on_assigned(self, partitions: list[TopicPartition]) -> None:
        generation = self.generation()
        for tp in partitions:
            t0 = time.monotonic()
            n, read = self._restore(tp)
            dt = time.monotonic() - t0
            self.restored_records += n
            self.read_records += read
            self.restore_seconds += dt
            self.assigned.add(tp)
            self.generations[tp] = generation
            if self.metrics is not None:
                self.metrics.on_restored(tp, n, read, dt)
            log.info("%s restored: %d changelog records in %.3fs (%d read from the checkpoint), store at "
                     "offset %d, generation %d", tp, n, dt, read, self.store.offset(tp), generation)

    def _restore(self, tp: TopicPartition) -> tuple[int, int]:
        """One partition's restore, retried with backoff; RestoreError once every attempt failed."""
        attempts, backoff, attempt = self.settings.restore_attempts, self.settings.restore_backoff_s, 1
        while True:
            try:
                committed = self.committed(tp) or 0
                result = restore(self.store, tp, lambda start: self.read_changelog(tp, start), committed)
                if self.store.offset(tp) > committed:
                    log.warning("%s: the store reflects offset %d beyond the committed %d", tp,
                                self.store.offset(tp), committed)
                return result
            except Exception as exc:  # any failure: nothing was written, the attempt can be repeated
                if attempt == attempts:
                    self.failed.add(tp)
                    if self.metrics is not None:
                        self.metrics.on_restore_failed(tp)
                    log.error("%s: restore failed after %d attempts, the engine stops without processing it: "
                              "%s", tp, attempts, exc)
                    raise RestoreError(f"restoring {tp} from the changelog failed after {attempts} attempts: "
                                       f"{exc}", tp) from exc
                if self.metrics is not None:
                    self.metrics.restore_retries.inc()
                log.warning("%s: restore attempt %d of %d failed (%s); retrying in %.1fs", tp, attempt, attempts,
                            exc, backoff)
                self.sleep(backoff)
                attempt, backoff = attempt + 1, min(backoff * 2, MAX_BACKOFF_S)

    def on_revoked(self, partitions: list[TopicPartition]) -> None:
        self.assigned.difference_update(partitions)

    def on_lost(self, partitions: list[TopicPartition]) -> None:
        self.assigned.difference_update(partitions)

    # -- commit steps ---------------------------------------------------------
    def changelog(self, batch: Batch) -> None:
        """Add one changelog record per staged learner state to the batch's outputs, stamped with the
        generation in which this instance was assigned the learner's partition."""
        batch.outputs.extend(to_changelog(st, self.changelog_topic, self.generations.get(st.partition, -1))
                             for st in batch.staged)

    def write(self, states: list[LearnerState], offsets: dict[TopicPartition, int]) -> None:
        """The committed batch into the store: per partition one transaction with its states, its input
        offset and its changelog checkpoint (what the sink acknowledged of its changelog partition)."""
        acked = self.sink.acked
        checkpoint = {tp: acked[(self.changelog_topic, tp[1])] for tp in offsets
                      if (self.changelog_topic, tp[1]) in acked}
        self.store.write(states, offsets, checkpoint)

    # -- the cache's reads -----------------------------------------------------
    def load(self, learner_id: str) -> LearnerState | None:
        return self.store.load(learner_id)

    def drop_partitions(self, partitions: list[TopicPartition]) -> None:
        self.store.drop_partitions(partitions)

    def close(self) -> None:
        self.store.close()
