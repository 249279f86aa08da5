"""A local Apache Kafka broker (KRaft, combined broker and controller) for local runs and tests.

The broker is real Kafka, started with `java -cp <jar cache>/kafka-broker/* kafka.Kafka` from the
Maven artifacts the install step fetched (jvm/pom.xml, streaming/spark/jars.py): no tarball, no
download at run time. Each broker binds two free ports of 127.0.0.1 (clients, controller), gets
a bounded heap and its own data folder: a private temporary one that goes with stop(), or a
kept one (`tidelake broker` and `tidelake dev` keep theirs under $TIDELAKE_HOME/kafka, so the
topics survive a restart just as the lake and the checkpoints do; `tidelake dev --secured-kafka`
keeps a secured one under $TIDELAKE_HOME/kafka-secured, whose users' passwords stay in its
tls/users.json, 0600, while its certificates are made anew at each start).

Only the Java process reads the settings: server.properties and a Log4j2 config are written into
the data folder at every start, so nothing on the machine can reconfigure it, and the ports may
change between starts of a kept folder.
"""

from __future__ import annotations

import atexit
import base64
import contextlib
import json
import os
import secrets
import shutil
import signal
import socket
import subprocess
import sys
import tempfile
import threading
import time
import uuid
import weakref
from collections.abc import Iterator
from dataclasses import dataclass
from pathlib import Path
from types import FrameType, TracebackType
from typing import Any

from tidelake.platform.local.process_group import signal_group, stop_group
from tidelake.streaming.errors import TidelakeError
from tidelake.streaming.kafka import broker_state as kafka_broker_state
from tidelake.streaming.kafka.acls import ROLES, Grant
from tidelake.streaming.kafka.broker_state import running_broker, write_broker_state
from tidelake.streaming.polling import poll_until
from tidelake.streaming.settings import host_settings
from tidelake.streaming.spark.jars import JarsMissingError, broker_classpath, java_executable

_HOST = "127.0.0.1"
_LOG_NAME = "broker.log"
_USERS_FILE = "users.json"
"""In a kept secured data folder's tls/ (0600): the SCRAM passwords it was formatted with."""
_LOG_TAIL_BYTES = 4000
_PORT_ATTEMPTS = 3
_NODE_ID = 1
DEFAULT_HEAP_MB = 512
SCRAM_MECHANISM = "SCRAM-SHA-512"
ADMIN_USER = "admin"
ROLE_USERS = ROLES
"""The SCRAM users a secured broker creates besides its admin: one per role (issue 31)."""
_BROKER_PRINCIPAL = "127.0.0.1"
"""The CN of the broker's own certificate, its principal between broker and controller."""

_live_brokers: weakref.WeakSet[LocalKafkaBroker] = weakref.WeakSet()


class BrokerError(TidelakeError, RuntimeError):
    """The local broker could not be found, started or kept running."""


class _PortTaken(BrokerError):
    """Another process took a free port between our probe and the broker's bind."""


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


class LocalKafkaBroker:
    """One Apache Kafka node in KRaft mode on free ports of 127.0.0.1.

    Use as a context manager, or call start() and stop(). Each instance has its own ports, data
    folder and log, so several can run side by side.
    """

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
        self._java = java
        self._node = node
        self._secured = secured or (node is not None and node.credentials is not None)
        self._credentials: BrokerCredentials | None = node.credentials if node else None
        self._ssl_port: int | None = None
        self._kept_dir = data_dir
        self._heap_mb = heap_mb
        self._startup_timeout_s = startup_timeout_s
        self._stop_grace_s = stop_grace_s
        self._process: subprocess.Popen[bytes] | None = None
        self._workdir: Path | None = None
        self._port: int | None = None
        self._cluster_id: str | None = None
        self.startup_s: float | None = None
        """Seconds from start() to the first answered metadata request (format included)."""

    @property
    def bootstrap_servers(self) -> str:
        """The address clients connect to, "127.0.0.1:PORT"."""
        if self._process is None or self._port is None:
            raise BrokerError("the local broker is not running; call start() first")
        return f"{_HOST}:{self._port}"

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
        return {
            "bootstrap.servers": f"{_HOST}:{self._ssl_port}",
            "security.protocol": "SSL",
            "ssl.ca.location": str(self._credentials.ca),
            "ssl.certificate.location": str(self._credentials.client_cert),
            "ssl.key.location": str(self._credentials.client_key),
        }

    @property
    def pid(self) -> int | None:
        """Process id of the running broker JVM (also its process group id), or None."""
        return self._process.pid if self._process is not None else None

    @property
    def workdir(self) -> Path | None:
        """The data folder (settings, log, Kafka's log.dirs), or None when stopped."""
        return self._workdir

    @property
    def log_path(self) -> Path | None:
        """The broker's log (Log4j2 and the JVM's own output), or None when stopped."""
        return self._workdir / _LOG_NAME if self._workdir is not None else None

    @property
    def cluster_id(self) -> str | None:
        return self._cluster_id

    def is_alive(self) -> bool:
        """True while the broker process runs (it can die on its own, e.g. killed by OOM)."""
        return self._process is not None and self._process.poll() is None

    @property
    def node(self) -> KafkaNode | None:
        return self._node

    @property
    def node_id(self) -> int:
        return self._node.node_id if self._node is not None else _NODE_ID

    def start(self) -> None:
        """Format the data folder if new, start Kafka, and return once it answers metadata."""
        started = time.monotonic()
        try:
            for attempt in range(1, _PORT_ATTEMPTS + 1):
                self.launch()
                try:
                    self.wait_until_ready()
                    break
                except _PortTaken:
                    self._kill_process()
                    if attempt == _PORT_ATTEMPTS or self._node is not None:
                        raise
        except BaseException:
            self.stop()
            raise
        self.startup_s = time.monotonic() - started

    def launch(self) -> None:
        """Format the data folder if new and start the Kafka process, without waiting for it:
        a node of a cluster answers only once a majority of its quorum runs, so a cluster
        launches every node before it waits for any."""
        if self._process is not None:
            raise BrokerError(f"the local broker is already running at {self.bootstrap_servers}")
        try:
            classpath = broker_classpath()
        except JarsMissingError as exc:
            raise BrokerError(str(exc)) from None
        java = self._java or java_executable()
        if self._kept_dir is not None:
            self._workdir = self._kept_dir.resolve()
            self._workdir.mkdir(parents=True, exist_ok=True)
        elif self._workdir is None:
            self._workdir = Path(tempfile.mkdtemp(prefix="tidelake-kafka-"))
        if self._node is not None:
            self._port, controller_port = self._node.port, self._node.controller_port
        else:
            self._port, controller_port = free_port(), free_port()
        if self._secured:
            # kept across restarts: a formatted data folder holds these users' SCRAM secrets
            if self._ssl_port is None:
                self._ssl_port = self._node.ssl_port if self._node else None
                self._ssl_port = self._ssl_port or free_port()
            if self._credentials is None:
                self._credentials = make_credentials(self._workdir / "tls", self._kept_users())
                if self._kept_dir is not None:  # before formatting: its SCRAM secrets are these
                    _write_private(self._workdir / "tls" / _USERS_FILE, self._credentials.users)
        properties = self._write_settings(self._port, controller_port)
        self._cluster_id = self._format(java, classpath, properties)
        self._process = self._spawn(java, classpath, properties)
        _live_brokers.add(self)

    def _kept_users(self) -> dict[str, str] | None:
        """The SCRAM passwords of a kept, already formatted secured data folder (its formatted
        metadata holds their secrets), from the 0600 file written when it was formatted; None
        for a new or private folder, which gets new passwords."""
        assert self._workdir is not None
        if self._kept_dir is None or not (self._workdir / "data" / "meta.properties").exists():
            return None
        users_file = self._workdir / "tls" / _USERS_FILE
        try:
            users: dict[str, str] = json.loads(users_file.read_text())
        except (OSError, ValueError):
            raise BrokerError(
                f"{users_file} (the passwords of the users {self._workdir} was formatted with) is "
                f"missing or unreadable; delete {self._workdir} to start afresh"
            ) from None
        if set(users) != {ADMIN_USER, *ROLE_USERS}:
            raise BrokerError(
                f"{self._workdir} was formatted with the users {sorted(users)}, not "
                f"{sorted([ADMIN_USER, *ROLE_USERS])}; delete it to start afresh"
            )
        return users

    def kill(self) -> None:
        """SIGKILL the broker (a crash: no clean shutdown), keeping its data folder, so that
        launch() brings the same node back."""
        process, self._process = self._process, None
        if process is not None:
            signal_group(process.pid, signal.SIGKILL)
            process.wait()

    def stop(self) -> None:
        """Stop the broker (SIGTERM: Kafka's clean shutdown; SIGKILL after the grace period) and
        remove a private data folder; safe to call twice."""
        self._kill_process()
        if self._workdir is not None and self._kept_dir is None:
            shutil.rmtree(self._workdir, ignore_errors=True)
        self._workdir = None
        self._port = None
        _live_brokers.discard(self)

    def __enter__(self) -> LocalKafkaBroker:
        self.start()
        return self

    def __exit__(
        self,
        exc_type: type[BaseException] | None,
        exc: BaseException | None,
        tb: TracebackType | None,
    ) -> None:
        self.stop()

    def __repr__(self) -> str:
        state = f"at {_HOST}:{self._port}" if self.is_alive() else "stopped"
        return f"<LocalKafkaBroker {state}>"

    def _write_settings(self, port: int, controller_port: int) -> Path:
        assert self._workdir is not None
        data = self._workdir / "data"
        node = self._node
        replicas = node.replicas if node is not None else 1
        min_insync = node.min_insync if node is not None else 1
        settings = {
            "process.roles": "broker,controller",
            "node.id": self.node_id,
            "controller.quorum.voters": (
                node.voters if node is not None else f"{_NODE_ID}@{_HOST}:{controller_port}"
            ),
            "listeners": f"PLAINTEXT://{_HOST}:{port},CONTROLLER://{_HOST}:{controller_port}",
            "advertised.listeners": f"PLAINTEXT://{_HOST}:{port}",
            "controller.listener.names": "CONTROLLER",
            "inter.broker.listener.name": "PLAINTEXT",
            "listener.security.protocol.map": "PLAINTEXT:PLAINTEXT,CONTROLLER:PLAINTEXT",
            **(self._security_settings(port, controller_port) if self._credentials else {}),
            "log.dirs": str(data),
            # one replica per partition alone, three in a cluster (KafkaNode); few partitions of
            # the internal topics start faster
            "default.replication.factor": replicas,
            "min.insync.replicas": min_insync,
            "offsets.topic.replication.factor": replicas,
            "offsets.topic.num.partitions": 4,
            "transaction.state.log.replication.factor": replicas,
            "transaction.state.log.min.isr": min_insync,
            "transaction.state.log.num.partitions": 4,
            "share.coordinator.state.topic.replication.factor": replicas,
            "share.coordinator.state.topic.min.isr": min_insync,
            "group.initial.rebalance.delay.ms": 0,
            # retention acts within a second (Kafka's default looks every 5 minutes)
            "log.retention.check.interval.ms": 1000,
            "num.partitions": 1,
        }
        properties = self._workdir / "server.properties"
        properties.write_text("".join(f"{k}={v}\n" for k, v in settings.items()))
        log4j = self._workdir / "log4j2.properties"
        log4j.write_text(
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
        return properties

    def _security_settings(self, port: int, controller_port: int) -> dict[str, str]:
        """SASL_SSL (SCRAM-SHA-512) for clients, SSL with client certificates for clients and
        between the node's broker and controller, and Kafka's StandardAuthorizer: only the
        admin user and the broker itself are super users, everyone else needs ACLs."""
        assert self._credentials is not None and self._ssl_port is not None
        tls = self._credentials
        return {
            "listeners": f"SASL_SSL://{_HOST}:{port},SSL://{_HOST}:{self._ssl_port},"
            f"CONTROLLER://{_HOST}:{controller_port}",
            "advertised.listeners": f"SASL_SSL://{_HOST}:{port},SSL://{_HOST}:{self._ssl_port}",
            "inter.broker.listener.name": "SSL",
            "listener.security.protocol.map": "SASL_SSL:SASL_SSL,SSL:SSL,CONTROLLER:SSL",
            "sasl.enabled.mechanisms": SCRAM_MECHANISM,
            "listener.name.sasl_ssl.scram-sha-512.sasl.jaas.config": (
                "org.apache.kafka.common.security.scram.ScramLoginModule required;"
            ),
            "ssl.keystore.type": "PEM",
            "ssl.keystore.location": str(tls.broker_keystore),
            "ssl.truststore.type": "PEM",
            "ssl.truststore.location": str(tls.ca),
            "ssl.client.auth": "required",
            "listener.name.sasl_ssl.ssl.client.auth": "none",
            "ssl.principal.mapping.rules": "RULE:^CN=([^,]+)$/$1/,DEFAULT",
            "authorizer.class.name": "org.apache.kafka.metadata.authorizer.StandardAuthorizer",
            "super.users": f"User:{ADMIN_USER};User:{_BROKER_PRINCIPAL}",
        }

    def _java_command(self, java: str, classpath: str, main: str) -> list[str]:
        assert self._workdir is not None
        return [
            java,
            f"-Xmx{self._heap_mb}m",
            "-Xss1m",
            "-XX:+UseG1GC",
            "-XX:MaxGCPauseMillis=20",
            "-Djava.awt.headless=true",
            f"-Dlog4j2.configurationFile={self._workdir / 'log4j2.properties'}",
            f"-Dkafka.logs.dir={self._workdir}",
            "-cp",
            classpath,
            main,
        ]

    def _format(self, java: str, classpath: str, properties: Path) -> str:
        """The data folder's cluster id; formats the folder first if it has none."""
        assert self._workdir is not None
        meta = self._workdir / "data" / "meta.properties"
        if meta.exists():
            for line in meta.read_text().splitlines():
                if line.startswith("cluster.id="):
                    return line.split("=", 1)[1].strip()
            raise BrokerError(f"{meta} has no cluster.id; delete {self._workdir} to start afresh")
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
            cwd=self._workdir,
            check=False,
            start_new_session=True,
        )
        if result.returncode != 0:  # its stdout lists SCRAM credentials: stderr only
            raise BrokerError(
                f"formatting the Kafka data folder {self._workdir} failed:\n"
                f"{result.stderr.strip()[-_LOG_TAIL_BYTES:]}"
            )
        return cluster_id

    def _spawn(self, java: str, classpath: str, properties: Path) -> subprocess.Popen[bytes]:
        assert self._workdir is not None
        with open(self._workdir / _LOG_NAME, "ab") as log:
            return subprocess.Popen(
                [*self._java_command(java, classpath, "kafka.Kafka"), str(properties)],
                cwd=self._workdir,
                stdin=subprocess.DEVNULL,
                stdout=log,
                stderr=subprocess.STDOUT,
                start_new_session=True,  # own process group: a terminal's Ctrl-C is ours to handle
            )

    def wait_until_ready(self) -> None:
        """Wait for a TCP accept, then for metadata naming our cluster id (not a port squatter)."""
        process, port = self._process, self._port
        assert process is not None and port is not None

        def answers() -> bool | None:
            if process.poll() is not None:
                tail = self.log_tail()
                error = _PortTaken if "Address already in use" in tail else BrokerError
                raise error(
                    f"the local Kafka broker exited with code {process.returncode} during "
                    f"start-up on port {port}; its log ends with:\n{tail}"
                )
            return True if _accepts_connections(port) and self._answers_metadata(2.0) else None

        poll_until(
            answers,
            timeout_s=self._startup_timeout_s,
            interval_s=0.05,
            timeout_error=lambda _: BrokerError(
                f"the local Kafka broker did not come up on port {port} within "
                f"{self._startup_timeout_s:g}s; its log ends with:\n{self.log_tail()}"
            ),
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
                f"port {self._port} on {_HOST} is answered by another Kafka cluster "
                f"({metadata.cluster_id!r}), not the local broker"
            )
        return bool(metadata.brokers)

    def _kill_process(self) -> None:
        process, self._process = self._process, None
        if process is not None:
            stop_group(process, self._stop_grace_s)

    def log_tail(self) -> str:
        """The end of the broker's log, for error messages."""
        log_path = self.log_path
        if log_path is None or not log_path.exists():
            return "(no log)"
        with open(log_path, "rb") as log:
            log.seek(max(0, log_path.stat().st_size - _LOG_TAIL_BYTES))
            tail = log.read().decode("utf-8", errors="replace").strip()
        return tail or "(empty log)"


@dataclass(frozen=True)
class BrokerCredentials:
    """What a secured local broker's clients need: its CA, the SCRAM users' passwords, and a
    client certificate the CA signed."""

    ca: Path
    broker_keystore: Path
    client_cert: Path
    client_key: Path
    users: dict[str, str]


def grant_acls(admin_conf: dict[str, str], grants: dict[str, list[Grant]]) -> None:
    """Create the users' topic ACLs, and return once every broker of admin_conf's cluster
    enforces them (a cluster's nodes learn ACLs from the metadata log, each in its own time)."""
    from confluent_kafka.admin import (
        AclBinding,
        AclBindingFilter,
        AclOperation,
        AclPermissionType,
        AdminClient,
        ResourcePatternType,
        ResourceType,
    )

    bindings = [
        AclBinding(
            ResourceType.TOPIC,
            grant.topic,
            ResourcePatternType.LITERAL,
            f"User:{user}",
            "*",
            AclOperation[operation],
            AclPermissionType.ALLOW,
        )
        for user, user_grants in grants.items()
        for grant in user_grants
        for operation in grant.operations
    ]
    admin = AdminClient(dict[str, Any](admin_conf))  # kept: a destroyed client fails its futures
    for future in admin.create_acls(bindings).values():
        future.result(timeout=30)
    anything: Any = None  # matches any name, principal and host (the stubs say str)
    every = AclBindingFilter(
        ResourceType.ANY,
        anything,
        ResourcePatternType.ANY,
        anything,
        anything,
        AclOperation.ANY,
        AclPermissionType.ANY,
    )
    for node in admin_conf["bootstrap.servers"].split(","):
        one = AdminClient(dict[str, Any](admin_conf | {"bootstrap.servers": node}))
        _wait_for_acls(one, node, set(bindings), every)


def _wait_for_acls(admin: Any, node: str, bindings: set[Any], every: Any) -> None:
    """Until the node lists every binding (a broker applies ACLs asynchronously)."""
    poll_until(
        lambda: True if bindings <= set(admin.describe_acls(every).result(timeout=30)) else None,
        timeout_s=30,
        interval_s=0.1,
        timeout_error=lambda _: BrokerError(
            f"the broker at {node} did not take the ACLs within 30 s"
        ),
    )


def sasl_client_config(
    bootstrap: str, credentials: BrokerCredentials | None, user: str = ADMIN_USER
) -> dict[str, str]:
    """librdkafka settings of a client of bootstrap: plaintext without credentials, else
    SASL_SSL as `user` (SCRAM-SHA-512), trusting the brokers' CA."""
    conf = {"bootstrap.servers": bootstrap}
    if credentials is None:
        return conf
    return conf | {
        "security.protocol": "SASL_SSL",
        "sasl.mechanism": SCRAM_MECHANISM,
        "sasl.username": user,
        "sasl.password": credentials.users[user],
        "ssl.ca.location": str(credentials.ca),
    }


def make_credentials(folder: Path, users: dict[str, str] | None = None) -> BrokerCredentials:
    """A CA and certificates made for this start, and a password per user (0600 files): new
    ones, or `users` (a kept data folder's)."""
    from tidelake.platform.local.certificates import make_certificates

    folder.mkdir(parents=True, exist_ok=True)
    folder.chmod(0o700)
    made = make_certificates(folder)
    keystore = folder / "broker.pem"
    keystore.touch(mode=0o600)
    keystore.write_bytes(made.server_key.read_bytes() + made.server_cert.read_bytes())
    client_cert, client_key = folder / "client.pem", folder / "client.key"
    client_cert.write_bytes(made.client_cert)
    client_key.touch(mode=0o600)
    client_key.write_bytes(made.client_key)
    users = users or {name: secrets.token_urlsafe(18) for name in (ADMIN_USER, *ROLE_USERS)}
    return BrokerCredentials(made.client_ca, keystore, client_cert, client_key, users)


def _write_private(path: Path, users: dict[str, str]) -> None:
    fd = os.open(path, os.O_WRONLY | os.O_CREAT | os.O_TRUNC, 0o600)
    with os.fdopen(fd, "w") as file:
        json.dump(users, file)


def kept_data_dir() -> Path:
    """Data folder of the broker that `tidelake broker` and `tidelake dev` run."""
    return tidelake_home() / "kafka"


@contextlib.contextmanager
def recorded_broker(state_file: Path, data_dir: Path | None = None) -> Iterator[LocalKafkaBroker]:
    """A started broker whose address is in state_file while it runs (removed on exit)."""
    with LocalKafkaBroker(data_dir=data_dir) as broker:
        assert broker.pid is not None and broker.log_path is not None
        write_broker_state(state_file, broker.bootstrap_servers, broker.pid, broker.log_path)
        try:
            yield broker
        finally:
            with contextlib.suppress(FileNotFoundError):
                state_file.unlink()


def run_foreground(state_file: Path, data_dir: Path) -> int:
    """Run a broker until SIGINT/SIGTERM, for `tidelake broker`.

    Prints `KAFKA_BOOTSTRAP_SERVERS=...` on stdout and records the address in state_file, so
    other `tidelake` commands on this machine find the broker without configuration.
    """
    existing = running_broker(state_file)
    if existing is not None:
        raise BrokerError(
            f"a local broker is already running at {existing} (recorded in {state_file}); "
            "stop it first, or use it"
        )
    stop_requested = threading.Event()

    def request_stop(signum: int, frame: FrameType | None) -> None:
        stop_requested.set()

    previous = {sig: signal.signal(sig, request_stop) for sig in (signal.SIGINT, signal.SIGTERM)}
    try:
        with recorded_broker(state_file, data_dir) as broker:
            print(f"KAFKA_BOOTSTRAP_SERVERS={broker.bootstrap_servers}", flush=True)
            print(
                f"Local Apache Kafka broker ready in {broker.startup_s:.1f}s; data in {data_dir}, "
                f"log in {broker.log_path}. Ctrl-C to stop.",
                file=sys.stderr,
                flush=True,
            )
            while not stop_requested.wait(0.2):
                if not broker.is_alive():
                    raise BrokerError(
                        "the local broker exited unexpectedly; its log ends with:\n"
                        f"{broker.log_tail()}"
                    )
            print("Local Kafka broker: stopping", file=sys.stderr, flush=True)
    finally:
        for sig, handler in previous.items():
            signal.signal(sig, handler)
    return 0


def tidelake_home() -> Path:
    """Folder for local state: $TIDELAKE_HOME, default .tidelake under the current directory."""
    return host_settings().home


def broker_state_file() -> Path:
    """Where `tidelake broker` and `tidelake dev` record the broker they run."""
    return kafka_broker_state.broker_state_file(tidelake_home())


def free_port() -> int:
    """A port on loopback that nothing listens on (bound, read, released)."""
    with socket.socket(socket.AF_INET, socket.SOCK_STREAM) as sock:
        sock.bind((_HOST, 0))
        return int(sock.getsockname()[1])


def _accepts_connections(port: int) -> bool:
    try:
        with socket.create_connection((_HOST, port), timeout=0.5):
            return True
    except OSError:
        return False


@atexit.register
def _stop_live_brokers() -> None:
    """Do not leave brokers behind when the interpreter exits without stopping them."""
    for broker in list(_live_brokers):
        broker.stop()
