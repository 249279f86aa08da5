"""Backfills from Kafka by date: same rows as the stream, idempotent, safe beside the stream."""

from __future__ import annotations

import uuid
from collections import Counter
from datetime import UTC, date, datetime, timedelta
from typing import Any

import pyarrow as pa
import pyarrow.compute as pc
import pytest
from confluent_kafka import Producer
from kafka_topics import KEEP_FOREVER, ON_LOCAL_AND_SECURED_S3, read_records, set_retention
from lake_readers import delta_version, duckdb_query, read_delta
from live_stream import BackgroundProducer, produce_and_stream, running_stream, wait_for_rows

from tidelake.platform.dev.produce import produce_demo_events
from tidelake.streaming.batch.backfill import (
    BackfillError,
    plan_backfill,
    run_backfill,
)
from tidelake.streaming.kafka.admin import quiet_client_config
from tidelake.streaming.kafka.offsets import PartitionEnds
from tidelake.streaming.kafka.read import java_client_options
from tidelake.streaming.polling import poll_until
from tidelake.streaming.spark.extensions import tidelake_jvm

COMPARED = [
    "call_sid",
    "account_sid",
    "duration",
    "call_state",
    "region",
    "event_time",
    "date",
    "kafka_partition",
    "kafka_offset",
    "kafka_timestamp",
]


def day_rows(uri: str, day: str) -> pa.Table:
    """One date's rows in a stable order, without the ingest time (it differs by design)."""
    table = read_delta(uri).select(COMPARED)
    table = table.filter(pc.equal(table["date"], date.fromisoformat(day)))
    return table.sort_by([("kafka_partition", "ascending"), ("kafka_offset", "ascending")])


def test_both_time_lookups_find_the_first_committed_record_stamped_after_a_time(
    spark: Any, kafka_conf: dict[str, Any], flow: Any
) -> None:
    """The driver's lookup (PartitionEnds.first_records_after, Python) and the executors'
    (dev.tidelake.spark.KafkaTimeIndex, Java) against one partition of a real broker: timestamps
    out of order (CreateTime), an aborted transaction stamped after everything, a committed one,
    and their markers (stamped with the coordinator's clock). Both answer what a read_committed
    consumer reading in offset order sees: the first data record stamped after the time."""
    set_retention(kafka_conf, flow.topic, KEEP_FOREVER)  # stamped 1970
    conf = quiet_client_config(kafka_conf)
    plain = Producer(conf)
    for ts in (1_000, 5_000, 2_000, 9_000, 3_000, 7_000, 4_000):
        plain.produce(flow.topic, b"x", partition=0, timestamp=ts)
    assert plain.flush(10) == 0
    for stamps, commit in (((20_000, 20_000), False), ((6_000,), True)):
        transactional = Producer({**conf, "transactional.id": f"tx-{uuid.uuid4().hex}"})
        transactional.init_transactions(30)
        transactional.begin_transaction()
        for ts in stamps:
            transactional.produce(flow.topic, b"t", partition=0, timestamp=ts)
        (transactional.commit_transaction if commit else transactional.abort_transaction)(30)
    plain.produce(flow.topic, b"x", partition=0, timestamp=8_000)
    assert plain.flush(10) == 0
    committed = sorted((r.offset, r.timestamp_ms) for r in read_records(kafka_conf, flow.topic))
    assert [ts for _, ts in committed] == [
        1_000,
        5_000,
        2_000,
        9_000,
        3_000,
        7_000,
        4_000,
        6_000,
        8_000,
    ]
    end = committed[-1][0] + 1
    index = tidelake_jvm("the test").KafkaTimeIndex(java_client_options(kafka_conf), 10_000)
    probe = PartitionEnds(kafka_conf, "test", 10)
    tp = (flow.topic, 0)
    try:
        for t in (0, 1_000, 4_500, 6_500, 8_500, 9_000, 19_999):
            first = next((offset for offset, ts in committed if ts > t), None)
            assert probe.first_records_after([tp], t)[tp] == first, t
            for offset in range(end):
                behind = first is not None and first <= offset
                assert index.call(flow.topic, 0, offset, t) == behind, (t, offset)
    finally:
        probe.close()


@ON_LOCAL_AND_SECURED_S3
def test_backfill_rebuilds_what_the_stream_wrote_and_is_idempotent(
    spark: Any, kafka_conf: dict[str, Any], kafka_as: Any, flow: Any, engine_settings: Any
) -> None:
    """On the secured broker: the demo producer as the ingest user; the stream, the plan (the
    admin client's offsets) and the backfill (executors' time-index lookups) as the stream's."""
    reader = kafka_as("stream", [flow.topic])
    run = produce_and_stream(
        spark,
        flow,
        engine_settings,
        kafka_as("ingest", [flow.topic]),
        reader,
        count=4000,
        days=3,
        late_share=0.15,
        malformed_share=0.05,
        duplicate_share=0.05,
        seed=11,
    )
    report, stream = run.report, run.stream
    day = sorted(report.by_date)[-2]  # yesterday: closed, with late arrivals from today
    before = day_rows(stream.table_uri, day)
    assert before.num_rows == report.by_date[day]
    others = {d: day_rows(stream.table_uri, d) for d in report.by_date if d != day}

    plan = plan_backfill(flow, [day], engine_settings, reader)
    assert plan.records < sum(plan.stream_position.values())  # a window, not the whole topic
    first = run_backfill(spark, plan, engine_settings, reader)
    assert first.rows_by_date == {day: report.by_date[day]}
    assert day_rows(stream.table_uri, day).equals(before)
    for d, rows in others.items():
        assert day_rows(stream.table_uri, d).equals(rows)

    again = run_backfill(
        spark, plan_backfill(flow, [day], engine_settings, reader), engine_settings, reader
    )
    assert again.table_version == first.table_version + 1
    assert day_rows(stream.table_uri, day).equals(before)
    assert duckdb_query(
        f"select count(*), count(distinct call_sid) from delta_scan('{stream.table_uri}')"
    ) == [(report.good, report.good)]


def test_a_range_is_one_commit(
    spark: Any, kafka_conf: dict[str, Any], flow: Any, engine_settings: Any
) -> None:
    run = produce_and_stream(spark, flow, engine_settings, kafka_conf, count=1500, days=3, seed=12)
    report, stream = run.report, run.stream
    version = delta_version(stream.table_uri)
    days = sorted(report.by_date)
    result = run_backfill(
        spark, plan_backfill(flow, days, engine_settings, kafka_conf), engine_settings, kafka_conf
    )
    assert result.table_version == version + 1
    assert result.rows_by_date == report.by_date
    keys = read_delta(stream.table_uri).column("call_sid").to_pylist()
    assert len(keys) == report.good == len(set(keys))


def test_backfill_while_the_stream_writes_into_the_same_day(
    spark: Any, kafka_conf: dict[str, Any], flow: Any, engine_settings: Any
) -> None:
    history = produce_demo_events(
        flow, kafka_conf, count=2000, days=2, seed=13, progress=False, collect_keys=True
    )
    producer = BackgroundProducer(flow, kafka_conf, count=4000, rate=400, late_share=0.2, seed=14)
    with running_stream(spark, flow, engine_settings, kafka_conf) as stream:
        producer.start()
        poll_until(  # the backfills race live appends from the first one on
            lambda: True if read_delta(stream.table_uri).num_rows > history.good else None,
            timeout_s=120,
            interval_s=0.1,
            timeout_error=lambda _: AssertionError(
                "the stream appended none of the producer's events in 120 s"
            ),
        )
        days = sorted({*history.by_date, datetime.now(UTC).date().isoformat()})
        results = []
        # backfills race the live appends: at least two, and until the producer is done
        while producer.is_alive() or len(results) < 2:
            plan = plan_backfill(flow, days, engine_settings, kafka_conf)
            results.append(run_backfill(spark, plan, engine_settings, kafka_conf))
        live = producer.join()
        expected = history.good + live.good
        wait_for_rows(stream.table_uri, expected)
    keys = read_delta(stream.table_uri).column("call_sid").to_pylist()
    assert len(results) >= 2
    assert len(keys) == expected == len(set(keys))
    assert set(keys) == set(history.keys) | set(live.keys)
    dates = Counter(d.isoformat() for d in read_delta(stream.table_uri).column("date").to_pylist())
    assert dates == Counter(history.by_date) + Counter(live.by_date)


def test_backfill_before_the_stream_ran_is_refused(
    kafka_conf: dict[str, Any], flow: Any, engine_settings: Any
) -> None:
    with pytest.raises(BackfillError, match="start the call_events stream"):
        yesterday = datetime.now(UTC).date() - timedelta(days=1)
        plan_backfill(flow, [yesterday.isoformat()], engine_settings, kafka_conf)
    assert timedelta(0) < flow.allowed_lateness
