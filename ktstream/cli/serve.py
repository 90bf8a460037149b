"""`ktstream serve --config FILE`: run the streaming engine against Kafka until SIGTERM / SIGINT.

With ``state.dir`` set (file, ``KTSTREAM_STATE__DIR`` or ``--state-dir``) the
engine runs over durable, movable learner state (docs/state.md): the
changelog topic is created first, and ``state.processing_guarantee`` picks
at-least-once (flush, then commit) or exactly-once (one producer transaction
per micro-batch).
"""

from __future__ import annotations

import logging
import signal

log = logging.getLogger(__name__)


def register(sub) -> None:
    p = sub.add_parser("serve", help="run the streaming engine (Kafka in, predictions out, /metrics, /healthz)")
    p.add_argument("--config", help="YAML settings file (see configs/default.yaml); KTSTREAM_* env overrides it")
    p.add_argument("--state-dir", help="durable learner state under this folder (overrides state.dir)")
    p.add_argument("--create-topics", action="store_true",
                   help="create the three topics first (kafka.partitions each); for development brokers")
    p.set_defaults(func=run)


def create_changelog(settings) -> str:
    """Create (or check) the changelog topic; its name."""
    return ensure_changelog(settings)[0]


def ensure_changelog(settings) -> tuple[str, bool]:
    """Create (or check) the changelog topic, compacted unless ``kafka.broker_compacts`` is false
    (connectors.kafka.admin.ensure_changelog); (its name, whether it is compacted)."""
    from connectors.kafka import admin
    from ktstream.state.changelog import changelog_topic

    k = settings.kafka
    name = changelog_topic(k.topics.events)
    return name, admin.ensure_changelog(k, name, k.partitions)


def run(args) -> int:
    if not getattr(args, "verbose", False):
        logging.getLogger("kafka").setLevel(logging.WARNING)  # kafka-python logs every connection at INFO
    from connectors.kafka import KafkaSource, sink_for  # the only Kafka client code lives in connectors/
    from ktstream.config import load_settings
    from ktstream.engine.bootstrap import load_model
    from ktstream.engine.service import Service

    import torch

    overrides = {"state": {"dir": args.state_dir}} if getattr(args, "state_dir", None) else {}
    settings = load_settings(args.config, **overrides)
    torch.set_num_threads(settings.engine.torch_threads)
    k = settings.kafka
    if args.create_topics:
        from connectors.kafka.admin import create_topics

        create_topics(k, [k.topics.events, k.topics.predictions, k.topics.dead_letters], k.partitions)
    compacted = ensure_changelog(settings)[1] if settings.state.dir is not None else None
    serving = load_model(settings.model)
    source = KafkaSource(k, max_poll_records=settings.engine.max_batch)
    service = Service(settings, serving, source, sink_for(settings))
    if compacted is not None:
        service.metrics.changelog_compaction(compacted)

    def stop(signum, frame) -> None:
        log.info("signal %d: finishing the current micro-batch, then stopping", signum)
        service.stop()

    signal.signal(signal.SIGTERM, stop)
    signal.signal(signal.SIGINT, stop)
    log.info("serving %s %s: %s -> %s (%s, state %s); metrics on http://%s:%d/metrics", serving.model.name,
             serving.version, k.topics.events, k.topics.predictions, settings.state.processing_guarantee,
             settings.state.dir or "in memory", settings.metrics.host, service.server.port)
    try:
        service.run()
    finally:
        service.close()
    log.info("stopped cleanly")
    return 0
