"""Topic administration with the same connection settings as the clients (security included)."""

from __future__ import annotations

from kafka import KafkaAdminClient
from kafka.admin import NewTopic
from kafka.errors import KafkaError, TopicAlreadyExistsError

from connectors.kafka.clients import common_config
from ktstream.config import KafkaSettings
from ktstream.exceptions import KTStreamError


class AdminError(KTStreamError):
    """A topic could not be listed or created."""


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
                  config: dict[str, str] | None = None, config_optional: bool = False) -> None:
    """Create each topic with ``partitions`` partitions; an existing topic is left as it is.

    ``config``: topic settings, e.g. ``{"cleanup.policy": "compact"}`` for a changelog.
    With ``config_optional`` a broker that refuses them (a development broker) gets a
    plain topic instead of an error.
    """
    admin = _admin(settings)
    try:
        for name in names:
            for attempt in ([config, None] if config and config_optional else [config]):
                try:
                    admin.create_topics([NewTopic(name, partitions, 1, topic_configs=attempt or None)])
                    break
                except TopicAlreadyExistsError:
                    break
                except KafkaError:
                    if attempt is None or not config_optional:
                        raise
    except KafkaError as exc:
        raise AdminError(f"cannot create topics {names}: {exc}") from exc
    finally:
        admin.close()
