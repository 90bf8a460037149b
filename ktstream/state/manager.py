"""Durable state wired into an engine: open and restore partitions on assignment, close them on revoke.

``StateManager.attach`` sits between the source's rebalance callbacks and the
engine's. The source calls them inside ``poll`` before it returns any record
of a newly assigned partition, so restoring there *is* pausing the partition:
no record of it is processed until its store reflects the committed offset.

- assigned: open the partition's store, replay the changelog records it is
  missing (ktstream.state.changelog.restore), then tell the engine;
- revoked: the engine evicts the partition's learners and the cache closes
  its store (every committed batch was already written: step 4 is synchronous,
  so closing is the checkpoint);
- lost: the same, and nothing is committed (nothing is pending: the engine
  commits synchronously inside ``step``).

The commit order itself stays in ktstream.engine.engine: sink flush (acks=all,
predictions and changelog records), commit, then ``StateCache.apply`` writes the
store with the offsets in one transaction.
"""

from __future__ import annotations

import logging
import time
from typing import Callable, Iterable

from ktstream.engine.engine import Engine
from ktstream.engine.records import Record, TopicPartition
from ktstream.state.changelog import restore

log = logging.getLogger(__name__)

Reader = Callable[[TopicPartition, int], Iterable[Record]]  # an input partition's changelog records from an offset


class StateManager:
    def __init__(self, engine: Engine, store, read_changelog: Reader,
                 committed: Callable[[TopicPartition], int | None]):
        self.engine, self.store = engine, store
        self.read_changelog, self.committed = read_changelog, committed
        self.restored_records = 0  # learner states applied from the changelog
        self.read_records = 0  # changelog records read to find them
        self.restore_seconds = 0.0
        self.assigned: set[TopicPartition] = set()
        self.on_restored: Callable[[TopicPartition, int, int, float], None] = lambda tp, n, r, s: None

    def attach(self) -> "StateManager":
        src = self.engine.source
        src.on_assigned, src.on_revoked, src.on_lost = self.on_assigned, self.on_revoked, self.on_lost
        return self

    def on_assigned(self, partitions: list[TopicPartition]) -> None:
        for tp in partitions:
            t0 = time.monotonic()
            committed = self.committed(tp) or 0
            n, read = restore(self.store, tp, lambda start, tp=tp: self.read_changelog(tp, start), committed)
            if self.store.offset(tp) > committed:
                log.warning("%s: the store reflects offset %d beyond the committed %d", tp,
                            self.store.offset(tp), committed)
            dt = time.monotonic() - t0
            self.restored_records += n
            self.read_records += read
            self.restore_seconds += dt
            self.assigned.add(tp)
            self.on_restored(tp, n, read, dt)
            log.info("%s restored: %d changelog records in %.3fs (%d read from the checkpoint), store at "
                     "offset %d", tp, n, dt, read, self.store.offset(tp))
        self.engine.on_assigned(partitions)

    def on_revoked(self, partitions: list[TopicPartition]) -> None:
        self.assigned.difference_update(partitions)
        self.engine.on_revoked(partitions)

    def on_lost(self, partitions: list[TopicPartition]) -> None:
        self.assigned.difference_update(partitions)
        self.engine.on_lost(partitions)
