"""End to end on real things: Kafka broker -> Spark stream -> Delta, read back without Spark."""

from __future__ import annotations

import dataclasses
import os
import subprocess
import sys
from collections import Counter
from datetime import UTC, datetime

import pytest
from flows import PAGE_VIEWS
from kafka_topics import read_records
from lake_readers import delta_version, duckdb_query, poison_kind
from live_stream import produce_and_stream, run_available_now

from tidelake.streaming.calls.call_events import CALL_EVENTS
from tidelake.streaming.kafka.admin import TopicMissingError, ensure_topic
from tidelake.streaming.stream.query import FlowStream


def test_call_events_exactly_once_with_quarantine_and_checkpoint_resume(
    spark, kafka_conf, topic_name, engine_settings
):
    flow = dataclasses.replace(CALL_EVENTS, topic=topic_name)
    ensure_topic(kafka_conf, topic_name, flow.topic_partitions)
    run = produce_and_stream(
        spark,
        flow,
        engine_settings,
        kafka_conf,
        count=3000,
        malformed_share=0.05,
        late_share=0.1,
        days=3,
        seed=7,
        collect_keys=True,
    )
    first, stream, table = run.report, run.stream, run.table
    assert len(first.by_date) >= 3 and first.malformed > 50 and first.late > 100

    keys = table.column("call_sid").to_pylist()
    assert len(keys) == first.good == len(set(keys))
    assert set(keys) == set(first.keys)
    by_date = Counter(d.isoformat() for d in table.column("date").to_pylist())
    assert dict(by_date) == first.by_date
    assert [t.date() for t in table.column("event_time").to_pylist()] == table.column(
        "date"
    ).to_pylist()
    assert set(table.column("call_state").to_pylist()) <= {"completed", "failed"}
    assert set(table.column("region").to_pylist()) <= {"us1", "us2", "de1"}
    assert table.column("kafka_topic").unique().to_pylist() == [topic_name]
    offsets = set(
        zip(
            table.column("kafka_partition").to_pylist(),
            table.column("kafka_offset").to_pylist(),
            strict=True,
        )
    )
    assert len(offsets) == first.good

    quarantine = run.quarantine
    assert quarantine.num_rows == first.malformed
    errors = Counter(poison_kind(e) for e in quarantine.column("error").to_pylist())
    assert dict(errors) == first.malformed_kinds
    # each quarantined row is its Kafka record, byte for byte, dated by its Kafka timestamp
    kafka = {(r.partition, r.offset): r for r in read_records(kafka_conf, topic_name)}
    for row in quarantine.to_pylist():
        record = kafka[(row["kafka_partition"], row["kafka_offset"])]
        assert (row["key"], row["value"]) == (record.key, record.value)
        assert row["kafka_timestamp"] == datetime.fromtimestamp(record.timestamp_ms / 1000, UTC)
        assert row["date"] == row["kafka_timestamp"].date()
    assert duckdb_query(
        f"select count(*), count(distinct call_sid) from delta_scan('{stream.table_uri}')"
    ) == [(first.good, first.good)]

    # a second run with no new data commits nothing
    versions = delta_version(stream.table_uri), delta_version(stream.quarantine_uri)
    run_available_now(spark, flow, engine_settings, kafka_conf)
    assert (delta_version(stream.table_uri), delta_version(stream.quarantine_uri)) == versions

    # new data is picked up from the checkpoint, old data is not read again
    run = produce_and_stream(
        spark,
        flow,
        engine_settings,
        kafka_conf,
        count=500,
        malformed_share=0.02,
        seed=8,
        collect_keys=True,
    )
    second = run.report
    keys = run.table.column("call_sid").to_pylist()
    assert len(keys) == first.good + second.good == len(set(keys))
    assert set(keys) == set(first.keys) | set(second.keys)
    assert run.quarantine.num_rows == first.malformed + second.malformed


def test_a_second_declared_flow_runs_without_engine_changes(
    spark, kafka_conf, topic_name, engine_settings
):
    flow = dataclasses.replace(PAGE_VIEWS, topic=topic_name)
    ensure_topic(kafka_conf, topic_name, flow.topic_partitions)
    run = produce_and_stream(
        spark,
        flow,
        engine_settings,
        kafka_conf,
        count=400,
        malformed_share=0.05,
        days=2,
        seed=3,
        collect_keys=True,
    )
    report, table = run.report, run.table
    assert table.schema.field("viewed_at_s").type.unit == "us"
    assert str(table.schema.field("load_ms").type) == "double"
    assert str(table.schema.field("bounced").type) == "bool"
    assert set(table.column("device").to_pylist()) == {"DESKTOP", "MOBILE"}
    assert sorted(table.column("view_id").to_pylist()) == sorted(report.keys)
    assert Counter(d.isoformat() for d in table.column("date").to_pylist()) == report.by_date
    assert run.quarantine.num_rows == report.malformed
    first = table.column("viewed_at_s")[0].as_py()
    assert first.tzinfo is not None and first.microsecond == 0  # epoch seconds, exactly


def test_cli_reports_an_unreachable_broker_before_starting_spark(closed_port, tmp_path):
    env = {**os.environ, "KAFKA_BOOTSTRAP_SERVERS": f"127.0.0.1:{closed_port}"}
    done = subprocess.run(
        [sys.executable, "-m", "tidelake.platform.cli", "stream", "call_events"],
        env=env,
        capture_output=True,
        text=True,
        timeout=60,
        cwd=tmp_path,
    )
    assert done.returncode == 2
    assert f"127.0.0.1:{closed_port}" in done.stderr and "unreachable" in done.stderr


def test_preflight_names_a_missing_topic(kafka_conf, topic_name, engine_settings):
    flow = dataclasses.replace(CALL_EVENTS, topic=topic_name)
    with pytest.raises(TopicMissingError, match=topic_name):
        FlowStream(flow, engine_settings, kafka_conf).preflight()
