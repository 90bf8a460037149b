"""Kafka connectors: the only place that imports a Kafka client (the engine sees plain records).

Two clients behind the same interfaces, chosen by ``kafka.client``: kafka-python (``KafkaSource``,
``KafkaSink``, ``TransactionalSink``) and confluent-kafka on librdkafka (``ConfluentSource``,
``ConfluentSink``, ``ConfluentTransactionalSink``, the extra ``kafka-native``). Build them with
``source_for`` / ``output_sink_for`` / ``sink_for``; nothing outside connectors/ names a client.
Topic administration (connectors.kafka.admin) and the committed reader of a restore
(connectors.kafka.committed) are kafka-python's for both: see docs/engine.md, "Kafka clients".
"""

from connectors.kafka.sink import KafkaSink
from connectors.kafka.source import KafkaSource
from connectors.kafka.transactional import TransactionalSink

CLIENTS = ("kafka-python", "confluent")


def source_for(kafka, topics: list[str] | None = None, max_poll_records: int = 1000, **overrides):
    """A consumer-group source on ``kafka.client`` (``kafka``: ktstream.config.KafkaSettings)."""
    if kafka.client == "confluent":
        from connectors.kafka.confluent_source import ConfluentSource

        return ConfluentSource(kafka, topics, max_poll_records, **overrides)
    return KafkaSource(kafka, topics, max_poll_records, **overrides)


def output_sink_for(kafka, track_acked: bool = True, **overrides):
    """A plain (at-least-once, idempotent, acks=all) sink on ``kafka.client``. ``track_acked=False``: its
    ``acked`` (the changelog checkpoint durable state records) stays empty, which spares librdkafka a
    Python delivery callback per record."""
    if kafka.client == "confluent":
        from connectors.kafka.confluent_sink import ConfluentSink

        return ConfluentSink(kafka, track_acked, **overrides)
    return KafkaSink(kafka, track_acked, **overrides)


def transactional_sink_for(kafka, state, track_acked: bool = True, **overrides):
    """An exactly-once sink (one producer transaction per micro-batch) on ``kafka.client``
    (``state``: ktstream.config.StateSettings: the instance id and the transaction timeout)."""
    if kafka.client == "confluent":
        from connectors.kafka.confluent_sink import ConfluentTransactionalSink

        return ConfluentTransactionalSink(kafka, state, track_acked, **overrides)
    return TransactionalSink(kafka, state, track_acked, **overrides)


def sink_for(settings):
    """The sink ``settings.state.processing_guarantee`` asks for, on ``settings.kafka.client``
    (``settings``: ktstream.config.Settings); it tracks ``acked`` only for durable state (``state.dir``),
    the one reader of it."""
    durable = settings.state.dir is not None
    if settings.state.processing_guarantee == "exactly-once":
        return transactional_sink_for(settings.kafka, settings.state, durable)
    return output_sink_for(settings.kafka, durable)


__all__ = ["CLIENTS", "KafkaSink", "KafkaSource", "TransactionalSink", "output_sink_for", "sink_for", "source_for",
           "transactional_sink_for"]
