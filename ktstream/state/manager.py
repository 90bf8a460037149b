"""Durable state wired into an engine: open and restore partitions on assignment, close them on revoke.

``StateManager.attach`` sits between the source's rebalance callbacks and the
engine's. The source calls them inside ``poll`` before it returns any record
of a newly assigned partition, so restoring there *is* pausing the partition:
no record of it is processed until its store reflects the committed offset.

- assigned: open the partition's store, replay the changelog records it is
  missing (ktstream.state.changelog.restore), stamp the partition's future
  changelog records with the group generation it was assigned in, then tell
  the engine;
- revoked: the engine evicts the partition's learners and the cache closes
  its store (every committed batch was already written: step 4 is synchronous,
  so closing is the checkpoint);
- lost: the same, and nothing is committed (nothing is pending: the engine
  commits synchronously inside ``step``).

A restore attempt that fails (the changelog read stalled, the broker errored)
writes nothing; it is retried after ``state.restore_backoff_s``, doubled each
time, up to ``state.restore_attempts`` attempts. Then the partition is marked
failed (``ready`` turns false, ``ktstream_state_restore_failures_total`` counts
it, an error line names it) and ``RestoreError`` leaves ``poll``: the engine
stops before processing any record of it, as a Kafka Streams thread stops when
a task's restore outlives ``task.timeout.ms``. Continuing would serve learners
from missing state and move the checkpoint past it for good.

The commit order itself stays in ktstream.engine.engine: sink flush (acks=all,
predictions and changelog records), commit, then ``StateCache.apply`` writes the
store with the offsets in one transaction.
"""

from __future__ import annotations

import logging
import time
from typing import Callable, Iterable

from ktstream.config import StateSettings
from ktstream.engine.engine import Engine
from ktstream.engine.exceptions import EngineError
from ktstream.engine.records import Record, TopicPartition
from ktstream.state.changelog import ChangelogProcessor, restore

log = logging.getLogger(__name__)

Reader = Callable[[TopicPartition, int], Iterable[Record]]  # an input partition's changelog records from an offset
MAX_BACKOFF_S = 30.0


class RestoreError(EngineError):
    """A partition's state could not be restored from the changelog: none of its records is processed."""

    def __init__(self, message: str, partition: TopicPartition):
        super().__init__(message)
        self.partition = partition


class StateManager:
    def __init__(self, engine: Engine, store, read_changelog: Reader,
                 committed: Callable[[TopicPartition], int | None], settings: StateSettings = StateSettings(),
                 generation: Callable[[], int] = lambda: -1, metrics=None,
                 sleep: Callable[[float], None] = time.sleep):
        self.engine, self.store = engine, store
        self.read_changelog, self.committed = read_changelog, committed
        self.settings, self.generation, self.metrics, self.sleep = settings, generation, metrics, sleep
        self.restored_records = 0  # learner states applied from the changelog
        self.read_records = 0  # changelog records read to find them
        self.restore_seconds = 0.0
        self.assigned: set[TopicPartition] = set()
        self.failed: set[TopicPartition] = set()  # restores that failed every attempt

    @property
    def ready(self) -> bool:
        """False once a partition's restore has failed for good."""
        return not self.failed

    def attach(self) -> "StateManager":
        src = self.engine.source
        src.on_assigned, src.on_revoked, src.on_lost = self.on_assigned, self.on_revoked, self.on_lost
        return self

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
            if isinstance(self.engine.processor, ChangelogProcessor):
                self.engine.processor.own(tp, generation)
            if self.metrics is not None:
                self.metrics.on_restored(tp, n, read, dt)
            log.info("%s restored: %d changelog records in %.3fs (%d read from the checkpoint), store at "
                     "offset %d, generation %d", tp, n, dt, read, self.store.offset(tp), generation)
        self.engine.on_assigned(partitions)

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
        self.engine.on_revoked(partitions)

    def on_lost(self, partitions: list[TopicPartition]) -> None:
        self.assigned.difference_update(partitions)
        self.engine.on_lost(partitions)
