"""ktstream settings -> kafka-python client settings (security and pass-through included).

Production settings (bootstrap servers, SASL/TLS, client ids) live in
``ktstream.config.KafkaSettings``; anything else goes through unchanged from its
``consumer`` / ``producer`` dictionaries, which win over the values set here.

kafka-python's own metrics are off (``metrics_enabled: False``): nothing reads them (the
engine exports its own through Prometheus), and their sensors cost the clients' IO threads
about 7 us of CPU per event at 5,000 events/s. Pass
``metrics_enabled: true`` through to have them back for ``KafkaConsumer.metrics()``.

>>> from ktstream.config import KafkaSettings
>>> cfg = consumer_config(KafkaSettings(consumer={"fetch_max_wait_ms": 100}), max_poll_records=10)
>>> cfg["enable_auto_commit"], cfg["fetch_max_wait_ms"], cfg["partition_assignment_strategy"][0].name
(False, 100, 'cooperative-sticky')
>>> cfg["metrics_enabled"], producer_config(KafkaSettings(producer={"metrics_enabled": True}))["metrics_enabled"]
(False, True)
"""

from __future__ import annotations

from typing import Any

from kafka.coordinator.assignors.cooperative_sticky import CooperativeStickyAssignor
from kafka.coordinator.assignors.range import RangePartitionAssignor
from kafka.coordinator.assignors.roundrobin import RoundRobinPartitionAssignor

from connectors.kafka.partitioner import CachedKeyPartitioner
from ktstream.config import KafkaSettings

ASSIGNORS = {"cooperative-sticky": CooperativeStickyAssignor, "range": RangePartitionAssignor,
             "roundrobin": RoundRobinPartitionAssignor}


def common_config(s: KafkaSettings) -> dict[str, Any]:
    cfg: dict[str, Any] = {"bootstrap_servers": s.bootstrap_servers.split(","), "client_id": s.client_id,
                           "security_protocol": s.security_protocol}
    if s.sasl_mechanism is not None:
        cfg["sasl_mechanism"] = s.sasl_mechanism
        cfg["sasl_plain_username"] = s.sasl_username
        cfg["sasl_plain_password"] = s.sasl_password.get_secret_value() if s.sasl_password else None
    for key in ("ssl_cafile", "ssl_certfile", "ssl_keyfile"):
        if getattr(s, key) is not None:
            cfg[key] = getattr(s, key)
    return cfg


def consumer_config(s: KafkaSettings, max_poll_records: int = 1000) -> dict[str, Any]:
    """Manual commits (the engine commits after the sink flushed), the configured assignor."""
    cfg = common_config(s) | {
        "group_id": s.group_id, "enable_auto_commit": False, "auto_offset_reset": s.auto_offset_reset,
        "isolation_level": s.isolation_level, "session_timeout_ms": s.session_timeout_ms,
        "heartbeat_interval_ms": max(s.session_timeout_ms // 3, 100), "max_poll_records": max_poll_records,
        "partition_assignment_strategy": [ASSIGNORS[s.assignment]], "fetch_max_wait_ms": s.fetch_max_wait_ms,
        "metrics_enabled": False,
    }
    return cfg | dict(s.consumer)


def producer_config(s: KafkaSettings) -> dict[str, Any]:
    """Idempotent producer, acks from every in-sync replica, key hashes remembered (same partitions)."""
    cfg = common_config(s) | {"acks": "all", "enable_idempotence": True, "linger_ms": s.linger_ms,
                              "batch_size": s.batch_bytes, "max_in_flight_requests_per_connection": 5,
                              "partitioner": CachedKeyPartitioner(), "metrics_enabled": False}
    return cfg | dict(s.producer)
