"""The tidelake-kafka source against the real (embedded) broker and the shared SparkSession."""

from __future__ import annotations

import json
import time
import uuid
from collections.abc import Iterator
from dataclasses import dataclass
from datetime import UTC, datetime
from typing import Any

import pyarrow as pa
import pytest
from confluent_kafka import KafkaError, Producer
from kafka_topics import KEEP_FOREVER, set_retention
from lake_readers import read_delta
from pyspark.sql.types import (
    BinaryType,
    IntegerType,
    LongType,
    StringType,
    StructField,
    StructType,
    TimestampType,
)

from tidelake.streaming.kafka_admin import delete_topic, ensure_topic, quiet_client_config
from tidelake.streaming.kafka_offsets import EARLIEST, KafkaSourceError, PartitionEnds
from tidelake.streaming.kafka_source import (
    KafkaOptionError,
    KafkaSourceOptions,
    offsets_json,
)

pytestmark = pytest.mark.integration

PARTITIONS = 3
MESSAGES = 5000
BASE_MS = 1_717_243_200_000  # 2024-06-01T12:00:00Z

SPARK_KAFKA_SCHEMA = StructType(
    [
        StructField("key", BinaryType()),
        StructField("value", BinaryType()),
        StructField("topic", StringType()),
        StructField("partition", IntegerType()),
        StructField("offset", LongType()),
        StructField("timestamp", TimestampType()),
        StructField("timestampType", IntegerType()),
    ]
)


@dataclass(frozen=True)
class Produced:
    """A topic filled with known messages: message i went to partition i % 3 at offset i // 3."""

    topic: str
    count: int
    partitions: int

    def row(self, i: int) -> tuple[bytes, bytes, int, int, int]:
        """(key, value, partition, offset, timestamp ms) of message i."""
        return (
            f"key-{i}".encode(),
            f"value-{i}".encode(),
            i % self.partitions,
            i // self.partitions,
            BASE_MS + i,
        )

    def rows(self) -> set[tuple[bytes, bytes, int, int, int]]:
        return {self.row(i) for i in range(self.count)}

    def per_partition(self) -> dict[int, int]:
        return {p: len(range(p, self.count, self.partitions)) for p in range(self.partitions)}


def produce(kafka_conf: dict[str, Any], topic: str, count: int, partitions: int) -> Produced:
    failures: list[str] = []

    def on_delivery(err: KafkaError | None, _msg: Any) -> None:
        if err is not None:
            failures.append(str(err))

    producer = Producer(
        quiet_client_config({**kafka_conf, "enable.idempotence": True, "linger.ms": 5})
    )
    for i in range(count):
        producer.produce(
            topic,
            key=f"key-{i}".encode(),
            value=f"value-{i}".encode(),
            partition=i % partitions,
            timestamp=BASE_MS + i,
            on_delivery=on_delivery,
        )
        if i % 1000 == 999:
            producer.poll(0)
    assert producer.flush(30) == 0, "messages still in flight after 30s"
    assert not failures, failures[:3]
    return Produced(topic, count, partitions)


@pytest.fixture(scope="module")
def filled(kafka_conf: dict[str, Any]) -> Iterator[Produced]:
    """One 3-partition topic with 5,000 known messages, shared by the read-only tests here."""
    topic = f"tidelake-test-source-{uuid.uuid4().hex[:8]}"
    ensure_topic(kafka_conf, topic, PARTITIONS)
    set_retention(kafka_conf, topic, KEEP_FOREVER)  # stamped 2024: past the 7-day default
    yield produce(kafka_conf, topic, MESSAGES, PARTITIONS)
    delete_topic(kafka_conf, topic)


def source_options(kafka_conf: dict[str, Any], topic: str, **extra: str) -> dict[str, str]:
    options = {f"kafka.{k}": str(v) for k, v in kafka_conf.items()}
    options["subscribe"] = topic
    options.update(extra)
    return options


def batch_read(spark, kafka_conf: dict[str, Any], topic: str, **extra: str):
    return spark.read.format("tidelake-kafka").options(**source_options(kafka_conf, topic, **extra))


def as_rows(table: pa.Table) -> set[tuple[bytes, bytes, int, int, int]]:
    stamps = table.column("timestamp").cast(pa.int64()).to_pylist()
    return {
        (k, v, p, o, us // 1000)
        for k, v, p, o, us in zip(
            table.column("key").to_pylist(),
            table.column("value").to_pylist(),
            table.column("partition").to_pylist(),
            table.column("offset").to_pylist(),
            stamps,
            strict=True,
        )
    }


# ------------------------------------------------------------------------------ batch reads


def test_batch_read_returns_exactly_the_produced_messages(spark, kafka_conf, filled):
    df = batch_read(spark, kafka_conf, filled.topic).load()
    assert df.schema == SPARK_KAFKA_SCHEMA
    table = df.toArrow()
    assert table.num_rows == MESSAGES
    assert set(table.column("topic").to_pylist()) == {filled.topic}
    assert as_rows(table) == filled.rows()  # every message once: keys, values, offsets, times
    first = df.where("partition = 0 and offset = 0").collect()[0]
    assert first.timestamp.replace(tzinfo=UTC) == datetime(2024, 6, 1, 12, tzinfo=UTC)
    assert first.key == b"key-0" and first.value == b"value-0"


def test_batch_read_split_into_many_tasks_reads_each_message_once(spark, kafka_conf, filled):
    df = batch_read(
        spark, kafka_conf, filled.topic, minPartitions="8", **{"tidelake.packBelowRows": "0"}
    ).load()
    assert df.rdd.getNumPartitions() >= PARTITIONS
    table = df.select("key", "value", "partition", "offset", "timestamp").toArrow()
    assert table.num_rows == MESSAGES
    assert as_rows(table) == filled.rows()


def test_timestamp_type_uses_sparks_ids(spark, kafka_conf, filled):
    df = batch_read(spark, kafka_conf, filled.topic).load()
    types = {r.timestampType for r in df.select("timestampType").distinct().collect()}
    assert types == {0}  # CreateTime, as spark-sql-kafka reports it


def test_batch_read_of_an_offset_slice(spark, kafka_conf, filled):
    start = {filled.topic: {"0": 10, "1": EARLIEST, "2": 1000}}
    end = {filled.topic: {"0": 20, "1": 5, "2": -1}}  # -1: the partition's end
    df = batch_read(
        spark,
        kafka_conf,
        filled.topic,
        startingOffsets=json.dumps(start),
        endingOffsets=json.dumps(end),
    ).load()
    got = as_rows(df.toArrow())
    per_partition = filled.per_partition()
    want = {
        r
        for r in filled.rows()
        if (r[2] == 0 and 10 <= r[3] < 20)
        or (r[2] == 1 and r[3] < 5)
        or (r[2] == 2 and 1000 <= r[3] < per_partition[2])
    }
    assert len(want) == 10 + 5 + (per_partition[2] - 1000)
    assert got == want


def test_offsets_json_helper_feeds_the_options(spark, kafka_conf, filled):
    start = {(filled.topic, p): 100 for p in range(PARTITIONS)}
    end = {(filled.topic, p): 103 for p in range(PARTITIONS)}
    df = batch_read(
        spark,
        kafka_conf,
        filled.topic,
        startingOffsets=offsets_json(start),
        endingOffsets=offsets_json(end),
    ).load()
    assert sorted((r.partition, r.offset) for r in df.select("partition", "offset").collect()) == [
        (p, o) for p in range(PARTITIONS) for o in (100, 101, 102)
    ]


def test_a_json_slice_must_name_every_partition(spark, kafka_conf, filled):
    with pytest.raises(Exception, match="leaves out partitions"):
        batch_read(
            spark, kafka_conf, filled.topic, startingOffsets=json.dumps({filled.topic: {"0": 1}})
        ).load().count()


def test_ending_offsets_json_never_silently_drops_a_subscribed_topic(
    spark, kafka_conf, filled, topic_name
):
    ensure_topic(kafka_conf, topic_name, 1)
    produce(kafka_conf, topic_name, 20, 1)
    end = json.dumps({filled.topic: {str(p): 2 for p in range(PARTITIONS)}})
    df = batch_read(spark, kafka_conf, f"{filled.topic},{topic_name}", endingOffsets=end).load()
    try:
        by_topic = dict(df.groupBy("topic").count().collect())
    except Exception as exc:  # refusing the JSON, as Spark does, is fine too
        assert "leaves out" in str(exc) or topic_name in str(exc)
        return
    assert by_topic == {filled.topic: 2 * PARTITIONS, topic_name: 20}


def test_an_empty_topic_has_ends_at_zero(kafka_conf, topic_name):
    ensure_topic(kafka_conf, topic_name, 2)
    ends = PartitionEnds(kafka_conf, "tidelake-test", 15)
    try:
        tps = ends.partitions([topic_name])
        assert ends.earliest(tps) == {(topic_name, 0): 0, (topic_name, 1): 0}
        assert ends.latest(tps) == {(topic_name, 0): 0, (topic_name, 1): 0}
    finally:
        ends.close()


def test_a_batch_read_of_nothing_returns_no_rows(spark, kafka_conf, filled):
    at = json.dumps({filled.topic: {str(p): 7 for p in range(PARTITIONS)}})
    df = batch_read(spark, kafka_conf, filled.topic, startingOffsets=at, endingOffsets=at).load()
    assert df.count() == 0


# ----------------------------------------------------------------------------- exact ends


def test_partition_ends_are_exact(kafka_conf, filled):
    ends = PartitionEnds(kafka_conf, "tidelake-test", 15)
    try:
        tps = ends.partitions([filled.topic])
        assert tps == [(filled.topic, p) for p in range(PARTITIONS)]
        assert ends.earliest(tps) == dict.fromkeys(tps, 0)
        expected = {(filled.topic, p): n for p, n in filled.per_partition().items()}
        latest = ends.latest(tps)
        assert latest == expected
        assert sum(latest.values()) == MESSAGES
    finally:
        ends.close()


def test_partition_ends_follow_new_data(kafka_conf, topic_name):
    ensure_topic(kafka_conf, topic_name, 2)
    ends = PartitionEnds(kafka_conf, "tidelake-test", 15)
    try:
        produce(kafka_conf, topic_name, 1001, 2)
        tps = ends.partitions([topic_name])
        assert ends.latest(tps) == {(topic_name, 0): 501, (topic_name, 1): 500}
        produce(kafka_conf, topic_name, 10, 2)
        assert sum(ends.latest(tps).values()) == 1011
    finally:
        ends.close()


def test_missing_topic_is_named(kafka_conf, topic_name):
    ends = PartitionEnds(kafka_conf, "tidelake-test", 10)
    try:
        with pytest.raises(KafkaSourceError, match=f"topic '{topic_name}' does not exist"):
            ends.partitions([topic_name])
    finally:
        ends.close()


def test_missing_topic_is_named_through_spark(spark, kafka_conf, topic_name):
    with pytest.raises(Exception, match=f"KafkaSourceError.*{topic_name}") as e:
        batch_read(spark, kafka_conf, topic_name).load().count()
    assert "does not exist" in str(e.value)


# ------------------------------------------------------------------------------- streaming


def test_stream_respects_max_offsets_per_trigger_and_ends_with_available_now(
    spark, kafka_conf, filled, tmp_path
):
    stream = (
        spark.readStream.format("tidelake-kafka")
        .options(
            **source_options(
                kafka_conf, filled.topic, startingOffsets="earliest", maxOffsetsPerTrigger="2000"
            )
        )
        .load()
    )
    query = (
        stream.writeStream.format("tidelake-delta")
        .option("path", str(tmp_path / "raw"))
        .option("checkpointLocation", str(tmp_path / "checkpoint"))
        .trigger(availableNow=True)
        .start()
    )
    assert query.awaitTermination(120), "AvailableNow did not end within 120s"
    assert query.exception() is None
    sizes = [p["numInputRows"] for p in query.recentProgress if p["numInputRows"]]
    assert sizes == [2000, 2000, 1000]
    table = read_delta(tmp_path / "raw")
    assert table.num_rows == MESSAGES
    assert as_rows(table) == filled.rows()
    offset_log = (tmp_path / "checkpoint" / "offsets").iterdir()
    offsets = sorted((p for p in offset_log if p.name.isdigit()), key=lambda p: int(p.name))
    last = json.loads(offsets[-1].read_text().splitlines()[-1])
    assert last == {filled.topic: {str(p): n for p, n in filled.per_partition().items()}}


def test_stream_error_reaches_the_user(spark, kafka_conf, filled):
    with pytest.raises(Exception, match=r"endingOffsets.*batch queries only"):
        reader = spark.readStream.format("tidelake-kafka").options(
            **source_options(kafka_conf, filled.topic, endingOffsets="latest")
        )
        query = reader.load().writeStream.format("noop").start()
        try:
            query.awaitTermination(60)
            if query.exception() is not None:
                raise RuntimeError(str(query.exception()))
        finally:
            query.stop()


# ---------------------------------------------------------------------------- option errors

BASE = {"kafka.bootstrap.servers": "127.0.0.1:9", "subscribe": "events"}


def parse(streaming: bool = False, drop: tuple[str, ...] = (), **options: str):
    given = {k: v for k, v in {**BASE, **options}.items() if k not in drop}
    return KafkaSourceOptions.parse(given, streaming=streaming)


@pytest.mark.parametrize(
    ("kwargs", "message"),
    [
        ({"drop": ("kafka.bootstrap.servers",)}, "option 'kafka.bootstrap.servers' is required"),
        ({"drop": ("subscribe",)}, "option 'subscribe' is required"),
        ({"subscribe": " , "}, "option 'subscribe' is required"),
        ({"startingOffset": "earliest"}, "unknown option 'startingoffset'"),
        ({"maxOffsetsPerTrigger": "abc"}, "'maxoffsetspertrigger' must be an integer, got 'abc'"),
        ({"maxOffsetsPerTrigger": "0"}, "'maxoffsetspertrigger' must be >= 1"),
        ({"minPartitions": "-2"}, "'minpartitions' must be >= 1"),
        ({"failOnDataLoss": "maybe"}, "'failondataloss' must be true or false, got 'maybe'"),
        ({"kafka.group.id": "mine"}, "option 'kafka.group.id' is not allowed"),
        ({"kafka.enable.auto.commit": "true"}, "option 'kafka.enable.auto.commit' is not allowed"),
        ({"streaming": True, "endingOffsets": "latest"}, "'endingOffsets' is for batch queries"),
        ({"startingOffsets": '{"events": {0: 1}'}, "option 'startingoffsets' must be earliest"),
        ({"startingOffsets": "newest"}, "option 'startingoffsets' must be earliest"),
        ({"endingOffsets": '{"other": {"0": 1}}'}, "'endingoffsets' names topics not subscribed"),
        ({"subscribePattern": "ev.*"}, "option 'subscribepattern' is not supported"),
        ({"startingTimestamp": "1000"}, "option 'startingtimestamp' is not supported"),
        ({"tidelake.decoder": "{not json"}, "option 'tidelake.decoder' is not a decoder spec"),
        ({"tidelake.decoder": '{"a": 1}'}, "option 'tidelake.decoder' is not a decoder spec"),
    ],
    ids=lambda v: v if isinstance(v, str) else None,
)
def test_option_errors_name_the_option(kwargs, message):
    with pytest.raises(KafkaOptionError) as e:
        parse(**kwargs)
    assert message.lower() in str(e.value).lower()


def test_options_parse_with_spark_defaults():
    batch = parse(**{"KAFKA.security.protocol": "PLAINTEXT", "subscribe": "a, b"})
    assert batch.topics == ("a", "b")
    assert batch.kafka_conf == {
        "bootstrap.servers": "127.0.0.1:9",
        "security.protocol": "PLAINTEXT",
    }
    assert (batch.starting, batch.ending) == ("earliest", "latest")
    assert batch.max_offsets_per_trigger is None and batch.fail_on_data_loss is True
    stream = parse(streaming=True, startingOffsets=" EARLIEST ", maxOffsetsPerTrigger="500")
    assert stream.starting == "earliest" and stream.max_offsets_per_trigger == 500
    assert parse(streaming=True).starting == "latest"
    sliced = parse(startingOffsets='{"events": {"0": 5, "1": -2}}')
    assert sliced.starting == {("events", 0): 5, ("events", 1): -2}


@pytest.mark.parametrize(
    ("drop", "extra", "message"),
    [
        (("kafka.bootstrap.servers",), {}, "kafka.bootstrap.servers"),
        ((), {"startingOffset": "earliest"}, "unknown option 'startingoffset'"),
        ((), {"failOnDataLoss": "maybe"}, "failondataloss"),
    ],
)
def test_option_errors_reach_the_spark_user(spark, drop, extra, message):
    options = {k: v for k, v in {**BASE, **extra}.items() if k not in drop}
    started = time.monotonic()
    with pytest.raises(Exception, match=message):
        spark.read.format("tidelake-kafka").options(**options).load()
    assert time.monotonic() - started < 30  # fails fast, before any broker round trip
