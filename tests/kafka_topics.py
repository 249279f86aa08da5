"""Topic settings for tests that need Kafka's retention to act, or to keep old records."""

from __future__ import annotations

from typing import Any

from confluent_kafka.admin import (
    AdminClient,
    AlterConfigOpType,
    ConfigEntry,
    ConfigResource,
    ResourceType,
)

from tidelake.streaming.kafka_admin import quiet_client_config

KEEP_FOREVER = -1


def set_retention(kafka_conf: dict[str, Any], topic: str, retention_ms: int) -> None:
    """Set the topic's retention.ms (Kafka deletes records stamped older than that)."""
    admin = AdminClient(quiet_client_config(kafka_conf))
    entry = ConfigEntry(
        "retention.ms", str(retention_ms), incremental_operation=AlterConfigOpType.SET
    )
    resource = ConfigResource(ResourceType.TOPIC, topic, incremental_configs=[entry])
    for future in admin.incremental_alter_configs([resource]).values():
        future.result(30)
