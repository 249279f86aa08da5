"""What a local Kafka node runs with: its place in a cluster, server.properties, Log4j2 and the
JVM's command line. Only the Java process reads them: they are written into the node's folder
at every start, so nothing on the machine can reconfigure it, and the ports may change between
starts of a kept folder."""

from __future__ import annotations

import base64
import uuid
from dataclasses import dataclass
from pathlib import Path

from tidelake.platform.local.kafka_security import BrokerCredentials, secured_listener_settings
from tidelake.platform.local.ports import LOOPBACK

SINGLE_NODE_ID = 1
DEFAULT_HEAP_MB = 512

LOG4J_PROPERTIES = (
    "status = warn\n"
    "appender.out.type = Console\n"
    "appender.out.name = out\n"
    "appender.out.layout.type = PatternLayout\n"
    "appender.out.layout.pattern = [%d] %p %m (%c)%n\n"
    "rootLogger.level = WARN\n"
    "rootLogger.appenderRef.out.ref = out\n"
    "logger.server.name = kafka.server.KafkaRaftServer\n"
    "logger.server.level = INFO\n"
)


@dataclass(frozen=True)
class KafkaNode:
    """One node's place in a multi-node cluster (kafka_cluster.LocalKafkaCluster): its id and
    fixed ports, the controller quorum they all vote in, and the replication the cluster gives
    topics. Fixed ports, because the quorum's voters are named by address."""

    node_id: int
    port: int
    controller_port: int
    voters: str
    """KRaft's controller.quorum.voters, "1@127.0.0.1:P1,2@127.0.0.1:P2,..."."""
    cluster_id: str
    replicas: int
    """default.replication.factor and that of Kafka's internal topics."""
    min_insync: int
    ssl_port: int | None = None
    """A secured cluster's SSL listener of this node."""
    credentials: BrokerCredentials | None = None
    """A secured cluster's CA, certificates and users, the same on every node."""


def new_cluster_id() -> str:
    """A cluster id as Kafka writes them: 16 random bytes, URL-safe base64 without padding."""
    return base64.urlsafe_b64encode(uuid.uuid4().bytes).decode().rstrip("=")


def single_node(port: int, controller_port: int, ssl_port: int | None) -> KafkaNode:
    """A broker alone: its own quorum, one replica of everything."""
    voters = f"{SINGLE_NODE_ID}@{LOOPBACK}:{controller_port}"
    return KafkaNode(SINGLE_NODE_ID, port, controller_port, voters, "", 1, 1, ssl_port)


def server_properties(
    node: KafkaNode, data: Path, credentials: BrokerCredentials | None
) -> dict[str, object]:
    """server.properties of a combined broker and controller; secured with credentials."""
    port, controller_port = node.port, node.controller_port
    settings: dict[str, object] = {
        "process.roles": "broker,controller",
        "node.id": node.node_id,
        "controller.quorum.voters": node.voters,
        "listeners": f"PLAINTEXT://{LOOPBACK}:{port},CONTROLLER://{LOOPBACK}:{controller_port}",
        "advertised.listeners": f"PLAINTEXT://{LOOPBACK}:{port}",
        "controller.listener.names": "CONTROLLER",
        "inter.broker.listener.name": "PLAINTEXT",
        "listener.security.protocol.map": "PLAINTEXT:PLAINTEXT,CONTROLLER:PLAINTEXT",
        "log.dirs": str(data),
        # one replica per partition alone, three in a cluster (KafkaNode); few partitions of
        # the internal topics start faster
        "default.replication.factor": node.replicas,
        "min.insync.replicas": node.min_insync,
        "offsets.topic.replication.factor": node.replicas,
        "offsets.topic.num.partitions": 4,
        "transaction.state.log.replication.factor": node.replicas,
        "transaction.state.log.min.isr": node.min_insync,
        "transaction.state.log.num.partitions": 4,
        "share.coordinator.state.topic.replication.factor": node.replicas,
        "share.coordinator.state.topic.min.isr": node.min_insync,
        "group.initial.rebalance.delay.ms": 0,
        # retention acts within a second (Kafka's default looks every 5 minutes)
        "log.retention.check.interval.ms": 1000,
        "num.partitions": 1,
    }
    if credentials is not None:
        assert node.ssl_port is not None
        settings |= secured_listener_settings(credentials, port, node.ssl_port, controller_port)
    return settings


def java_command(
    java: str, classpath: str, main: str, folder: Path, heap_mb: int, *, server: bool = False
) -> list[str]:
    """A Kafka JVM (the server or a tool) logging through the folder's Log4j2 settings.

    A server's heap is all taken and touched at its start (-Xms = -Xmx, as Kafka's own start
    script sets it): a process that runs for months holds a fixed heap, and what its memory
    still does over time is off the heap (a growing heap looked like a leak in the soak)."""
    fixed = [f"-Xms{heap_mb}m", "-XX:+AlwaysPreTouch"] if server else []
    return [
        java,
        f"-Xmx{heap_mb}m",
        *fixed,
        "-Xss1m",
        "-XX:+UseG1GC",
        "-XX:MaxGCPauseMillis=20",
        "-Djava.awt.headless=true",
        f"-Dlog4j2.configurationFile={folder / 'log4j2.properties'}",
        f"-Dkafka.logs.dir={folder}",
        "-cp",
        classpath,
        main,
    ]


def write_settings(folder: Path, properties: dict[str, object]) -> Path:
    """server.properties and log4j2.properties into folder; the path of the first."""
    path = folder / "server.properties"
    path.write_text("".join(f"{k}={v}\n" for k, v in properties.items()))
    (folder / "log4j2.properties").write_text(LOG4J_PROPERTIES)
    return path
