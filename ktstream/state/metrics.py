"""State metrics, registered on the engine's registry (so /metrics shows them with the rest).

Commit failures are the engine's own ``ktstream_batch_failures{stage="commit"}``;
here: restores (time, records, retries, partitions whose restore failed), checkpoints (the store's write in
the commit sequence, timed by the store itself), the store's size and the partitions this instance owns.
"""

from __future__ import annotations

import time

from prometheus_client import CollectorRegistry, Counter, Gauge, Histogram

from ktstream.core import TopicPartition

SECONDS = (0.001, 0.005, 0.02, 0.1, 0.5, 2.0, 10.0, 60.0)


class StateMetrics:
    def __init__(self, registry: CollectorRegistry, gauge_interval_s: float = 5.0):
        r = registry
        self.restore_seconds = Histogram("ktstream_state_restore_seconds", "Time to restore one assigned "
                                         "partition from the changelog.", buckets=SECONDS, registry=r)
        self.restored = Counter("ktstream_state_restored_records", "Changelog records applied by restores.",
                                registry=r)
        self.restore_read = Counter("ktstream_state_restore_read_records", "Changelog records read by "
                                    "restores (from each store's changelog checkpoint on).", registry=r)
        self.restore_retries = Counter("ktstream_state_restore_retries", "Restore attempts that failed and were "
                                       "retried (a stalled or failing changelog read).", registry=r)
        self.restore_failures = Counter("ktstream_state_restore_failures", "Partitions whose restore failed every "
                                        "attempt (the engine stops, not ready).", ["topic", "partition"],
                                        registry=r)
        self.checkpoint_seconds = Histogram("ktstream_state_checkpoint_seconds", "Duration of the atomic store "
                                            "write after a commit.", buckets=SECONDS, registry=r)
        self.store_bytes = Gauge("ktstream_state_store_bytes", "Bytes of serialized learner state in the "
                                 "local store.", ["topic", "partition"], registry=r)
        self.stored = Gauge("ktstream_state_learners_stored", "Learners in the local store.",
                            ["topic", "partition"], registry=r)
        self.assigned = Gauge("ktstream_state_partitions_assigned", "Input partitions this instance owns.",
                              registry=r)
        self.gauge_interval_s, self._last = gauge_interval_s, 0.0

    def on_restored(self, tp: TopicPartition, records: int, read: int, seconds: float) -> None:
        self.restore_seconds.observe(seconds)
        self.restored.inc(records)
        self.restore_read.inc(read)

    def on_restore_failed(self, tp: TopicPartition) -> None:
        self.restore_failures.labels(tp[0], str(tp[1])).inc()

    def sizes(self, store, force: bool = False) -> None:
        """Refresh the size gauges from ``store`` (a ktstream.state.store.Store), at most every
        ``gauge_interval_s`` unless forced."""
        now = time.monotonic()
        if not force and now - self._last < self.gauge_interval_s:
            return
        self._last = now
        parts = store.partitions()
        self.assigned.set(len(parts))
        for tp in parts:
            self.store_bytes.labels(tp[0], str(tp[1])).set(store.nbytes(tp))
            self.stored.labels(tp[0], str(tp[1])).set(store.count(tp))

    def forget(self, partitions: list[TopicPartition]) -> None:
        """Drop the size gauges of partitions this instance no longer owns."""
        for tp in partitions:
            for g in (self.store_bytes, self.stored):
                try:
                    g.remove(tp[0], str(tp[1]))
                except KeyError:
                    pass
