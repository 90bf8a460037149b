"""Kafka connectors: the only place that imports kafka-python (the engine sees plain records)."""

from connectors.kafka.sink import KafkaSink
from connectors.kafka.source import KafkaSource

__all__ = ["KafkaSink", "KafkaSource"]
