"""A real embedded broker (Tansu) for the connector tests, and a bounded wait helper."""

from __future__ import annotations

import time
import uuid

import pytest

from connectors.broker import EmbeddedBroker
from connectors.kafka import CLIENTS
from ktstream.config import KafkaSettings


@pytest.fixture(scope="session")
def broker():
    with EmbeddedBroker() as b:
        yield b


@pytest.fixture(params=CLIENTS)
def client(request) -> str:
    """Each Kafka client (kafka.client); confluent is skipped, saying why, without the kafka-native extra."""
    if request.param == "confluent":
        pytest.importorskip("confluent_kafka", reason="confluent-kafka is not installed (pip install -e "
                                                      "'.[kafka-native]'): the confluent client path is not tested")
    return request.param


@pytest.fixture
def kafka_settings(broker, client):
    """Settings for a fresh group on the shared broker (session timeout near 6 s: Tansu joins in ~3 s), on
    each client."""

    def make(**kw) -> KafkaSettings:
        base = dict(bootstrap_servers=broker.bootstrap_servers, group_id=f"g-{uuid.uuid4().hex[:8]}",
                    session_timeout_ms=6000, client_id="test", client=client)
        return KafkaSettings(**{**base, **kw})

    return make


@pytest.fixture
def topic(broker):
    def make(partitions: int = 4) -> str:
        name = f"t-{uuid.uuid4().hex[:8]}"
        broker.create_topics([name], partitions)
        return name

    return make


def wait_until(predicate, timeout_s: float, step=None, message: str = "condition"):
    """Call ``step`` (if any) until ``predicate()`` holds; fail after ``timeout_s``."""
    deadline = time.monotonic() + timeout_s
    while not predicate():
        if time.monotonic() > deadline:
            pytest.fail(f"timed out after {timeout_s}s waiting for {message}")
        if step is not None:
            step()
        else:
            time.sleep(0.05)


@pytest.fixture
def wait():
    return wait_until
