"""The Kafka connectors under a ``ktstream.`` name: sources, sinks and the embedded development broker.

They live in the top-level ``connectors`` package (the core imports no Kafka client); this module only
re-exports them, so ``ktstream.kafka.EmbeddedBroker`` and ``from ktstream.api.kafka import KafkaSource``
work without naming ``connectors``.
"""

from connectors.broker import BrokerError, EmbeddedBroker
from connectors.kafka import KafkaSink, KafkaSource, TransactionalSink, output_sink_for, sink_for, source_for
from connectors.kafka.admin import create_topics, list_topics

__all__ = ["BrokerError", "EmbeddedBroker", "KafkaSink", "KafkaSource", "TransactionalSink", "create_topics",
           "list_topics", "output_sink_for", "sink_for", "source_for"]
