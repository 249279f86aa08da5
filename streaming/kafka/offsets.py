"""Kafka offsets seen from the driver: partition ends, Kafka's time index, offset JSON.

Ends are Kafka's ListOffsets answers under read_committed: the last stable offset, so a range
never reaches into a transaction that is still open. Time lookups find the first committed data
record stamped after a time: Kafka's own time index (ListOffsets by timestamp) says where to
start, exactly even when producers stamp records out of order (CreateTime), but it also counts
transaction markers (stamped with the coordinator's wall clock) and aborted records, so the
lookup reads on from there, under read_committed, to the first data record that qualifies. The
executors' half of the arrival rule does the same on the JVM (dev.tidelake.spark.KafkaTimeIndex).
"""

from __future__ import annotations

import json
import time
import uuid
from collections.abc import Iterable, Mapping

from confluent_kafka import Consumer, KafkaError, KafkaException, TopicPartition
from tenacity import Retrying, retry_if_exception, stop_after_delay, wait_exponential

from tidelake.streaming.errors import TidelakeError
from tidelake.streaming.kafka.admin import quiet_client_config

TopicPartitionKey = tuple[str, int]
Offsets = dict[TopicPartitionKey, int]

EARLIEST = -2
LATEST = -1


class KafkaSourceError(TidelakeError, RuntimeError):
    """The Kafka source cannot go on: a missing topic, lost data, an unreachable broker."""

    exit_code = 2


def to_json_offsets(offsets: Mapping[TopicPartitionKey, int]) -> dict[str, dict[str, int]]:
    """Spark's Kafka offset layout {"topic": {"0": 42}}, keys in a fixed order.

    Spark compares offsets as JSON strings, so an unstable key order would look like new data.
    """
    out: dict[str, dict[str, int]] = {}
    for topic, partition in sorted(offsets):
        out.setdefault(topic, {})[str(partition)] = int(offsets[(topic, partition)])
    return out


def from_json_offsets(doc: Mapping[str, Mapping[str, int]] | str) -> Offsets:
    parsed: Mapping[str, Mapping[str, int]] = json.loads(doc) if isinstance(doc, str) else doc
    return {(t, int(p)): int(o) for t, parts in parsed.items() for p, o in parts.items()}


def consumer_config(kafka_conf: Mapping[str, str], group_prefix: str) -> dict[str, object]:
    """librdkafka settings for reading offset ranges by assignment (never commits to Kafka).

    fetch.queue.backoff.ms and fetch.wait.max.ms default to 1000 and 500 ms; both stall a
    consumer that reads ranges (measured: 117 k -> 228 k events/s), so they are lowered here.
    User-supplied kafka.* options win.
    """
    conf: dict[str, object] = {
        "group.id": f"{group_prefix}-{uuid.uuid4().hex[:12]}",
        "enable.auto.commit": False,
        "enable.auto.offset.store": False,
        "enable.partition.eof": True,
        "auto.offset.reset": "error",
        "fetch.queue.backoff.ms": 10,
        "fetch.wait.max.ms": 10,
        "socket.connection.setup.timeout.ms": 10_000,
        "allow.auto.create.topics": False,
        # librdkafka's default too; said here because exactly-once depends on it: records of
        # aborted transactions are skipped and ends stop at the last stable offset
        "isolation.level": "read_committed",
    }
    conf.update(kafka_conf)
    return quiet_client_config(conf)


class PartitionEnds:
    """Driver-side view of topic partitions, their offsets and Kafka's time index."""

    def __init__(self, kafka_conf: Mapping[str, str], group_prefix: str, timeout_s: float):
        self._consumer = Consumer(consumer_config(kafka_conf, group_prefix))
        self._timeout_s = timeout_s
        self._servers = kafka_conf.get("bootstrap.servers", "?")

    def close(self) -> None:
        self._consumer.close()

    def partitions(self, topics: Iterable[str]) -> list[TopicPartitionKey]:
        """All partitions of the topics; fails clearly if the broker or a topic is missing."""
        found: list[TopicPartitionKey] = []
        for topic in topics:
            try:
                meta = self._consumer.list_topics(topic, timeout=self._timeout_s)
            except KafkaException as exc:
                raise KafkaSourceError(
                    f"cannot reach Kafka at {self._servers} within {self._timeout_s:.0f}s: {exc}"
                ) from exc
            info = meta.topics.get(topic)
            if info is None or info.error is not None or not info.partitions:
                reason = info.error if info is not None and info.error else "no partitions"
                raise KafkaSourceError(
                    f"topic {topic!r} does not exist on {self._servers} ({reason})"
                )
            found += [(topic, p) for p in sorted(info.partitions)]
        return found

    def earliest(self, tps: Iterable[TopicPartitionKey]) -> Offsets:
        """Log start offsets (what retention has kept)."""
        return list_offsets(self._consumer, tps, EARLIEST, self._timeout_s)

    def latest(self, tps: Iterable[TopicPartitionKey]) -> Offsets:
        """End offsets a read_committed reader can reach (the last stable offset)."""
        return list_offsets(self._consumer, tps, LATEST, self._timeout_s)

    def first_records_after(
        self,
        tps: Iterable[TopicPartitionKey],
        ts_ms: int,
        below: Mapping[TopicPartitionKey, int] | None = None,
    ) -> dict[TopicPartitionKey, int | None]:
        """Per partition, the offset of the first committed data record stamped after ts_ms and
        below `below` (default: the last stable offsets, asked before the time index); None
        where there is none. Markers and aborted records are passed over (module docstring)."""
        tps = list(tps)
        ends = dict(below) if below is not None else self.latest(tps)
        starts = list_offsets(self._consumer, tps, ts_ms + 1, self._timeout_s)
        found: dict[TopicPartitionKey, int | None] = dict.fromkeys(tps)
        pending = {tp: starts[tp] for tp in tps if 0 <= starts[tp] < ends[tp]}
        deadline = time.monotonic() + self._timeout_s
        assigned = bool(pending)
        if assigned:
            self._consumer.assign([TopicPartition(t, p, o) for (t, p), o in pending.items()])
        try:
            while pending and time.monotonic() < deadline:
                for msg in self._consumer.consume(num_messages=500, timeout=0.05):
                    tp = (msg.topic(), msg.partition())
                    if tp not in pending:
                        continue
                    err = msg.error()
                    if err is not None and err.code() == KafkaError._PARTITION_EOF:
                        del pending[tp]
                    elif err is not None:
                        raise KafkaSourceError(f"fetch from {tp[0]}/{tp[1]} failed: {err}")
                    elif int(msg.offset() or 0) >= ends[tp]:
                        del pending[tp]
                    elif msg.timestamp()[1] > ts_ms:
                        found[tp] = int(msg.offset() or 0)
                        del pending[tp]
        finally:
            if assigned:
                self._consumer.unassign()
        if pending:
            raise self._no_response(pending)
        return found

    def _no_response(self, pending: Mapping[TopicPartitionKey, int]) -> KafkaSourceError:
        return KafkaSourceError(
            f"no fetch response from {self._servers} within {self._timeout_s:.0f}s for "
            + ", ".join(f"{t}/{p}" for t, p in sorted(pending))
        )

    def records_at(self, wanted: Offsets) -> dict[TopicPartitionKey, tuple[int, int] | None]:
        """(offset, timestamp ms) of the first record at or after each wanted offset; None when
        there is none (the offset is at or past the end)."""
        found: dict[TopicPartitionKey, tuple[int, int] | None] = {}
        pending = dict(wanted)
        deadline = time.monotonic() + self._timeout_s
        self._consumer.assign([TopicPartition(t, p, o) for (t, p), o in pending.items()])
        try:
            while pending and time.monotonic() < deadline:
                for msg in self._consumer.consume(num_messages=len(pending), timeout=0.05):
                    tp = (msg.topic(), msg.partition())
                    if tp not in pending:
                        continue
                    err = msg.error()
                    if err is not None and err.code() == KafkaError._PARTITION_EOF:
                        found[tp] = None
                    elif err is not None:
                        raise KafkaSourceError(f"fetch from {tp[0]}/{tp[1]} failed: {err}")
                    else:
                        found[tp] = (int(msg.offset() or 0), msg.timestamp()[1])
                    del pending[tp]
        finally:
            self._consumer.unassign()
        if pending:
            raise self._no_response(pending)
        return found


def list_offsets(
    consumer: Consumer, tps: Iterable[TopicPartitionKey], spec: int, timeout_s: float
) -> Offsets:
    """One ListOffsets request for all partitions: EARLIEST, LATEST (under read_committed the last
    stable offset) or, for a time in ms, the first offset stamped at or after it (-1: none)."""
    wanted = [TopicPartition(t, p, spec) for t, p in tps]
    if not wanted:
        return {}

    def ask() -> list[TopicPartition]:
        found = consumer.offsets_for_times(wanted, timeout=timeout_s)
        for tp in found:
            if tp.error is not None:
                raise KafkaException(tp.error)
        return found

    # a partition whose leader is still being elected (a topic just created, a broker restarted)
    # answers NOT_LEADER, or an epoch the broker does not know yet, for a moment: ask again
    # until timeout_s
    retrying = Retrying(
        retry=retry_if_exception(_leader_moving),
        stop=stop_after_delay(timeout_s),
        wait=wait_exponential(multiplier=0.05, max=1.0),
        reraise=True,
    )
    try:
        found = retrying(ask)
    except KafkaException as exc:
        names = ", ".join(f"{tp.topic}/{tp.partition}" for tp in wanted)
        raise KafkaSourceError(f"Kafka did not answer ListOffsets for {names}: {exc}") from exc
    return {(tp.topic, tp.partition): tp.offset for tp in found}


_LEADER_MOVING = {
    KafkaError.NOT_LEADER_FOR_PARTITION,
    KafkaError.LEADER_NOT_AVAILABLE,
    KafkaError.UNKNOWN_LEADER_EPOCH,
    KafkaError.FENCED_LEADER_EPOCH,
}


def _leader_moving(exc: BaseException) -> bool:
    return isinstance(exc, KafkaException) and exc.args[0].code() in _LEADER_MOVING
