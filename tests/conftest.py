"""Shared fixtures: one real Apache Kafka broker per test session, fresh topics per test.

With KAFKA_BOOTSTRAP_SERVERS set (plus any KAFKA_* client settings) the tests run against that
cluster instead of starting the local broker.

Tests live in folders by kind, and the folder gives the marker: `unit/` (pure logic: no broker,
no Spark, no JVM, no database; `make unit`), `integration/` (a real broker, Spark, the ingest
service's JVM or PostgreSQL), `e2e/` (the whole platform: `tidelake dev`, Dagster, a browser).
Helpers shared by several folders live here, next to this file (on sys.path through it).

One local S3 server (SeaweedFS) runs per session too, started before the
shared SparkSession, whose s3a takes its endpoint and the JVM its credentials from the standard
AWS variables set here. Tests on S3 ask for `engine_settings` with the param "s3", or for
`storage_roots`, parametrized over both stores.
"""

from __future__ import annotations

import dataclasses
import json
import os
import re
import shutil
import signal
import socket
import tempfile
import uuid
from collections.abc import Callable, Iterator, Sequence
from contextlib import AbstractContextManager
from pathlib import Path
from typing import Any

import pytest
from local_postgres import LocalPostgres, local_postgres, postgres_bin

from tidelake.platform.local.kafka_broker import LocalKafkaBroker
from tidelake.platform.local.s3_server import LocalS3Server
from tidelake.streaming.kafka.acls import role_grants
from tidelake.streaming.kafka.admin import delete_topic
from tidelake.streaming.settings import kafka_client_config

KINDS = ("unit", "integration", "e2e")


def pytest_configure(config: pytest.Config) -> None:
    """A suite started as a background job (`make test &` in a script, nohup) inherits Ctrl-C
    ignored, and so would every command it starts, which then never sees the Ctrl-C that the
    stop tests send: such a run hung them for two minutes each. Ctrl-C is delivered again.

    The commands and runs the suite starts get SHORT_LIVED_JVMS unless TIDELAKE_SPARK_CONF
    is set already, and a TIDELAKE_HOME of the suite's own: never the developer's `.tidelake/`
    (the state of a `tidelake broker` they run there). Definitions plan no use case schemas
    unless a test asks."""
    if signal.getsignal(signal.SIGINT) == signal.SIG_IGN:
        signal.signal(signal.SIGINT, signal.default_int_handler)
    os.environ.setdefault("TIDELAKE_SPARK_CONF", json.dumps(SHORT_LIVED_JVMS))
    os.environ["TIDELAKE_HOME"] = tempfile.mkdtemp(prefix="tidelake-test-home-")
    # a code location's load plans its use cases' schemas in a Spark subprocess on a cold cache;
    # the tests of it turn it on (and `tidelake dev`'s, as users run it)
    os.environ.setdefault("TIDELAKE_PLAN_USE_CASE_SCHEMAS", "false")


def pytest_unconfigure(config: pytest.Config) -> None:
    shutil.rmtree(os.environ.get("TIDELAKE_HOME", ""), ignore_errors=True)


SHORT_LIVED_JVMS = {
    "spark.driver.extraJavaOptions": "-XX:TieredStopAtLevel=1",
    "spark.executor.extraJavaOptions": "-XX:TieredStopAtLevel=1",
}
"""Spark settings of the drivers the suite's commands and Dagster runs start, and of their
executors on a cluster: each lives for seconds to minutes, so the JIT's C1 tier alone (no C2
compiles) is cheaper; measured on 13 stream tests: 275 s -> 230 s of wall time, 427 s -> 324 s
of CPU. Production keeps both tiers."""


def pytest_collection_modifyitems(items: list[pytest.Item]) -> None:
    """Mark every test with the kind its folder names; an e2e test is an integration test too."""
    for item in items:
        kind = next((part for part in item.path.parts if part in KINDS), None)
        if kind is None:
            raise pytest.UsageError(
                f"{item.nodeid}: a test belongs in tests/unit, tests/integration or tests/e2e"
            )
        item.add_marker(kind)
        if kind == "e2e":
            item.add_marker("integration")


@pytest.fixture
def no_kafka_env(monkeypatch: pytest.MonkeyPatch, tmp_path: Path) -> Path:
    """No KAFKA_* settings, and an empty TIDELAKE_HOME: nothing to connect to."""
    for name in list(os.environ):
        if name.startswith("KAFKA_"):
            monkeypatch.delenv(name)
    home = tmp_path / "home"
    monkeypatch.setenv("TIDELAKE_HOME", str(home))
    return home


BROKER_STARTUP_S = 300.0
"""A broker starts in seconds; on a shared 2-core machine at a load average of 30-80 the default
60 s ran out before it answered, and the whole session failed."""


@pytest.fixture(scope="session")
def local_broker() -> Iterator[LocalKafkaBroker | None]:
    """The local Kafka broker of the tests; None with KAFKA_BOOTSTRAP_SERVERS set."""
    if os.environ.get("KAFKA_BOOTSTRAP_SERVERS", "").strip():
        yield None
        return
    with LocalKafkaBroker(startup_timeout_s=BROKER_STARTUP_S) as broker:
        yield broker


@pytest.fixture(scope="session")
def secured_local_broker() -> Iterator[LocalKafkaBroker]:
    """The session's secured broker (SASL_SSL, client certificates, ACLs), started by the first
    test that runs on it (kafka_topics.ON_BOTH_KAFKAS)."""
    with LocalKafkaBroker(secured=True, startup_timeout_s=BROKER_STARTUP_S) as broker:
        yield broker


@pytest.fixture(scope="session", params=["plaintext"])
def kafka_conf(request: pytest.FixtureRequest, local_broker: LocalKafkaBroker | None) -> Any:
    """librdkafka config of the cluster the tests use: the plaintext broker, or with the
    "secured" param the secured one as its admin (least privilege: test_secured_kafka.py)."""
    if request.param == "secured":
        return request.getfixturevalue("secured_local_broker").client_config()
    if local_broker is None:
        return kafka_client_config()
    return local_broker.client_config()


@pytest.fixture
def topic_name(request: pytest.FixtureRequest, kafka_conf: dict[str, Any]) -> Iterator[str]:
    """A topic name no other test uses; the topic is deleted afterwards if it was created."""
    test = re.sub(r"[^A-Za-z0-9._-]+", "-", request.node.name).strip("-")[:80]
    name = f"tidelake-test-{test}-{uuid.uuid4().hex[:8]}"
    yield name
    delete_topic(kafka_conf, name)


@pytest.fixture
def call_events_topic(kafka_conf: dict[str, Any]) -> Iterator[str]:
    """The real call_events topic, new and empty, for tests that drive the `tidelake` CLI."""
    from tidelake.streaming.calls.call_events import CALL_EVENTS
    from tidelake.streaming.kafka.admin import ensure_topic

    delete_topic(kafka_conf, CALL_EVENTS.topic)
    ensure_topic(kafka_conf, CALL_EVENTS.topic, CALL_EVENTS.topic_partitions)
    yield CALL_EVENTS.topic
    delete_topic(kafka_conf, CALL_EVENTS.topic)


@pytest.fixture
def flow(kafka_conf: dict[str, Any], topic_name: str) -> Any:
    """CALL_EVENTS on a fresh topic of its own."""
    from tidelake.streaming.calls.call_events import CALL_EVENTS
    from tidelake.streaming.kafka.admin import ensure_topic

    flow = dataclasses.replace(CALL_EVENTS, topic=topic_name)
    ensure_topic(kafka_conf, flow.topic, flow.topic_partitions)
    return flow


KafkaAs = Callable[..., dict[str, Any]]


@pytest.fixture
def kafka_as(request: pytest.FixtureRequest, kafka_conf: dict[str, Any]) -> KafkaAs:
    """`kafka_as(role, topics, alerts_topic=...)`: the client config a process of that role uses
    on the test's Kafka. On the secured broker, the role's own user, granted exactly its ACLs
    (streaming/kafka/acls.py) on those topics; on plaintext, the test's own config. The test
    itself (producing data, creating topics) stays admin through kafka_conf."""
    callspec = getattr(request.node, "callspec", None)
    secured = callspec is not None and callspec.params.get("kafka_conf") == "secured"

    def conf_of(
        role: str, topics: Sequence[str], alerts_topic: str = "tidelake-no-alerts"
    ) -> dict[str, Any]:
        if not secured:
            return kafka_conf
        broker: LocalKafkaBroker = request.getfixturevalue("secured_local_broker")
        broker.grant({role: role_grants(topics, alerts_topic)[role]})
        return broker.client_config(role)

    return conf_of


@pytest.fixture
def closed_port() -> int:
    """A port on 127.0.0.1 with nothing listening (bound, read, released)."""
    with socket.socket() as sock:
        sock.bind(("127.0.0.1", 0))
        return int(sock.getsockname()[1])


@pytest.fixture(scope="session")
def s3_server() -> Iterator[LocalS3Server]:
    """The session's S3 server; its AWS settings are in this process's environment (so in every
    child's) from here on: S3 URIs work in every client, local paths are not affected."""
    with LocalS3Server() as server, pytest.MonkeyPatch.context() as patch:
        for name, value in server.env().items():
            patch.setenv(name, value)
        yield server


@pytest.fixture(scope="session")
def schema_registry() -> Iterator[Any]:
    """The session's schema registry (Apicurio Registry, Confluent's API), started by the first
    test that asks for it."""
    from tidelake.platform.local.schema_registry import LocalSchemaRegistry

    with LocalSchemaRegistry() as registry:
        yield registry


@pytest.fixture(scope="session")
def postgres_server() -> Iterator[LocalPostgres]:
    """The session's PostgreSQL server (Debian's package), started by the first test that asks;
    each test takes a database of its own (LocalPostgres.new_database)."""
    if postgres_bin() is None:
        pytest.skip("needs Debian's postgresql package (.ci/run installs it)")
    with local_postgres() as server:
        yield server


@pytest.fixture(params=["sqlite", "postgres"])
def make_instance(
    request: pytest.FixtureRequest,
) -> Callable[[], AbstractContextManager[Any]]:
    """A fresh Dagster instance on SQLite (Dagster's default) or on PostgreSQL (a new database
    each time): what tidelake does with Dagster's storage must hold on both."""
    import dagster as dg

    if request.param == "sqlite":
        return dg.instance_for_test
    server: LocalPostgres = request.getfixturevalue("postgres_server")

    def on_postgres() -> AbstractContextManager[Any]:
        url = server.new_database()
        return dg.instance_for_test(overrides={"storage": {"postgres": {"postgres_url": url}}})

    return on_postgres


@pytest.fixture(scope="session")
def spark(s3_server: LocalS3Server) -> Iterator[Any]:
    """One local SparkSession for the whole run (Spark takes 5-10 s to start on 2 cores), built
    once the S3 server's settings are in the environment."""
    from tidelake.streaming.spark.session import build_spark_session
    from tidelake.streaming.stream.application import FAIR_SCHEDULING

    # FAIR as a flow's application has it (queries without a pool share the default one)
    conf = {"spark.sql.shuffle.partitions": "2", **FAIR_SCHEDULING}
    session = build_spark_session("local[2]", conf)
    yield session
    session.stop()


@pytest.fixture(params=["local"])
def storage_roots(request: pytest.FixtureRequest, tmp_path: Path) -> tuple[str, str]:
    """(lake, checkpoints) of a test: private folders, or with the param "s3" private prefixes
    on the session's S3 server."""
    if request.param == "s3":
        server: LocalS3Server = request.getfixturevalue("s3_server")
        prefix = f"{request.node.name[:40]}-{uuid.uuid4().hex[:8]}"
        prefix = re.sub(r"[^A-Za-z0-9_.-]", "-", prefix)
        return server.uri(prefix, "lake"), server.uri(prefix, "checkpoints")
    return str(tmp_path / "lake"), str(tmp_path / "checkpoints")


@pytest.fixture
def engine_settings(storage_roots: tuple[str, str]) -> Any:
    """Engine settings with a private lake and checkpoint root (see storage_roots)."""
    from tidelake.streaming.settings import EngineSettings

    lake, checkpoints = storage_roots
    return EngineSettings(lake=lake, checkpoints=checkpoints)
