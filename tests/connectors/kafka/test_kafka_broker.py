"""The embedded broker: health-checked start, topics with a partition count, clean stop by pid."""

from __future__ import annotations

import socket

import pytest
from kafka import KafkaConsumer

from connectors.broker import EmbeddedBroker

pytestmark = pytest.mark.broker


def test_broker_creates_topics_and_stops_cleanly():
    with EmbeddedBroker() as b:
        pid, port = b.process.pid, b.port
        b.create_topics(["alpha", "beta"], partitions=5)
        b.create_topics(["alpha"], partitions=5)  # existing: left as it is
        assert {"alpha", "beta"} <= set(b.topics())
        c = KafkaConsumer(bootstrap_servers=b.bootstrap_servers)
        assert c.partitions_for_topic("alpha") == set(range(5))
        c.close()
        proc = b.process
    assert proc.poll() is not None, f"Tansu (pid {pid}) still running after stop"
    with socket.socket() as s:
        assert s.connect_ex(("127.0.0.1", port)) != 0, "the broker port still accepts connections"


def test_two_brokers_get_their_own_ports():
    with EmbeddedBroker() as a, EmbeddedBroker() as b:
        assert a.port != b.port
        a.create_topics(["only-in-a"], 1)
        assert "only-in-a" not in b.topics()


def test_topics_with_a_config_fall_back_to_plain_when_optional(broker):
    from connectors.kafka.admin import create_topics

    create_topics(broker.settings, ["compacted-changelog"], 3, {"cleanup.policy": "compact"}, config_optional=True)
    assert "compacted-changelog" in broker.topics()
