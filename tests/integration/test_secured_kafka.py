"""Kafka secured as production runs it: the local broker with SASL_SSL (SCRAM-SHA-512), an SSL
listener that requires client certificates, and Kafka's StandardAuthorizer; a refused client is
one line naming what to check (issue 31, first part)."""

from __future__ import annotations

import os
from collections.abc import Iterator
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import pytest
from confluent_kafka import Consumer, KafkaError, Producer, TopicPartition
from lake_readers import delta_version, read_delta
from live_stream import cli_available_now

from tidelake.platform.dev.produce import produce_demo_events
from tidelake.platform.local.certificates import make_certificates
from tidelake.platform.local.kafka_broker import LocalKafkaBroker
from tidelake.platform.local.kafka_cluster import LocalKafkaCluster
from tidelake.streaming.calls.call_events import CALL_EVENTS
from tidelake.streaming.kafka.acls import role_grants
from tidelake.streaming.kafka.admin import (
    KafkaAuthorizationError,
    check_reachable,
    delete_topic,
    ensure_topic,
    require_topic,
    topic_partition_count,
)
from tidelake.streaming.kafka.offsets import PartitionEnds
from tidelake.streaming.polling import poll_until
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

    def topic_refused() -> bool | None:
        """The group's refusal may come first: the ingest user has none either."""
        message = consumer.poll(1)
        if message is not None and message.error() is not None:
            codes.add(message.error().code())
        return True if KafkaError.TOPIC_AUTHORIZATION_FAILED in codes else None

    try:
        poll_until(
            topic_refused,
            timeout_s=20,
            interval_s=0,
            timeout_error=lambda _: AssertionError(f"no TOPIC_AUTHORIZATION_FAILED, only {codes}"),
        )
    finally:
        consumer.close()


@dataclass(frozen=True)
class LandedStream:
    """call_events landed once as the stream's user: its folders, settings and table version."""

    root: Path
    env: dict[str, str]
    version: int
    rows: int

    @property
    def table(self) -> Path:
        return self.root / "lake" / "call_events"


@pytest.fixture(scope="module")
def landed(secured_broker: LocalKafkaBroker, tmp_path_factory: pytest.TempPathFactory) -> Any:
    root = tmp_path_factory.mktemp("landed")
    admin = secured_broker.client_config()
    ensure_topic(admin, CALL_EVENTS.topic, CALL_EVENTS.topic_partitions)
    produce_demo_events(CALL_EVENTS, admin, count=200, progress=False, seed=5)
    secured_broker.grant(role_grants([CALL_EVENTS.topic], "call-anomalies"))
    env = {
        **{k: v for k, v in os.environ.items() if not k.startswith("KAFKA_")},
        "TIDELAKE_LAKE": str(root / "lake"),
        "TIDELAKE_CHECKPOINTS": str(root / "checkpoints"),
        "TIDELAKE_HOME": str(root / "home"),
    }
    run = cli_available_now(env | kafka_client_env(secured_broker.client_config("stream")), root)
    assert run.returncode == 0, run.stderr[-3000:]
    table = read_delta(root / "lake" / "call_events")
    return LandedStream(
        root, env, delta_version(str(root / "lake" / "call_events")), table.num_rows
    )


def _wrong_password(broker: LocalKafkaBroker, _: Path) -> tuple[dict[str, str], str]:
    conf = broker.client_config("stream") | {"sasl.password": "not-it"}
    start = f"Kafka at bootstrap.servers={conf['bootstrap.servers']} refused user 'stream' "
    return conf, start + "(SCRAM-SHA-512): "


def _no_client_certificate(broker: LocalKafkaBroker, _: Path) -> tuple[dict[str, str], str]:
    conf = broker.certificate_client_config()
    del conf["ssl.certificate.location"], conf["ssl.key.location"]
    return conf, "the broker may have refused the client's certificate"


def _a_foreign_ca(broker: LocalKafkaBroker, folder: Path) -> tuple[dict[str, str], str]:
    foreign_ca = make_certificates(folder).client_ca
    conf = broker.client_config("stream") | {"ssl.ca.location": str(foreign_ca)}
    return conf, "check that KAFKA_SSL_CA_LOCATION holds the CA that signed"


def _no_read_acl(broker: LocalKafkaBroker, _: Path) -> tuple[dict[str, str], str]:
    conf = broker.client_config("ingest")  # may write the topic, not read it
    return conf, (
        f"Kafka at bootstrap.servers={conf['bootstrap.servers']} does not let 'ingest' READ "
        f"topic '{CALL_EVENTS.topic}' (it may: DESCRIBE, WRITE): grant it READ and DESCRIBE on "
        "it (docs/deployment.md)"
    )


@pytest.mark.parametrize(
    "refusal", [_wrong_password, _no_client_certificate, _a_foreign_ca, _no_read_acl]
)
def test_a_refused_stream_fails_in_one_line_and_leaves_the_table_as_it_was(
    secured_broker: LocalKafkaBroker, landed: LandedStream, refusal: Any, tmp_path: Path
) -> None:
    """Each of Kafka's refusals, met before anything starts: exit 2, one `Error:` line that says
    what to check (never "unreachable"), no secret in it, and the table one commit as it was."""
    produce_demo_events(CALL_EVENTS, secured_broker.client_config(), count=20, progress=False)
    conf, expected = refusal(secured_broker, tmp_path)
    run = cli_available_now(landed.env | kafka_client_env(conf), landed.root)
    errors = [line for line in run.stderr.splitlines() if line.startswith("Error:")]
    assert run.returncode == 2, run.stderr[-3000:]
    assert len(errors) == 1 and expected in errors[0], run.stderr[-3000:]
    assert "unreachable" not in errors[0]
    assert "not-it" not in run.stdout + run.stderr
    assert delta_version(str(landed.table)) == landed.version
    assert read_delta(landed.table).num_rows == landed.rows


def test_the_stream_users_password_reaches_no_log_and_no_file_at_debug(
    secured_broker: LocalKafkaBroker, tmp_path: Path
) -> None:
    """`tidelake stream --available-now` as the stream's user at DEBUG: it lands every record
    (the malformed in quarantine) and exits 0, and its password is in no output and no file."""
    admin = secured_broker.client_config()
    delete_topic(admin, CALL_EVENTS.topic)  # the module's earlier tests left records on it
    ensure_topic(admin, CALL_EVENTS.topic, CALL_EVENTS.topic_partitions)
    report = produce_demo_events(
        CALL_EVENTS, admin, count=300, malformed_share=0.05, progress=False, seed=6
    )
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
    assert run.returncode == 0, run.stderr[-3000:]  # `--available-now` exits 0 when done
    assert read_delta(tmp_path / "lake" / "call_events").num_rows == report.good
    assert read_delta(tmp_path / "lake" / "call_events_quarantine").num_rows == report.malformed
    assert password not in run.stdout + run.stderr
    for path in tmp_path.rglob("*"):
        if path.is_file():
            assert password.encode() not in path.read_bytes(), f"password found in {path}"


@pytest.mark.cluster
@pytest.mark.faults
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
