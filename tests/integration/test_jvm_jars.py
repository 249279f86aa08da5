"""The jar cache: Spark's own Kafka source and Delta load in the engine's SparkSession."""

from __future__ import annotations

from pathlib import Path
from typing import Any

import pytest
from confluent_kafka import Producer
from lake_readers import read_delta

from tidelake.streaming.kafka.admin import ensure_topic, quiet_client_config


def test_spark_reads_kafka_with_its_own_source(
    spark: Any, kafka_conf: dict[str, Any], topic_name: str
) -> None:
    ensure_topic(kafka_conf, topic_name, 2)
    producer = Producer(quiet_client_config(kafka_conf))
    for n in range(10):
        producer.produce(topic_name, f"v{n}".encode(), f"k{n}".encode(), partition=n % 2)
    assert producer.flush(10) == 0
    rows = (
        spark.read.format("kafka")
        .option("kafka.bootstrap.servers", kafka_conf["bootstrap.servers"])
        .option("kafka.isolation.level", "read_committed")
        .option("subscribe", topic_name)
        .load()
        .selectExpr("CAST(value AS STRING) AS v", "partition")
        .collect()
    )
    assert sorted(r.v for r in rows) == sorted(f"v{n}" for n in range(10))
    assert {r.partition for r in rows} == {0, 1}


def test_spark_writes_and_reads_delta_with_delta_spark(spark: Any, tmp_path: Path) -> None:
    path = str(tmp_path / "table")
    spark.range(5).write.format("delta").save(path)
    assert spark.read.format("delta").load(path).count() == 5
    assert sorted(read_delta(path).column("id").to_pylist()) == [0, 1, 2, 3, 4]  # delta-rs


def test_the_log_store_refuses_a_second_commit_of_the_same_version(
    spark: Any, tmp_path: Path
) -> None:
    """AtomicLocalLogStore publishes a commit with a hard link: a second writer of the same
    version (another process, another JVM) gets FileAlreadyExistsException, which Delta treats as
    a concurrent commit, and the first commit stays as written."""
    from py4j.protocol import Py4JJavaError

    jvm = spark._jvm
    conf = spark._jsc.hadoopConfiguration()
    store = jvm.dev.tidelake.delta.AtomicLocalLogStore(conf)
    commit = tmp_path / "00000000000000000000.json"
    path = jvm.org.apache.hadoop.fs.Path(commit.as_uri())

    def lines(*values: str) -> Any:
        items = jvm.java.util.ArrayList()
        for value in values:
            items.add(value)
        return items.iterator()

    store.write(path, lines('{"commitInfo":{}}', '{"add":{}}'), False, conf)
    with pytest.raises(Py4JJavaError, match="FileAlreadyExistsException"):
        store.write(path, lines('{"commitInfo":{"other":1}}'), False, conf)
    assert commit.read_text() == '{"commitInfo":{}}\n{"add":{}}'
    assert [p.name for p in tmp_path.iterdir()] == [commit.name]  # no temporary file left
