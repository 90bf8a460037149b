"""Topics ktstream creates: replication and min.insync.replicas from the configuration, and a changelog
that is compacted or an error (or, on a broker that cannot compact, a warning and a metric).

A fake admin client stands in for an Apache Kafka cluster where its answers matter (a broker that
refuses cleanup.policy=compact, an existing changelog with cleanup.policy=delete); the embedded
broker (Tansu) checks the settings really reach a broker.
"""

from __future__ import annotations

import logging
import uuid

import pytest
from kafka.errors import InvalidConfigurationError, TopicAlreadyExistsError

from connectors.broker import EmbeddedBroker
from connectors.kafka import admin
from connectors.kafka.admin import AdminError
from ktstream.cli.serve import create_changelog
from ktstream.config import KafkaSettings, load_settings
from ktstream.engine.metrics import EngineMetrics
from ktstream.exceptions import ConfigError


class FakeKafka:
    """What an Apache Kafka cluster answers: created topics, their configs, refusals."""

    def __init__(self, refuse_compaction=False, existing=None):
        self.refuse_compaction, self.topics = refuse_compaction, dict(existing or {})
        self.created: list[tuple[str, int, int, dict]] = []

    def create_topics(self, new_topics, **kw):
        if isinstance(new_topics, list):  # kafka-python's older form: NewTopic objects
            new_topics = {t.name: {"num_partitions": t.num_partitions, "replication_factor": t.replication_factor,
                                   "configs": t.topic_configs} for t in new_topics}
        for name, spec in new_topics.items():
            cfg = spec.get("configs") or {}
            if name in self.topics:
                raise TopicAlreadyExistsError(name)
            if self.refuse_compaction and cfg.get("cleanup.policy") == "compact":
                raise InvalidConfigurationError("cleanup.policy=compact is not allowed here")
            self.topics[name] = {"cleanup.policy": "delete", **cfg}
            self.created.append((name, spec["num_partitions"], spec["replication_factor"], cfg))

    def describe_configs(self, resources, config_filter="modified"):
        return {"topic": {r.name: {k: {"value": v} for k, v in self.topics[r.name].items()} for r in resources}}

    def close(self):
        pass


@pytest.fixture
def fake(monkeypatch):
    def install(**kw) -> FakeKafka:
        cluster = FakeKafka(**kw)
        monkeypatch.setattr(admin, "_admin", lambda settings: cluster)
        return cluster
    return install


def settings(**kafka):
    return load_settings(None, kafka={"topics": {"events": "ev"}, **kafka}, state={"dir": "/nonexistent"})


def test_topics_get_replication_and_min_insync_from_the_configuration(fake):
    cluster = fake()
    assert create_changelog(settings()) == "ev.learners-changelog"
    ((name, partitions, replicas, cfg),) = cluster.created
    assert (partitions, replicas, cfg) == (6, 3, {"min.insync.replicas": "2", "cleanup.policy": "compact"})
    cluster = fake()
    create_changelog(settings(replication_factor=5, min_insync_replicas=3, partitions=2))
    assert cluster.created[0][1:] == (2, 5, {"min.insync.replicas": "3", "cleanup.policy": "compact"})


def test_topics_min_insync_above_replication_is_a_config_error():
    with pytest.raises(ConfigError, match="min_insync_replicas"):
        load_settings(None, kafka={"replication_factor": 1})
    assert load_settings(None, kafka={"replication_factor": 1, "min_insync_replicas": 1}).kafka.replication_factor == 1


def test_topics_a_broker_refusing_compaction_is_an_error_not_a_plain_changelog(fake):
    cluster = fake(refuse_compaction=True)
    with pytest.raises(AdminError, match="compact"):
        create_changelog(settings())
    assert cluster.topics == {}, "no plain changelog was created instead"


def test_topics_an_existing_changelog_that_is_not_compacted_is_an_error(fake):
    fake(existing={"ev.learners-changelog": {"cleanup.policy": "delete"}})
    with pytest.raises(AdminError, match="cleanup.policy=delete"):
        create_changelog(settings())
    fake(existing={"ev.learners-changelog": {"cleanup.policy": "compact,delete"}})
    assert create_changelog(settings()) == "ev.learners-changelog"


def test_topics_a_broker_that_cannot_compact_gets_a_loud_warning_and_a_metric(fake, caplog):
    from ktstream.cli.serve import ensure_changelog

    cluster = fake()
    with caplog.at_level(logging.WARNING, logger="connectors.kafka.admin"):
        name, compacted = ensure_changelog(settings(broker_compacts=False))
    assert not compacted and "cleanup.policy" not in cluster.created[0][3]
    assert any("NOT compacted" in r.getMessage() for r in caplog.records if r.levelno == logging.WARNING)
    metrics = EngineMetrics()
    assert metrics.registry.get_sample_value("ktstream_changelog_compacted") is None  # no durable state yet
    metrics.changelog_compaction(compacted)
    assert metrics.registry.get_sample_value("ktstream_changelog_compacted") == 0


@pytest.mark.broker
def test_topics_on_the_embedded_broker_carry_the_configured_replication_and_compaction():
    from kafka import KafkaAdminClient

    with EmbeddedBroker() as b:
        k = KafkaSettings(bootstrap_servers=b.bootstrap_servers, replication_factor=3, min_insync_replicas=2)
        name = f"cl-{uuid.uuid4().hex[:6]}"
        assert admin.ensure_changelog(k, name, 2)
        assert admin.topic_config(k, name, "cleanup.policy") == "compact"
        assert admin.topic_config(k, name, "min.insync.replicas") == "2"
        client = KafkaAdminClient(bootstrap_servers=b.bootstrap_servers)
        try:
            (described,) = client.describe_topics([name])
        finally:
            client.close()
        assert {len(p["replica_nodes"]) for p in described["partitions"]} == {3}
        assert b.settings.replication_factor == 1 and not b.settings.broker_compacts  # the embedded broker's own
