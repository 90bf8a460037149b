"""Kafka connectors: the only place that imports kafka-python (the engine sees plain records)."""

from connectors.kafka.sink import KafkaSink
from connectors.kafka.source import KafkaSource
from connectors.kafka.transactional import TransactionalSink


def sink_for(settings) -> KafkaSink:
    """The sink ``settings.state.processing_guarantee`` asks for (``settings``: ktstream.config.Settings)."""
    if settings.state.processing_guarantee == "exactly-once":
        return TransactionalSink(settings.kafka, settings.state)
    return KafkaSink(settings.kafka)


__all__ = ["KafkaSink", "KafkaSource", "TransactionalSink", "sink_for"]
