"""`python -m ktstream.state.serve --config FILE --state-dir DIR`: the engine with durable, movable state.

The same engine and commit order as ``ktstream serve`` plus: a SQLite store per
input partition under DIR, a changelog topic (``<events>.learners-changelog``,
as many partitions as the input, compacted where the broker supports it) written
in the same flush as the predictions, and restore on every assignment
(ktstream.state.manager). Stops cleanly on SIGTERM / SIGINT; survives SIGKILL
(that is what bench/crash_recovery.py and tests/state/test_crash_recovery.py check).
"""

from __future__ import annotations

import argparse
import logging
import signal
import threading

import torch

from ktstream.config import Settings, load_settings
from ktstream.engine.bootstrap import ServingModel, load_model
from ktstream.engine.engine import Engine
from ktstream.engine.runner import ModelRunner
from ktstream.engine.server import MetricsServer
from ktstream.engine.state_cache import StateCache
from ktstream.metrics import EngineMetrics
from ktstream.state.changelog import ChangelogProcessor, changelog_topic
from ktstream.state.manager import StateManager
from ktstream.state.metrics import StateMetrics, TimedStore
from ktstream.state.sqlite import SqliteStore

log = logging.getLogger(__name__)


def create_changelog(settings: Settings) -> str:
    """Create the changelog topic, compacted where the broker accepts topic configs."""
    from connectors.kafka.admin import create_topics

    k = settings.kafka
    name = changelog_topic(k.topics.events)
    create_topics(k, [name], k.partitions, {"cleanup.policy": "compact"}, config_optional=True)
    return name


def build(settings: Settings, serving: ServingModel, state_dir: str, source=None, sink=None):
    """The engine, its store and its state manager (Kafka clients unless ``source`` / ``sink`` are given)."""
    from connectors.kafka import KafkaSource
    from connectors.kafka.changelog import StateSink, read_changelog

    e, k = settings.engine, settings.kafka
    source = source or KafkaSource(k, max_poll_records=e.max_batch)
    sink = sink or StateSink(k)
    metrics = EngineMetrics()
    state_metrics = StateMetrics(metrics.registry)
    store = TimedStore(SqliteStore(state_dir), state_metrics)
    topic = changelog_topic(k.topics.events)
    runner = ModelRunner(serving.model, serving.items, serving.concepts, serving.version, e.describe)
    processor = ChangelogProcessor(runner, StateCache(e.cache_max_bytes, store), k.topics.predictions,
                                   k.topics.dead_letters, e.late_policy, e.max_record_bytes, changelog=topic)
    engine = Engine(source, sink, processor, metrics, e.max_batch, e.poll_timeout_ms / 1000.0,
                    e.flush_timeout_s)
    manager = StateManager(engine, store, lambda tp: read_changelog(k, topic, tp[1]),
                           lambda tp: source.committed(tp)).attach()
    manager.on_restored = state_metrics.on_restored
    return engine, store, manager


def main(argv: list[str] | None = None) -> int:
    p = argparse.ArgumentParser(prog="python -m ktstream.state.serve", description=__doc__.splitlines()[0])
    p.add_argument("--config", required=True)
    p.add_argument("--state-dir", required=True)
    args = p.parse_args(argv)
    logging.basicConfig(level=logging.INFO, format="%(asctime)s %(name)s %(message)s")
    logging.getLogger("kafka").setLevel(logging.WARNING)
    settings = load_settings(args.config)
    torch.set_num_threads(settings.engine.torch_threads)
    create_changelog(settings)
    engine, store, _ = build(settings, load_model(settings.model), args.state_dir)
    m = settings.metrics
    server = MetricsServer(engine.metrics.exposition, engine.healthy, engine.ready, m.host, m.port)
    stop = threading.Event()
    signal.signal(signal.SIGTERM, lambda *a: stop.set())
    signal.signal(signal.SIGINT, lambda *a: stop.set())
    try:
        engine.run(stop)
    finally:
        engine.close()
        store.close()
        server.close()
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
