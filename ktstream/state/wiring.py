"""Durable state for an engine built by ktstream.service.build_engine (``state.dir`` set).

``durable_state(settings, metrics, source, sink, store)`` builds the engine's
state collaborator (ktstream.state.manager.StateManager) over ``store`` (by
default SQLite per input partition under ``state.dir``, its commits timed on
the engine's registry, damaged files counted), with the changelog topic of the
events topic, and adapters from the source: the group's committed offsets,
the changelog reader and the group generation.

The source must offer ``committed(tp)`` (or, as MemorySource, a dict) and ``read_partition(topic, partition,
start)`` (records streamed to the end taken when the read starts; failing, not ending, when it stalls), and may offer
``generation()`` (the consumer group generation, stamped on changelog records); the sink, after a flush or a
committed transaction, ``acked``: (topic, partition) -> offset after its last acknowledged record
(connectors.kafka does both; so do MemorySink and the in-memory doubles in tests/state).
"""

from __future__ import annotations

from ktstream.config import Settings
from ktstream.core import TopicPartition
from ktstream.engine.metrics import EngineMetrics
from ktstream.state.changelog import changelog_topic
from ktstream.state.manager import AckingSink, StateManager
from ktstream.state.metrics import StateMetrics
from ktstream.state.sqlite import SqliteStore
from ktstream.state.store import Store


def durable_state(settings: Settings, metrics: EngineMetrics, source, sink: AckingSink,
                  store: Store | None = None) -> StateManager:
    st = settings.state
    topic = changelog_topic(settings.kafka.topics.events)
    state_metrics = StateMetrics(metrics.registry)
    if store is None:  # damaged partition files are moved aside and counted (ktstream.state.sqlite)
        store = SqliteStore(st.dir, st.fp16, on_quarantine=lambda tp, moved_to: metrics.stores_quarantined.inc(),
                            metrics=state_metrics)

    def committed(tp: TopicPartition) -> int | None:  # MemorySource keeps its commits in a dict
        c = source.committed
        return c(tp) if callable(c) else c.get(tp)

    def read(tp: TopicPartition, start: int):
        return source.read_partition(topic, tp[1], start)

    def generation() -> int:  # the group generation (MemorySource has no group: -1)
        return source.generation() if hasattr(source, "generation") else -1

    return StateManager(store, topic, sink, read, committed, st, generation, state_metrics)
