"""Kafka topics in tests: reading one to its end, and retention settings."""

from __future__ import annotations

import uuid
from typing import Any, NamedTuple

import pytest
from confluent_kafka import Consumer, KafkaError, TopicPartition
from confluent_kafka.admin import (
    AdminClient,
    AlterConfigOpType,
    ConfigEntry,
    ConfigResource,
    ResourceType,
)

from tidelake.streaming.kafka.admin import quiet_client_config
from tidelake.streaming.kafka.offsets import PartitionEnds
from tidelake.streaming.polling import poll_until

KEEP_FOREVER = -1


def set_retention(kafka_conf: dict[str, Any], topic: str, retention_ms: int) -> None:
    """Set the topic's retention.ms (Kafka deletes records stamped older than that), and wait
    until the broker serves it: the controller acknowledges the change before the broker applies
    it, and a record stamped long ago produced in between went at the next retention check."""
    admin = AdminClient(quiet_client_config(kafka_conf))
    entry = ConfigEntry(
        "retention.ms", str(retention_ms), incremental_operation=AlterConfigOpType.SET
    )
    resource = ConfigResource(ResourceType.TOPIC, topic, incremental_configs=[entry])
    for future in admin.incremental_alter_configs([resource]).values():
        future.result(30)

    def applied() -> bool | None:
        described = admin.describe_configs([ConfigResource(ResourceType.TOPIC, topic)])
        (configs,) = [future.result(30) for future in described.values()]
        return True if configs["retention.ms"].value == str(retention_ms) else None

    poll_until(applied, timeout_s=60, interval_s=0.1, timeout_error=TimeoutError)


class KafkaRecord(NamedTuple):
    partition: int
    offset: int
    key: bytes | None
    value: bytes | None
    timestamp_ms: int


def read_values(kafka_conf: dict[str, Any], topic: str, **options: Any) -> list[bytes]:
    """The values of read_records."""
    return [record.value for record in read_records(kafka_conf, topic, **options)]


def read_records(
    kafka_conf: dict[str, Any],
    topic: str,
    *,
    partitions: list[int] | None = None,
    isolation_level: str = "read_committed",
    timeout_s: float = 30.0,
) -> list[KafkaRecord]:
    """Every record of the topic's partitions (all by default), each read to its end (partition
    EOF), without a consumer group."""
    consumer = Consumer(
        quiet_client_config(
            {
                **kafka_conf,
                "group.id": f"tidelake-test-{uuid.uuid4().hex}",
                "enable.auto.commit": False,
                "enable.partition.eof": True,
                "isolation.level": isolation_level,
            }
        )
    )
    try:
        if partitions is None:
            partitions = sorted(consumer.list_topics(topic, timeout=10).topics[topic].partitions)
        consumer.assign([TopicPartition(topic, p, 0) for p in partitions])
        records: list[KafkaRecord] = []
        pending = set(partitions)

        def read_to_the_end() -> list[KafkaRecord] | None:
            """One message taken; the records once every partition is read to its end."""
            message = consumer.poll(1) if pending else None
            if message is not None and message.error() is not None:
                assert message.error().code() == KafkaError._PARTITION_EOF, message.error()
                pending.discard(message.partition())
            elif message is not None:
                _, timestamp_ms = message.timestamp()
                records.append(
                    KafkaRecord(
                        message.partition(),
                        message.offset(),
                        message.key(),
                        message.value(),
                        timestamp_ms,
                    )
                )
            return None if pending else records

        return poll_until(
            read_to_the_end,
            timeout_s=timeout_s,
            interval_s=0,
            timeout_error=lambda _: AssertionError(
                f"{topic} not read to its end in {timeout_s:g} s"
            ),
        )
    finally:
        consumer.close()


def topic_records(kafka_conf: dict[str, Any], topic: str) -> int:
    """Records on the topic, from Kafka's own end offsets (every partition)."""
    probe = PartitionEnds(kafka_conf, "test-records", 10)
    try:
        return sum(probe.latest(probe.partitions([topic])).values())
    finally:
        probe.close()


ON_BOTH_KAFKAS = pytest.mark.parametrize("kafka_conf", ["plaintext", "secured"], indirect=True)
"""Run a test on the plaintext broker, then on the secured one (SASL_SSL, SCRAM-SHA-512, TLS)."""

ON_LOCAL_AND_SECURED_S3 = pytest.mark.parametrize(
    ("kafka_conf", "storage_roots"),
    [("plaintext", "local"), ("secured", "s3")],
    indirect=True,
)
"""Twice: as `make dev` runs (plaintext Kafka, a local disk), then as production does (the secured
broker with the process's own user, the lake on S3). For tests where neither the broker nor the
store is the subject but each must work."""

ON_SECURED_S3 = pytest.mark.parametrize(
    ("kafka_conf", "storage_roots"), [("secured", "s3")], indirect=True
)
"""Once, as production runs (the secured broker, the lake on S3), where the plaintext and local
setup is already what `tidelake dev` runs in the e2e tests."""
