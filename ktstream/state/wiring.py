"""Durable state wired into an engine built by ktstream.engine.service.build_engine (``state.dir`` set).

``durable(settings, metrics, source, sink, store)`` returns the pieces the
builder needs: the store the hot cache sits over (SQLite per input partition
under ``state.dir`` unless a store is given; writes timed; the changelog
checkpoint taken from the sink's acknowledgements), the changelog topic, and
``attach(engine)``, which puts the StateManager between the source's
rebalance callbacks and the engine's (restore on assignment).

The source must offer ``committed(tp)`` (or, as MemorySource, a dict) and ``read_partition(topic, partition,
start)`` (records streamed to the end taken when the read starts; failing, not ending, when it stalls), and may offer
``generation()`` (the consumer group generation, stamped on changelog records); the sink, after a flush or a committed transaction, ``acked``:
(topic, partition) -> offset after its last acknowledged record
(connectors.kafka does both; so do the in-memory doubles in tests/state).
"""

from __future__ import annotations

from ktstream.config import Settings
from ktstream.state.changelog import changelog_topic
from ktstream.state.manager import StateManager
from ktstream.state.metrics import StateMetrics, TimedStore
from ktstream.state.sqlite import SqliteStore


class CheckpointedStore:
    """A store whose writes also record, per input partition, the changelog offset they reflect."""

    def __init__(self, store, sink, changelog: str):
        self.inner, self.sink, self.changelog = store, sink, changelog

    def __getattr__(self, name):
        return getattr(self.inner, name)

    def write(self, states, offsets, changelog=None) -> None:
        if changelog is None:  # the engine's step 4: the batch's changelog records were just acknowledged
            acked = getattr(self.sink, "acked", {})
            changelog = {tp: acked[(self.changelog, tp[1])] for tp in offsets if (self.changelog, tp[1]) in acked}
        self.inner.write(states, offsets, changelog)


def durable(settings: Settings, metrics, source, sink, store=None):
    st = settings.state
    topic = changelog_topic(settings.kafka.topics.events)
    state_metrics = StateMetrics(metrics.registry)
    inner = store if store is not None else SqliteStore(st.dir, fp16=st.fp16)
    wrapped = CheckpointedStore(TimedStore(inner, state_metrics), sink, topic)

    def committed(tp):  # MemorySource keeps its commits in a dict
        c = source.committed
        return c(tp) if callable(c) else c.get(tp)

    def read(tp, start):
        return source.read_partition(topic, tp[1], start)

    def generation() -> int:  # the group generation (MemorySource has no group: -1)
        return source.generation() if hasattr(source, "generation") else -1

    def attach(engine) -> StateManager:
        return StateManager(engine, wrapped, read, committed, st, generation, state_metrics).attach()

    return wrapped, topic, attach
