"""A Kafka cluster of several KRaft nodes on this machine, for the distributed tests and
`tidelake kafka-cluster`.

Each node is a LocalKafkaBroker (real Kafka from the jar cache) in combined broker and
controller mode, voting in one controller quorum; topics get `replicas` replicas (3 by default)
and min.insync.replicas 2, so a producer with acks=all goes on through the loss of any one node.
Clients reach it through KAFKA_BOOTSTRAP_SERVERS alone (every node's address, comma-separated).
"""

from __future__ import annotations

import shutil
import tempfile
import time
from concurrent.futures import ThreadPoolExecutor
from pathlib import Path
from types import TracebackType

from tidelake.platform.local.kafka_broker import BrokerError, LocalKafkaBroker
from tidelake.platform.local.kafka_security import grant_acls, make_credentials, sasl_client_config
from tidelake.platform.local.kafka_settings import KafkaNode, new_cluster_id
from tidelake.platform.local.ports import LOOPBACK, free_ports
from tidelake.streaming.kafka.acls import Grant


class LocalKafkaCluster:
    """`nodes` Kafka nodes on loopback; each node's data survives kill() and restart()."""

    def __init__(
        self,
        nodes: int = 3,
        *,
        min_insync: int = 2,
        heap_mb: int = 384,
        folder: Path | None = None,
        startup_timeout_s: float = 90.0,
        secured: bool = False,
    ) -> None:
        if nodes < 1 or not 1 <= min_insync <= nodes:
            raise BrokerError(
                f"a cluster of {nodes} nodes cannot have min.insync.replicas {min_insync}"
            )
        self._own_folder = folder is None
        self.folder = folder or Path(tempfile.mkdtemp(prefix="tidelake-kafka-cluster-"))
        taken = free_ports(3 * nodes)
        ports = [(taken[i], taken[i + 1], taken[i + 2]) for i in range(0, 3 * nodes, 3)]
        voters = ",".join(f"{n}@{LOOPBACK}:{p[1]}" for n, p in enumerate(ports, 1))
        cluster_id = new_cluster_id()
        # one CA, one broker certificate and one set of users for every node
        credentials = make_credentials(self.folder / "tls") if secured else None
        self._credentials = credentials
        self.brokers = [
            LocalKafkaBroker(
                data_dir=self.folder / f"node-{n}",
                heap_mb=heap_mb,
                startup_timeout_s=startup_timeout_s,
                node=KafkaNode(
                    n,
                    port,
                    controller,
                    voters,
                    cluster_id,
                    nodes,
                    min_insync,
                    ssl_port if secured else None,
                    credentials,
                ),
            )
            for n, (port, controller, ssl_port) in enumerate(ports, 1)
        ]
        self.startup_s: float | None = None

    @property
    def bootstrap_servers(self) -> str:
        """Every node's address: KAFKA_BOOTSTRAP_SERVERS for clients of the cluster."""
        return ",".join(f"{LOOPBACK}:{_node(broker).port}" for broker in self.brokers)

    def client_config(self, user: str = "admin") -> dict[str, str]:
        """librdkafka settings of a client of the cluster (every node's address); SASL_SSL as
        `user` for a secured cluster."""
        return sasl_client_config(self.bootstrap_servers, self._credentials, user)

    def grant(self, grants: dict[str, list[Grant]]) -> None:
        """Give each user its topic ACLs; returns once every node enforces them."""
        grant_acls(self.client_config(), grants)

    def broker(self, node_id: int) -> LocalKafkaBroker:
        return self.brokers[node_id - 1]

    def start(self) -> None:
        """Launch every node, then wait until each answers metadata."""
        started = time.monotonic()
        try:
            for broker in self.brokers:
                broker.launch()
            for broker in self.brokers:
                broker.wait_until_ready()
        except BaseException:
            self.stop()
            raise
        self.startup_s = time.monotonic() - started

    def kill(self, node_id: int) -> None:
        """SIGKILL one node, as a crashed machine would go."""
        self.broker(node_id).kill()

    def restart(self, node_id: int) -> None:
        """Bring a killed node back on its own data and ports; returns once it answers."""
        broker = self.broker(node_id)
        broker.launch()
        broker.wait_until_ready()

    def stop(self) -> None:
        """Stop every node at once: one by one, each node's controlled shutdown first moves its
        leaderships to the others (6 s for three nodes at once here)."""
        with ThreadPoolExecutor(len(self.brokers)) as pool:
            list(pool.map(LocalKafkaBroker.stop, self.brokers))
        if self._own_folder:
            shutil.rmtree(self.folder, ignore_errors=True)

    def __enter__(self) -> LocalKafkaCluster:
        self.start()
        return self

    def __exit__(
        self,
        exc_type: type[BaseException] | None,
        exc: BaseException | None,
        tb: TracebackType | None,
    ) -> None:
        self.stop()


def _node(broker: LocalKafkaBroker) -> KafkaNode:
    """A cluster's broker is always one of its nodes."""
    assert broker.node is not None
    return broker.node
