"""ktstream settings -> confluent-kafka (librdkafka) client properties, and the import of the extra.

``kafka.client: confluent`` selects this path (connectors.kafka.source_for / sink_for).
confluent-kafka is the optional extra ``kafka-native`` (``pip install 'ktstream[kafka-native]'``);
without it ``confluent_kafka()`` raises ConfigError with that one line. The same ktstream settings
map to librdkafka's dotted names; ``kafka.consumer`` / ``kafka.producer`` are passed through
unchanged and win, so with this client they hold librdkafka properties (``fetch.wait.max.ms``),
not kafka-python's (librdkafka refuses an unknown name when the client is created).

Keys are partitioned as the Java client and kafka-python do (``murmur2_random``: murmur2 of the
key over the partitions; a learner's outputs land where kafka-python would put them).

>>> from ktstream.config import KafkaSettings
>>> cfg = consumer_config(KafkaSettings(consumer={"fetch.wait.max.ms": 100}))
>>> cfg["enable.auto.commit"], cfg["fetch.wait.max.ms"], cfg["partition.assignment.strategy"]
(False, 100, 'cooperative-sticky')
>>> p = producer_config(KafkaSettings(security_protocol="SASL_SSL", sasl_mechanism="PLAIN", sasl_username="u",
...                                   sasl_password="p", ssl_cafile="/ca.pem"))
>>> p["acks"], p["enable.idempotence"], p["sasl.mechanism"], p["sasl.password"], p["ssl.ca.location"]
('all', True, 'PLAIN', 'p', '/ca.pem')
"""

from __future__ import annotations

import struct
from typing import Any

from ktstream.config import KafkaSettings
from ktstream.exceptions import ConfigError

MISSING = ("kafka.client is 'confluent' but confluent-kafka is not installed: "
           "pip install 'ktstream[kafka-native]' (or set kafka.client: kafka-python)")


def confluent_kafka():
    """The confluent_kafka module; ConfigError (one line) when the extra is not installed."""
    try:
        import confluent_kafka as module
    except ImportError:
        raise ConfigError(MISSING) from None
    return module


#: librdkafka's ``linger.ms`` is at most this: its ``flush`` still waits for a batch's linger (1,000 records to
#: the embedded broker: 15 ms per flush at 100 ms, 6 ms at 5 ms), and the engine flushes every micro-batch.
MAX_LINGER_MS = 5


def common_config(s: KafkaSettings) -> dict[str, Any]:
    """Connection and security; Nagle off (small requests, such as a flush's last one, go out at once:
    1,000-record flushes took 12 ms instead of 15 on the embedded broker)."""
    cfg: dict[str, Any] = {"bootstrap.servers": s.bootstrap_servers, "client.id": s.client_id,
                           "security.protocol": s.security_protocol.lower(), "socket.nagle.disable": True}
    if s.sasl_mechanism is not None:
        cfg["sasl.mechanism"] = s.sasl_mechanism
        if s.sasl_username is not None:
            cfg["sasl.username"] = s.sasl_username
        if s.sasl_password is not None:
            cfg["sasl.password"] = s.sasl_password.get_secret_value()
    for ours, theirs in (("ssl_cafile", "ssl.ca.location"), ("ssl_certfile", "ssl.certificate.location"),
                         ("ssl_keyfile", "ssl.key.location")):
        if getattr(s, ours) is not None:
            cfg[theirs] = getattr(s, ours)
    return cfg


def consumer_config(s: KafkaSettings) -> dict[str, Any]:
    """Manual commits only (no auto commit, no auto offset store), the configured assignor."""
    cfg = common_config(s) | {
        "group.id": s.group_id, "enable.auto.commit": False, "enable.auto.offset.store": False,
        "auto.offset.reset": s.auto_offset_reset, "isolation.level": s.isolation_level,
        "session.timeout.ms": s.session_timeout_ms, "heartbeat.interval.ms": max(s.session_timeout_ms // 3, 100),
        "partition.assignment.strategy": s.assignment, "fetch.wait.max.ms": s.fetch_max_wait_ms,
        "enable.partition.eof": False,
    }
    return cfg | dict(s.consumer)


def producer_config(s: KafkaSettings) -> dict[str, Any]:
    """Idempotent producer, acks from every in-sync replica, Java-compatible key partitioning, ``linger.ms``
    at most ``MAX_LINGER_MS`` (a ``producer`` entry ``linger.ms`` overrides it)."""
    cfg = common_config(s) | {"acks": "all", "enable.idempotence": True,
                              "linger.ms": min(s.linger_ms, MAX_LINGER_MS),
                              "batch.size": s.batch_bytes, "max.in.flight.requests.per.connection": 5,
                              "partitioner": "murmur2_random"}
    return cfg | dict(s.producer)


def generation_of(group_metadata: bytes | None) -> int:
    """The group generation in librdkafka's serialised consumer-group metadata ("CGMDv2:", then the
    generation as a native int32); -1 when it is not there.

    >>> generation_of(b"CGMDv2:" + struct.pack("=i", 7) + b"group\\x00\\x00\\x01"), generation_of(None)
    (7, -1)
    """
    if not group_metadata or not group_metadata.startswith(b"CGMDv2:") or len(group_metadata) < 11:
        return -1
    return struct.unpack_from("=i", group_metadata, 7)[0]
