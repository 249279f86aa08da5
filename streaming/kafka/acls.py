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

ROLES = ("ingest", "stream", "detector", "dagster")

READS = ("READ", "DESCRIBE")
"""What reading a topic takes: Spark's Kafka source, the admin client's offsets and lag."""
WRITES = ("WRITE", "DESCRIBE")
"""What writing a topic takes: an idempotent producer needs no more since Kafka 3.0."""


@dataclass(frozen=True)
class Grant:
    """Operations a principal may perform on one Kafka topic."""

    topic: str
    operations: tuple[str, ...]


def role_grants(topics: Iterable[str], alerts_topic: str) -> dict[str, list[Grant]]:
    """Each role's grants for the flows' topics: the ingest service writes them, a stream reads
    its own, the detector reads them and writes the alerts topic.

    `dagster` is the principal of a code location that runs the streams and the detector in one
    process tree (`dg dev` under `tidelake dev --secured-kafka`: stream runs, the detector,
    backfills and the supervisor sensors' lag probes all start from it and share its
    environment, so they cannot each log in as their own user): the union of the stream's and
    the detector's grants, each (topic, operation) once, and nothing more (no CREATE: the topics
    are created by an admin beforehand). Where the stream and the detector run as processes of
    their own, give them `stream` and `detector` instead."""
    topics = list(dict.fromkeys(topics))
    grants = {
        "ingest": [Grant(t, WRITES) for t in topics],
        "stream": [Grant(t, READS) for t in topics],
        "detector": [*(Grant(t, READS) for t in topics), Grant(alerts_topic, WRITES)],
    }
    grants["dagster"] = _union(grants["stream"], grants["detector"])
    return grants


def _union(*grant_lists: list[Grant]) -> list[Grant]:
    """One Grant per topic (in first-seen order) with every operation any list gives it, once."""
    operations: dict[str, dict[str, None]] = {}
    for grant_list in grant_lists:
        for grant in grant_list:
            operations.setdefault(grant.topic, {}).update(dict.fromkeys(grant.operations))
    return [Grant(topic, tuple(ops)) for topic, ops in operations.items()]
