"""`ktstream replay FILE`: publish a canonical event log (JSONL / Parquet) to the events topic.

Per-learner event-time order, learners merged by event time, keyed by learner
id, at ``--rate`` events/s with a progress bar; ``--retime`` stamps events with
the publishing time (steps kept) so end-to-end latency is meaningful.
"""

from __future__ import annotations

import logging

log = logging.getLogger(__name__)


def register(sub) -> None:
    p = sub.add_parser("replay", help="publish a canonical event log to the events topic, in order, at a rate")
    p.add_argument("events", help="canonical events, .jsonl or .parquet (ktstream convert writes them)")
    p.add_argument("--config", help="YAML settings file (kafka section: servers, topics, security)")
    p.add_argument("--bootstrap-servers", help="override kafka.bootstrap_servers")
    p.add_argument("--topic", help="override kafka.topics.events")
    p.add_argument("--rate", type=float, default=None, help="events per second (default: as fast as possible)")
    p.add_argument("--retime", action="store_true", help="event time := publishing time (steps kept)")
    p.add_argument("--limit", type=int, default=None, help="publish only the first N events of the replay order")
    p.set_defaults(func=run)


def run(args) -> int:
    if not getattr(args, "verbose", False):
        logging.getLogger("kafka").setLevel(logging.WARNING)  # kafka-python logs every connection at INFO
    from connectors.kafka import output_sink_for
    from ktstream.config import load_settings
    from ktstream.data.eventlog import read_events
    from ktstream.engine.replay import publish, replay_order

    kafka = {"bootstrap_servers": args.bootstrap_servers} if args.bootstrap_servers else {}
    settings = load_settings(args.config, kafka=kafka)
    topic = args.topic or settings.kafka.topics.events
    records = replay_order(read_events(args.events))[: args.limit]
    sink = output_sink_for(settings.kafka)
    try:
        for sent in publish(records, sink, topic, args.rate, args.retime):
            pass
    finally:
        sink.close()
    log.info("published %d events to %s", len(records), topic)
    return 0
