"""Topic administration with the same connection settings as the clients (security included).

Topics are created with ``kafka.replication_factor`` replicas and ``min.insync.replicas`` =
``kafka.min_insync_replicas`` (production: 3 and 2; a one-broker development cluster: 1 and 1).
``ensure_changelog`` creates the state changelog compacted and checks an existing one: a changelog
that is not compacted keeps every state ever committed and makes each restore of an empty store
read all of it, so without compaction it is an error, unless ``kafka.broker_compacts`` is false
(Tansu cannot compact): then a plain topic, a warning, and the caller reports it in a metric.
"""

from __future__ import annotations

import logging

from kafka import KafkaAdminClient
from kafka.admin import ConfigResource, ConfigResourceType
from kafka.errors import InvalidConfigurationError, KafkaError, PolicyViolationError, TopicAlreadyExistsError

from connectors.kafka.clients import common_config
from ktstream.config import KafkaSettings
from ktstream.exceptions import KTStreamError

log = logging.getLogger(__name__)

COMPACT = {"cleanup.policy": "compact"}
#: The broker refuses a topic's settings (as opposed to being unreachable or short of replicas).
CONFIG_REFUSED = (InvalidConfigurationError, PolicyViolationError)


class AdminError(KTStreamError):
    """A topic could not be listed, created or described, or exists with settings ktstream cannot use."""


def _admin(settings: KafkaSettings) -> KafkaAdminClient:
    cfg = common_config(settings) | {"request_timeout_ms": 5000, "client_id": f"{settings.client_id}-admin"}
    return KafkaAdminClient(**cfg)


def list_topics(settings: KafkaSettings) -> list[str]:
    """Topic names (a metadata request: also the embedded broker's health check)."""
    admin = _admin(settings)
    try:
        return sorted(admin.list_topics())
    finally:
        admin.close()


def create_topics(settings: KafkaSettings, names: list[str], partitions: int,
                  config: dict[str, str] | None = None, config_optional: bool = False) -> list[str]:
    """Create each missing topic with ``partitions`` partitions, the configured replication and
    min.insync.replicas, and ``config`` (e.g. ``COMPACT``); an existing topic is left as it is.
    Returns the names this call created.

    With ``config_optional`` a broker that refuses ``config`` itself (and only that) gets the topic
    without it, with a warning; any other failure (too few brokers for the replicas, no connection)
    is an `AdminError`.
    """
    base = {"min.insync.replicas": str(settings.min_insync_replicas)}
    created = []
    admin = _admin(settings)
    try:
        for name in names:
            try:
                _create(admin, name, partitions, settings.replication_factor, base | (config or {}))
            except TopicAlreadyExistsError:
                continue
            except CONFIG_REFUSED as exc:
                if not (config and config_optional):
                    raise
                log.warning("the broker refused topic %s's settings %s (%s): created without them", name,
                            config, exc)
                _create(admin, name, partitions, settings.replication_factor, base)
            created.append(name)
    except KafkaError as exc:
        raise AdminError(f"cannot create topics {names} (replication factor {settings.replication_factor}, "
                         f"min.insync.replicas {settings.min_insync_replicas}): {exc}") from exc
    finally:
        admin.close()
    return created


def _create(admin: KafkaAdminClient, name: str, partitions: int, replicas: int, config: dict[str, str]) -> None:
    admin.create_topics({name: {"num_partitions": partitions, "replication_factor": replicas, "configs": config}})


def topic_config(settings: KafkaSettings, name: str, key: str) -> str | None:
    """A topic's setting as the broker reports it; None where the broker reports none (Tansu)."""
    admin = _admin(settings)
    try:
        described = admin.describe_configs([ConfigResource(ConfigResourceType.TOPIC, name)], config_filter="all")
    except KafkaError as exc:
        raise AdminError(f"cannot describe topic {name}: {exc}") from exc
    finally:
        admin.close()
    entry = described.get("topic", {}).get(name, {}).get(key)
    return None if entry is None else entry.get("value")


def ensure_changelog(settings: KafkaSettings, name: str, partitions: int) -> bool:
    """Create (or check) the changelog topic; True when it is compacted, as far as the broker says."""
    if not settings.broker_compacts:
        create_topics(settings, [name], partitions)
        log.warning("changelog topic %s is NOT compacted (kafka.broker_compacts is false): it keeps every "
                    "committed state and a restore of an empty store reads all of it; use a broker that "
                    "compacts in production", name)
        return False
    if name in create_topics(settings, [name], partitions, COMPACT):
        return True  # the broker accepted cleanup.policy=compact
    policy = topic_config(settings, name, "cleanup.policy")
    if policy is None:
        log.warning("changelog topic %s exists and the broker does not report its cleanup.policy: it is "
                    "assumed compacted", name)
        return True
    if "compact" not in policy.split(","):
        raise AdminError(f"changelog topic {name} exists with cleanup.policy={policy}; it must be compacted "
                         f"(kafka-configs.sh --alter --entity-type topics --entity-name {name} --add-config "
                         f"cleanup.policy=compact), or set kafka.broker_compacts: false on a broker that "
                         f"cannot compact")
    return True
