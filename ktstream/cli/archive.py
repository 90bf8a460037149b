"""`ktstream archive --config FILE`: copy the events topic into the date-partitioned Parquet archive.

The file's ``kafka`` section is ``ktstream.config.KafkaSettings`` (bootstrap
servers, topics, security); its ``archive`` section is
``connectors.archive.ArchiveSettings`` (folder, own consumer group, flush
every N records or T seconds, its dead-letter topic). Every record becomes an
archived row or a dead letter (invalid, keyless, future, or unwritable
records); offsets are committed only after both are durable. Runs until
SIGTERM / SIGINT (or ``--max-seconds``), then flushes.
"""

from __future__ import annotations

import logging
import signal
import time

log = logging.getLogger(__name__)


def register(sub) -> None:
    p = sub.add_parser("archive", help="archive the events topic as Parquet partitioned by event date")
    p.add_argument("--config", required=True, help="YAML file with `kafka` and `archive` sections")
    p.add_argument("--max-seconds", type=float, default=None, help="stop after this long (tests, backfills)")
    p.set_defaults(func=run)


def run(args) -> int:
    from connectors.archive import ArchiveSettings, kafka_archiver, serve_metrics  # Kafka clients: connectors/
    from ktstream.config import KafkaSettings
    from ktstream.finetune.settings import section

    kafka = section(args.config, "kafka", KafkaSettings)
    settings = section(args.config, "archive", ArchiveSettings)
    archiver = kafka_archiver(kafka, settings)
    server = None if settings.metrics_port is None else serve_metrics(archiver, settings)
    stopping = []
    previous = {s: signal.signal(s, lambda n, f: stopping.append(n)) for s in (signal.SIGTERM, signal.SIGINT)}
    deadline = None if args.max_seconds is None else time.monotonic() + args.max_seconds
    log.info("archiving %s into %s (group %s)", kafka.topics.events, settings.folder, settings.group_id)
    try:
        archiver.run(settings, lambda: bool(stopping) or (deadline is not None and time.monotonic() >= deadline))
    finally:
        for s, handler in previous.items():
            signal.signal(s, handler)
        if server is not None:
            server.close()
    log.info("archived %d events (%d records dead-lettered to %s: %s)", archiver.writer.written,
             archiver.writer.skipped, settings.dead_letter_topic, dict(archiver.dead_lettered))
    return 0
