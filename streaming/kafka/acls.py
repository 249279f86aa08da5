"""What each of tidelake's Kafka principals may do, as data: least privilege per role.

The secured local broker grants exactly these (platform/local/kafka_broker.py), and
docs/deployment.md lists them for a production cluster. Measured on the secured broker: Spark's
Kafka source (the stream, backfills, the detector) and the executors' time-index lookups need
READ and DESCRIBE on the topic and nothing else (the source assigns partitions and commits no
offsets, so it needs no group ACL).
"""

from __future__ import annotations

from collections.abc import Iterable
from dataclasses import dataclass

ROLES = ("ingest", "stream", "detector")


@dataclass(frozen=True)
class Grant:
    """Operations a principal may perform on one Kafka topic."""

    topic: str
    operations: tuple[str, ...]


def role_grants(topics: Iterable[str], alerts_topic: str) -> dict[str, list[Grant]]:
    """Each role's grants for the flows' topics: the ingest service writes them, a stream reads
    its own, the detector reads them and writes the alerts topic."""
    topics = list(topics)
    return {
        "ingest": [Grant(t, ("WRITE", "DESCRIBE")) for t in topics],
        "stream": [Grant(t, ("READ", "DESCRIBE")) for t in topics],
        "detector": [
            *(Grant(t, ("READ", "DESCRIBE")) for t in topics),
            Grant(alerts_topic, ("WRITE", "DESCRIBE")),
        ],
    }
