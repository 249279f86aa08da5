"""Kafka admin helpers against a real broker: topics as declared, clear errors otherwise."""

from __future__ import annotations

import dataclasses
from typing import Any

import pytest
from confluent_kafka.admin import AdminClient
from kafka_topics import ON_BOTH_KAFKAS

from tidelake.streaming.calls.call_events import CALL_EVENTS
from tidelake.streaming.errors import ConfigError
from tidelake.streaming.kafka.admin import (
    TopicConfigError,
    TopicMissingError,
    add_partitions,
    check_reachable,
    ensure_flow_topics,
    ensure_topic,
    quiet_client_config,
    require_topic,
    topic_partition_count,
)


def _partitions(conf: dict[str, Any], topic: str) -> int | None:
    topics = AdminClient(quiet_client_config(conf)).list_topics(timeout=10).topics
    return len(topics[topic].partitions) if topic in topics else None


def test_check_reachable_passes_for_a_live_broker(kafka_conf: dict[str, Any]) -> None:
    check_reachable(kafka_conf, timeout_s=5)


@ON_BOTH_KAFKAS
def test_ensure_topic_creates_it_with_the_partition_count(
    kafka_conf: dict[str, Any], topic_name: str
) -> None:
    assert topic_partition_count(kafka_conf, topic_name) is None
    ensure_topic(kafka_conf, topic_name, 3)
    assert _partitions(kafka_conf, topic_name) == 3
    assert topic_partition_count(kafka_conf, topic_name) == 3


def test_ensure_topic_is_idempotent(kafka_conf: dict[str, Any], topic_name: str) -> None:
    ensure_topic(kafka_conf, topic_name, 2, replication_factor=1)
    ensure_topic(kafka_conf, topic_name, 2)
    ensure_topic(kafka_conf, topic_name, 2, replication_factor=1)
    assert _partitions(kafka_conf, topic_name) == 2


def test_ensure_topic_refuses_fewer_partitions_than_declared(
    kafka_conf: dict[str, Any], topic_name: str
) -> None:
    ensure_topic(kafka_conf, topic_name, 3)
    with pytest.raises(TopicConfigError, match=rf"'{topic_name}'.* has 3 partitions, but 5"):
        ensure_topic(kafka_conf, topic_name, 5)
    assert _partitions(kafka_conf, topic_name) == 3


@ON_BOTH_KAFKAS
def test_a_topic_grown_past_its_declaration_is_accepted(
    kafka_conf: dict[str, Any], topic_name: str
) -> None:
    ensure_topic(kafka_conf, topic_name, 2)
    assert add_partitions(kafka_conf, topic_name, 4) == 2
    ensure_topic(kafka_conf, topic_name, 2)
    assert _partitions(kafka_conf, topic_name) == 4
    with pytest.raises(TopicConfigError, match="Kafka cannot remove partitions"):
        add_partitions(kafka_conf, topic_name, 3)


def test_looking_up_a_missing_topic_does_not_create_it(
    kafka_conf: dict[str, Any], topic_name: str
) -> None:
    # Kafka (auto.create.topics.enable=true by default) creates a topic that a metadata request
    # names; the helpers must never do that.
    assert topic_partition_count(kafka_conf, topic_name) is None
    with pytest.raises(TopicMissingError, match="tidelake topics create"):
        require_topic(kafka_conf, topic_name)
    assert _partitions(kafka_conf, topic_name) is None


def test_ensure_flow_topics_uses_each_flows_declaration(
    kafka_conf: dict[str, Any], topic_name: str
) -> None:
    flow = dataclasses.replace(CALL_EVENTS, topic=topic_name, topic_partitions=2)
    ensure_flow_topics(kafka_conf, [flow])
    ensure_flow_topics(kafka_conf, [flow])
    assert _partitions(kafka_conf, topic_name) == 2


def test_ensure_flow_topics_rejects_conflicting_declarations(
    kafka_conf: dict[str, Any], topic_name: str
) -> None:
    first = dataclasses.replace(CALL_EVENTS, topic=topic_name, topic_partitions=2)
    second = dataclasses.replace(first, name="other_flow", topic_partitions=3)
    with pytest.raises(TopicConfigError, match="call_events and other_flow share topic"):
        ensure_flow_topics(kafka_conf, [first, second])
    assert _partitions(kafka_conf, topic_name) is None


def test_invalid_arguments_fail_before_any_request(kafka_conf: dict[str, Any]) -> None:
    with pytest.raises(ValueError, match="partitions must be >= 1"):
        ensure_topic(kafka_conf, "never-created", 0)
    with pytest.raises(ValueError, match="replication_factor"):
        ensure_topic(kafka_conf, "never-created", 1, replication_factor=0)
    with pytest.raises(ConfigError, match=r"no bootstrap\.servers"):
        check_reachable({})
    with pytest.raises(ConfigError, match=r"no\.such\.setting"):
        check_reachable({**kafka_conf, "no.such.setting": "1"})
