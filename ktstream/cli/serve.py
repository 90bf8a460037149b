"""`ktstream serve --config FILE`: run the streaming engine against Kafka until SIGTERM / SIGINT."""

from __future__ import annotations

import logging
import signal

log = logging.getLogger(__name__)


def register(sub) -> None:
    p = sub.add_parser("serve", help="run the streaming engine (Kafka in, predictions out, /metrics, /healthz)")
    p.add_argument("--config", help="YAML settings file (see configs/default.yaml); KTSTREAM_* env overrides it")
    p.add_argument("--create-topics", action="store_true",
                   help="create the three topics first (kafka.partitions each); for development brokers")
    p.set_defaults(func=run)


def run(args) -> int:
    if not getattr(args, "verbose", False):
        logging.getLogger("kafka").setLevel(logging.WARNING)  # kafka-python logs every connection at INFO
    from connectors.kafka import KafkaSink, KafkaSource  # the only Kafka client code lives in connectors/
    from ktstream.config import load_settings
    from ktstream.engine.bootstrap import load_model
    from ktstream.engine.service import Service

    import torch

    settings = load_settings(args.config)
    torch.set_num_threads(settings.engine.torch_threads)
    k = settings.kafka
    if args.create_topics:
        from connectors.kafka.admin import create_topics

        create_topics(k, [k.topics.events, k.topics.predictions, k.topics.dead_letters], k.partitions)
    serving = load_model(settings.model)
    source = KafkaSource(k, max_poll_records=settings.engine.max_batch)
    service = Service(settings, serving, source, KafkaSink(k))

    def stop(signum, frame) -> None:
        log.info("signal %d: finishing the current micro-batch, then stopping", signum)
        service.stop()

    signal.signal(signal.SIGTERM, stop)
    signal.signal(signal.SIGINT, stop)
    log.info("serving %s %s: %s -> %s; metrics on http://%s:%d/metrics", serving.model.name, serving.version,
             k.topics.events, k.topics.predictions, settings.metrics.host, service.server.port)
    try:
        service.run()
    finally:
        service.close()
    log.info("stopped cleanly")
    return 0
