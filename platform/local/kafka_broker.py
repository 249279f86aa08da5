"""A local Apache Kafka broker (KRaft, combined broker and controller) for local runs and tests.

The broker is real Kafka, started with `java -cp <jar cache>/kafka-broker/* kafka.Kafka` from the
Maven artifacts the install step fetched (jvm/pom.xml, streaming/spark/jars.py): no tarball, no
download at run time. Each broker binds two free ports of 127.0.0.1 (clients, controller), gets
a bounded heap and its own data folder: a private temporary one that goes with stop(), or a
kept one (`tidelake broker` and `tidelake dev` keep theirs under $TIDELAKE_HOME/kafka, so the
topics survive a restart just as the lake and the checkpoints do; `tidelake dev --secured-kafka`
keeps a secured one under $TIDELAKE_HOME/kafka-secured, whose users' passwords stay in its
tls/users.json, 0600, while its certificates are made anew at each start).

Its settings are in kafka_settings.py, its security in kafka_security.py; its life cycle (one
process group, one folder, one log, stopped at exit) is every local server's (server_process.py).
"""

from __future__ import annotations

import subprocess
from pathlib import Path
from typing import ClassVar

from tidelake.platform.local.kafka_security import (
    SCRAM_MECHANISM,
    BrokerCredentials,
    certificate_client_config,
    grant_acls,
    kept_users,
    make_credentials,
    record_users,
    sasl_client_config,
)
from tidelake.platform.local.kafka_settings import (
    DEFAULT_HEAP_MB,
    KafkaNode,
    java_command,
    new_cluster_id,
    server_properties,
    single_node,
    write_settings,
)
from tidelake.platform.local.ports import LOOPBACK, accepts_connections, free_ports
from tidelake.platform.local.server_process import LocalServerProcess
from tidelake.streaming.errors import TidelakeError
from tidelake.streaming.kafka.acls import Grant
from tidelake.streaming.spark.jars import JarsMissingError, broker_classpath, java_executable

_LOG_TAIL_BYTES = 4000
_PORT_ATTEMPTS = 3


class BrokerError(TidelakeError, RuntimeError):
    """The local broker could not be found, started or kept running."""


class _PortTaken(BrokerError):
    """Another process took a free port between our probe and the broker's bind."""


class _NotAnswering(Exception):
    """The broker does not answer metadata yet."""


class LocalKafkaBroker(LocalServerProcess):
    """One Apache Kafka node in KRaft mode on free ports of 127.0.0.1 (a cluster's node: the
    ports its KafkaNode gives).

    Use as a context manager, or call start() and stop(). Each instance has its own ports, data
    folder and log, so several can run side by side.
    """

    temp_prefix: ClassVar[str] = "tidelake-kafka-"
    log_name: ClassVar[str] = "broker.log"

    def __init__(
        self,
        *,
        data_dir: Path | None = None,
        heap_mb: int = DEFAULT_HEAP_MB,
        startup_timeout_s: float = 60.0,
        stop_grace_s: float = 20.0,
        java: str | None = None,
        node: KafkaNode | None = None,
        secured: bool = False,
    ) -> None:
        super().__init__(
            data_dir=data_dir, startup_timeout_s=startup_timeout_s, stop_grace_s=stop_grace_s
        )
        self._java = java
        self._node = node
        self._secured = secured or (node is not None and node.credentials is not None)
        self._credentials: BrokerCredentials | None = node.credentials if node else None
        self._ssl_port: int | None = node.ssl_port if node else None
        self._heap_mb = heap_mb
        self._port: int | None = None
        self._cluster_id: str | None = None

    @property
    def bootstrap_servers(self) -> str:
        """The address clients connect to, "127.0.0.1:PORT"."""
        if self.pid is None or self._port is None:
            raise BrokerError("the local broker is not running; call start() first")
        return f"{LOOPBACK}:{self._port}"

    @property
    def credentials(self) -> BrokerCredentials | None:
        """A secured broker's CA, users and client certificate (None when not secured)."""
        return self._credentials

    def client_config(self, user: str = "admin") -> dict[str, str]:
        """librdkafka settings of a client of this broker: plaintext, or for a secured broker
        SASL_SSL as `user` (SCRAM-SHA-512), trusting the broker's CA."""
        return sasl_client_config(self.bootstrap_servers, self._credentials, user)

    def grant(self, grants: dict[str, list[Grant]]) -> None:
        """Give each user its topic ACLs (streaming/kafka/acls.py), as the admin."""
        grant_acls(self.client_config(), grants)

    def certificate_client_config(self) -> dict[str, str]:
        """A secured broker's SSL listener, as the client its CA signed (mutual TLS)."""
        if self._credentials is None or self._ssl_port is None:
            raise BrokerError("the local broker is not secured: it has no SSL listener")
        return certificate_client_config(self._credentials, self._ssl_port)

    @property
    def cluster_id(self) -> str | None:
        return self._cluster_id

    @property
    def node(self) -> KafkaNode | None:
        return self._node

    @property
    def node_id(self) -> int:
        return self._node.node_id if self._node is not None else 1

    def start(self) -> None:
        """Format the data folder if new, start Kafka, and return once it answers metadata; a
        port another process took between probe and bind means new ports (a broker alone)."""
        for attempt in range(1, _PORT_ATTEMPTS + 1):
            try:
                super().start()
                return
            except _PortTaken:
                if attempt == _PORT_ATTEMPTS or self._node is not None:
                    raise

    def launch(self) -> None:
        """Format the data folder if new and start the Kafka process, without waiting for it:
        a node of a cluster answers only once a majority of its quorum runs, so a cluster
        launches every node before it waits for any."""
        if self.is_alive():
            raise BrokerError(f"the local broker is already running at {self.bootstrap_servers}")
        try:
            classpath = broker_classpath()
        except JarsMissingError as exc:
            raise BrokerError(str(exc)) from None
        java = self._java or java_executable()
        folder = self._folder()
        # taken together, so that none repeats another; the SSL port a restart keeps is not
        # one of them
        port, controller_port, ssl_port = [p for p in free_ports(4) if p != self._ssl_port][:3]
        if self._secured:
            # kept across restarts: a formatted data folder holds these users' SCRAM secrets
            self._ssl_port = self._ssl_port or ssl_port
            if self._credentials is None:
                kept = self._kept_dir is not None
                self._credentials = make_credentials(
                    folder / "tls", kept_users(folder) if kept else None
                )
                if kept:  # before formatting: its SCRAM secrets are these
                    record_users(folder, self._credentials.users)
        node = self._node or single_node(port, controller_port, self._ssl_port)
        self._port = node.port
        properties = write_settings(
            folder, server_properties(node, folder / "data", self._credentials)
        )
        self._cluster_id = self._format(java, classpath, properties)
        server = self._java_command(java, classpath, "kafka.Kafka", server=True)
        self._spawn([*server, str(properties)])

    def _java_command(
        self, java: str, classpath: str, main: str, *, server: bool = False
    ) -> list[str]:
        return java_command(java, classpath, main, self._folder(), self._heap_mb, server=server)

    def _format(self, java: str, classpath: str, properties: Path) -> str:
        """The data folder's cluster id; formats the folder first if it has none."""
        folder = self._folder()
        meta = folder / "data" / "meta.properties"
        if meta.exists():
            for line in meta.read_text().splitlines():
                if line.startswith("cluster.id="):
                    return line.split("=", 1)[1].strip()
            raise BrokerError(f"{meta} has no cluster.id; delete {folder} to start afresh")
        cluster_id = self._node.cluster_id if self._node is not None else new_cluster_id()
        command = self._java_command(java, classpath, "kafka.tools.StorageTool")
        # "=" keeps an id that starts with "-" (1 in 64 of them) from reading as an option
        command += ["format", f"--cluster-id={cluster_id}", "-c", str(properties)]
        for user, password in (self._credentials.users if self._credentials else {}).items():
            command += ["--add-scram", f"{SCRAM_MECHANISM}=[name={user},password={password}]"]
        result = subprocess.run(  # in a session of its own: a terminal's Ctrl-C is ours to handle
            command,
            capture_output=True,
            text=True,
            cwd=folder,
            check=False,
            start_new_session=True,
        )
        if result.returncode != 0:  # its stdout lists SCRAM credentials: stderr only
            raise BrokerError(
                f"formatting the Kafka data folder {folder} failed:\n"
                f"{result.stderr.strip()[-_LOG_TAIL_BYTES:]}"
            )
        return cluster_id

    def wait_until_ready(self) -> None:
        """Wait for a TCP accept, then for metadata naming our cluster id (not a port squatter)."""
        port = self._port
        assert port is not None

        def answers() -> None:
            if not (accepts_connections(port) and self._answers_metadata(2.0)):
                raise _NotAnswering("no metadata yet")

        def error(message: str) -> BrokerError:
            taken = "Address already in use" in self.log_tail()
            return (_PortTaken if taken else BrokerError)(message)

        self._wait_answering(
            answers,
            what="the local Kafka broker",
            where=f"{LOOPBACK}:{port}",
            interval_s=0.05,
            not_yet=(_NotAnswering,),
            error=error,
        )

    def _answers_metadata(self, timeout_s: float) -> bool:
        from confluent_kafka import KafkaException
        from confluent_kafka.admin import AdminClient

        from tidelake.streaming.kafka.admin import quiet_client_config

        admin = AdminClient(quiet_client_config(self.client_config()))
        try:
            metadata = admin.list_topics(timeout=timeout_s)
        except KafkaException:
            return False
        if metadata.cluster_id != self._cluster_id:
            raise _PortTaken(
                f"port {self._port} on {LOOPBACK} is answered by another Kafka cluster "
                f"({metadata.cluster_id!r}), not the local broker"
            )
        return bool(metadata.brokers)

    def _cleanup(self) -> None:
        """A stopped broker has no port; a private folder's certificates went with it."""
        self._port = None
        if self._kept_dir is None and self._node is None:
            self._credentials, self._ssl_port = None, None

    def __repr__(self) -> str:
        state = f"at {LOOPBACK}:{self._port}" if self.is_alive() else "stopped"
        return f"<LocalKafkaBroker {state}>"
