"""Kafka secured as production runs it: the local broker with SASL_SSL (SCRAM-SHA-512), an SSL
listener that requires client certificates, and Kafka's StandardAuthorizer; a refused client is
one line naming what to check (issue 31, first part)."""

from __future__ import annotations

import os
from collections.abc import Iterator
from pathlib import Path

import pytest
from confluent_kafka import Consumer, KafkaError, Producer, TopicPartition
from lake_readers import read_delta
from live_stream import cli_available_now

from tidelake.platform.dev.produce import produce_demo_events
from tidelake.platform.local.certificates import make_certificates
from tidelake.platform.local.kafka_broker import LocalKafkaBroker
from tidelake.platform.local.kafka_cluster import LocalKafkaCluster
from tidelake.streaming.calls.call_events import CALL_EVENTS
from tidelake.streaming.kafka.acls import role_grants
from tidelake.streaming.kafka.admin import (
    KafkaAuthenticationError,
    KafkaAuthorizationError,
    check_reachable,
    ensure_topic,
    require_topic,
    topic_partition_count,
)
from tidelake.streaming.kafka.offsets import PartitionEnds
from tidelake.streaming.settings import kafka_client_env


@pytest.fixture(scope="module")
def secured_broker() -> Iterator[LocalKafkaBroker]:
    with LocalKafkaBroker(secured=True) as broker:
        yield broker


def test_the_secured_broker_serves_sasl_and_certificate_clients(
    secured_broker: LocalKafkaBroker,
) -> None:
    admin = secured_broker.client_config()
    check_reachable(admin, timeout_s=10)
    ensure_topic(admin, "secured-topic", 2)
    assert topic_partition_count(admin, "secured-topic") == 2
    check_reachable(secured_broker.certificate_client_config(), timeout_s=10)


def test_a_wrong_password_names_the_user_and_mechanism(secured_broker: LocalKafkaBroker) -> None:
    conf = secured_broker.client_config("stream") | {"sasl.password": "not-it"}
    with pytest.raises(KafkaAuthenticationError) as refused:
        check_reachable(conf, timeout_s=5)
    message = str(refused.value)
    assert message.startswith(
        f"Kafka at bootstrap.servers={conf['bootstrap.servers']} refused user 'stream' "
        "(SCRAM-SHA-512): "
    )
    assert "invalid credentials" in message and "\n" not in message
    assert "not-it" not in message


def test_a_ca_that_did_not_sign_the_broker_is_named(
    secured_broker: LocalKafkaBroker, tmp_path: Path
) -> None:
    other = make_certificates(tmp_path)
    conf = secured_broker.client_config() | {"ssl.ca.location": str(other.client_ca)}
    with pytest.raises(KafkaAuthenticationError, match="KAFKA_SSL_CA_LOCATION"):
        check_reachable(conf, timeout_s=5)


def test_a_client_without_a_certificate_is_refused_by_name(
    secured_broker: LocalKafkaBroker,
) -> None:
    conf = secured_broker.certificate_client_config()
    del conf["ssl.certificate.location"], conf["ssl.key.location"]
    with pytest.raises(KafkaAuthenticationError, match="KAFKA_SSL_CERTIFICATE_LOCATION"):
        check_reachable(conf, timeout_s=5)


def test_a_principal_without_describe_is_told_so_not_that_the_topic_is_missing(
    secured_broker: LocalKafkaBroker,
) -> None:
    ensure_topic(secured_broker.client_config(), "guarded-topic", 1)
    with pytest.raises(KafkaAuthorizationError) as refused:
        require_topic(secured_broker.client_config("detector"), "guarded-topic", timeout_s=5)
    assert "does not let 'detector' DESCRIBE topic 'guarded-topic'" in str(refused.value)


def test_each_role_gets_exactly_its_grants(secured_broker: LocalKafkaBroker) -> None:
    """The stream's user reads its topic with READ and DESCRIBE only; the ingest user, which may
    only write it, is refused reading with the topic named."""
    admin = secured_broker.client_config()
    ensure_topic(admin, "role-topic", 1)
    ensure_topic(admin, "role-alerts", 1)
    secured_broker.grant(role_grants(["role-topic"], "role-alerts"))
    producer = Producer(secured_broker.client_config("ingest"))
    producer.produce("role-topic", b"x", b"k")
    assert producer.flush(10) == 0
    ends = PartitionEnds(secured_broker.client_config("stream"), "test", 10)
    try:
        assert ends.latest([("role-topic", 0)]) == {("role-topic", 0): 1}
    finally:
        ends.close()
    consumer = Consumer({**secured_broker.client_config("ingest"), "group.id": "none"})
    consumer.assign([TopicPartition("role-topic", 0, 0)])
    codes = set()
    for _ in range(10):  # the group's refusal may come first: the ingest user has none either
        message = consumer.poll(2)
        if message is not None and message.error() is not None:
            codes.add(message.error().code())
        if KafkaError.TOPIC_AUTHORIZATION_FAILED in codes:
            break
    consumer.close()
    assert KafkaError.TOPIC_AUTHORIZATION_FAILED in codes


def test_a_stream_whose_user_may_not_read_its_topic_fails_in_one_line(
    secured_broker: LocalKafkaBroker, tmp_path: Path
) -> None:
    admin = secured_broker.client_config()
    ensure_topic(admin, CALL_EVENTS.topic, CALL_EVENTS.topic_partitions)
    produce_demo_events(CALL_EVENTS, admin, count=200, progress=False, seed=5)
    secured_broker.grant(role_grants([CALL_EVENTS.topic], "call-anomalies"))
    env = {
        **os.environ,
        "TIDELAKE_LAKE": str(tmp_path / "lake"),
        "TIDELAKE_CHECKPOINTS": str(tmp_path / "checkpoints"),
        "TIDELAKE_HOME": str(tmp_path / "home"),
        **kafka_client_env(secured_broker.client_config("ingest")),  # may write, not read
    }
    run = cli_available_now(env, cwd=tmp_path)
    assert run.returncode == 1
    errors = [line for line in run.stderr.splitlines() if line.startswith("Error:")]
    bootstrap, topic = admin["bootstrap.servers"], CALL_EVENTS.topic
    expected = (
        f"Error: call_events_stream failed: Kafka at bootstrap.servers={bootstrap} does not let "
        f"'ingest' READ topic(s) {topic} (TopicAuthorizationException): grant it READ and "
        "DESCRIBE on them (docs/deployment.md). Nothing was committed."
    )
    assert errors == [expected]
    assert read_delta(tmp_path / "lake" / "call_events").num_rows == 0


def test_the_stream_users_password_reaches_no_log_and_no_file_at_debug(
    secured_broker: LocalKafkaBroker, tmp_path: Path
) -> None:
    admin = secured_broker.client_config()
    ensure_topic(admin, CALL_EVENTS.topic, CALL_EVENTS.topic_partitions)
    produce_demo_events(CALL_EVENTS, admin, count=300, progress=False, seed=6)
    secured_broker.grant(role_grants([CALL_EVENTS.topic], "call-anomalies"))
    stream_user = secured_broker.client_config("stream")
    password = stream_user["sasl.password"]
    env = {
        **os.environ,
        "TIDELAKE_LOG_LEVEL": "DEBUG",
        "TIDELAKE_LAKE": str(tmp_path / "lake"),
        "TIDELAKE_CHECKPOINTS": str(tmp_path / "checkpoints"),
        "TIDELAKE_HOME": str(tmp_path / "home"),
        "SPARK_LOCAL_DIRS": str(tmp_path / "spark-local"),
        **kafka_client_env(stream_user),
    }
    run = cli_available_now(env, cwd=tmp_path)
    assert run.returncode == 0, run.stderr[-3000:]
    assert read_delta(tmp_path / "lake" / "call_events").num_rows > 0
    assert password not in run.stdout + run.stderr
    for path in tmp_path.rglob("*"):
        if path.is_file():
            assert password.encode() not in path.read_bytes(), f"password found in {path}"


def test_a_secured_cluster_keeps_serving_its_roles_through_a_lost_node() -> None:
    """Three secured nodes (SSL between them and to the controller quorum): the ingest user
    writes with acks=all while a node is killed and comes back; the stream user reads all."""
    with LocalKafkaCluster(3, secured=True) as cluster:
        admin = cluster.client_config()
        ensure_topic(admin, "replicated", 2, replication_factor=3)
        cluster.grant(role_grants(["replicated"], "role-alerts"))
        producer = Producer({**cluster.client_config("ingest"), "acks": "all"})
        for i in range(300):
            producer.produce("replicated", str(i).encode(), str(i).encode())
            if i == 100:
                assert producer.flush(30) == 0
                cluster.kill(2)
            if i == 200:
                assert producer.flush(60) == 0
                cluster.restart(2)
        assert producer.flush(60) == 0
        ends = PartitionEnds(cluster.client_config("stream"), "test", 30)
        try:
            latest = ends.latest([("replicated", 0), ("replicated", 1)])
        finally:
            ends.close()
        assert sum(latest.values()) == 300
