"""One engine run on the embedded broker, as the end-to-end tests use it: settings with topics of their
own, the inputs published in order, the service until it consumed them, and every output read back
(and one second more, so an output beyond one per input would be seen)."""

from __future__ import annotations

import time
import uuid

from ktstream.config import Settings, load_settings
from ktstream.core import Output
from ktstream.service import Service


def read(source, until, timeout_s: float = 60.0) -> list:
    """Poll ``source`` until ``until(records so far)`` holds or the time is up."""
    got: list = []
    deadline = time.monotonic() + timeout_s
    while not until(got) and time.monotonic() < deadline:
        got.extend(source.poll(0.2, 1000))
    return got


def engine_settings(broker, name: str, partitions: int, *, client: str = "kafka-python", engine: dict | None = None,
                    **sections) -> Settings:
    """Settings for one run: topics and group named after ``name`` plus a random tag, the HTTP port free."""
    tag = f"{name}-{uuid.uuid4().hex[:6]}"
    sections.setdefault("metrics", dict(port=0))
    return load_settings(None, kafka=dict(client=client, bootstrap_servers=broker.bootstrap_servers,
                                          group_id=f"engine-{tag}", session_timeout_ms=6000, partitions=partitions,
                                          topics=dict(events=f"{tag}.ev", predictions=f"{tag}.pred",
                                                      dead_letters=f"{tag}.dead")),
                         engine=dict(max_batch=64, poll_timeout_ms=20, gc_tuning=False, **(engine or {})), **sections)


def publish(broker, settings: Settings, payloads: list[tuple[bytes, bytes]]) -> None:
    """Create the run's topics and publish (key, value) pairs to its events topic, in order."""
    from connectors.kafka import KafkaSink

    t = settings.kafka.topics
    broker.create_topics([t.events, t.predictions, t.dead_letters], settings.kafka.partitions)
    sink = KafkaSink(settings.kafka)
    for key, value in payloads:
        sink.send([Output(t.events, key, value)])
    sink.flush(30)
    sink.close()


def serve(settings: Settings, model, total: int, *, topics: list[str] | None = None, source=None, sink=None,
          inspect=None) -> tuple[list, BaseException | None, object]:
    """Serve until ``total`` inputs are consumed and read ``total`` outputs back from ``topics`` (the
    predictions topic by default) with a reader on kafka-python. ``inspect(service)`` runs before the
    service closes. Returns (outputs, the service's error, what ``inspect`` returned)."""
    from connectors.kafka import KafkaSink, KafkaSource

    service = Service(settings, model, source or KafkaSource(settings.kafka, max_poll_records=64),
                      sink or KafkaSink(settings.kafka))
    service.start(until=lambda: service.metrics.totals["consumed"] >= total)
    reader = KafkaSource(settings.kafka.model_copy(update={"group_id": f"reader-{settings.kafka.group_id}"}),
                         topics=topics or [settings.kafka.topics.predictions])
    out = read(reader, lambda got: len(got) >= total)
    out += read(reader, lambda got: False, timeout_s=1.0)
    service.join(30)
    seen = inspect(service) if inspect else None
    service.close()
    reader.close()
    return out, service.error, seen
