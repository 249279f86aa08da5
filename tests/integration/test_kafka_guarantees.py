"""What real Kafka does that a look-alike did not, end to end through the stream and backfill:
transactions (read_committed), retention deleting unread records, and producers that stamp
records with their event time (CreateTime) and send some hours late."""

from __future__ import annotations

import dataclasses
import random
import time
import uuid
from collections.abc import Iterator
from datetime import UTC, date, datetime, timedelta
from typing import Any

import pytest
from confluent_kafka import Consumer, Producer, TopicPartition
from confluent_kafka.admin import AdminClient, NewTopic
from kafka_topics import read_values, set_retention
from lake_readers import duckdb_query, read_delta
from live_stream import run_available_now

from tidelake.platform.dev.dagster_web import wait_for
from tidelake.protos.call_pb2 import CallEvent
from tidelake.streaming.batch.backfill import plan_backfill, run_backfill
from tidelake.streaming.calls.call_events import CALL_EVENTS
from tidelake.streaming.kafka.admin import quiet_client_config
from tidelake.streaming.stream.query import StreamFailedError

_HOUR_MS = 3_600_000
_DAY_MS = 24 * _HOUR_MS


def call(n: int, event_ms: int) -> tuple[str, bytes]:
    sid = f"CA{n:032x}"
    event = CallEvent(
        call_sid=sid,
        account_sid=f"AC{n % 7:032x}",
        duration=30 + n % 50,
        call_state=CallEvent.completed,
        region=CallEvent.de1,
        event_time=event_ms,
    )
    return sid, event.SerializeToString()


def _keys(uri: str) -> list[str]:
    return read_delta(uri).column("call_sid").to_pylist()


def test_records_of_aborted_or_open_transactions_never_land(
    spark: Any, kafka_conf: dict[str, Any], flow: Any, engine_settings: Any
) -> None:
    now = int(time.time() * 1000)
    producer = Producer(
        quiet_client_config({**kafka_conf, "transactional.id": f"test-{uuid.uuid4().hex}"})
    )
    producer.init_transactions(30)

    def transaction(numbers: range) -> set[str]:
        producer.begin_transaction()
        sids = set()
        for n in numbers:
            sid, value = call(n, now)
            producer.produce(flow.topic, value, sid.encode(), timestamp=now)
            sids.add(sid)
        producer.flush(30)
        return sids

    committed = transaction(range(100))
    producer.commit_transaction(30)
    aborted = transaction(range(100, 150))
    producer.abort_transaction(30)
    committed |= transaction(range(150, 200))
    producer.commit_transaction(30)
    # the aborted records are really in the log: a read_uncommitted reader sees all 200
    assert len(read_values(kafka_conf, flow.topic, isolation_level="read_uncommitted")) == 200

    stream = run_available_now(spark, flow, engine_settings, kafka_conf)
    assert set(_keys(stream.table_uri)) == committed
    assert duckdb_query(f"select count(*) from delta_scan('{stream.table_uri}')") == [(150,)]

    # an open transaction holds the stream at the last stable offset until it ends
    pending = transaction(range(200, 210))
    stream = run_available_now(spark, flow, engine_settings, kafka_conf)
    assert set(_keys(stream.table_uri)) == committed
    producer.commit_transaction(30)
    stream = run_available_now(spark, flow, engine_settings, kafka_conf)
    keys = _keys(stream.table_uri)
    assert set(keys) == committed | pending and len(keys) == 160
    assert not aborted & set(keys)


@pytest.fixture
def short_retention_flow(kafka_conf: dict[str, Any], topic_name: str) -> Iterator[Any]:
    """CALL_EVENTS on a one-partition topic whose segments roll every 100 ms, so that a lowered
    retention deletes old records within seconds."""
    admin = AdminClient(quiet_client_config(kafka_conf))
    config = {"retention.ms": str(7 * _DAY_MS), "segment.ms": "100"}
    admin.create_topics([NewTopic(topic_name, 1, 1, config=config)])[topic_name].result(30)
    yield dataclasses.replace(CALL_EVENTS, topic=topic_name, topic_partitions=1)


def test_records_deleted_by_retention_before_the_stream_read_them_stop_it_loudly(
    spark: Any, kafka_conf: dict[str, Any], short_retention_flow: Any, engine_settings: Any
) -> None:
    flow = short_retention_flow
    producer = Producer(quiet_client_config(kafka_conf))
    old = int(time.time() * 1000) - 3 * _DAY_MS  # kept for now; past the retention set below

    def send(numbers: range, stamp: int) -> None:
        for n in numbers:
            sid, value = call(n, stamp + n)
            producer.produce(flow.topic, value, sid.encode(), partition=0, timestamp=stamp + n)
            producer.flush(10)  # one batch each: old-stamped segments roll at every append

    send(range(50), old)
    first = run_available_now(spark, flow, engine_settings, kafka_conf)
    assert len(_keys(first.table_uri)) == 50
    send(range(50, 100), old)  # never read by the stream before retention deletes it
    now = int(time.time() * 1000)
    # a current record: only it survives retention. Its stamp, days after the old segment's
    # first, rolls a segment of its own (segment.ms compares stamps, not the clock)
    send(range(100, 101), now - 100)
    set_retention(kafka_conf, flow.topic, _DAY_MS)
    _wait_for_log_start(kafka_conf, flow.topic, 100)

    with pytest.raises(StreamFailedError) as failure:
        run_available_now(spark, flow, engine_settings, kafka_conf)
    message = str(failure.value)
    assert f"offsets 50..99 of {flow.topic}/0 are no longer in Kafka" in message
    assert "TIDELAKE_FAIL_ON_DATA_LOSS=false" in message
    assert len(_keys(first.table_uri)) == 50  # nothing half-written

    # the documented way past it: one run with failOnDataLoss=false skips the lost range
    skipping = engine_settings.model_copy(update={"fail_on_data_loss": False})
    after = run_available_now(spark, flow, skipping, kafka_conf)
    keys = _keys(after.table_uri)
    assert sorted(keys) == sorted(call(n, 0)[0] for n in [*range(50), 100])
    send(range(101, 103), now)
    assert len(_keys(run_available_now(spark, flow, engine_settings, kafka_conf).table_uri)) == 53


def _wait_for_log_start(kafka_conf: dict[str, Any], topic: str, offset: int) -> None:
    consumer = Consumer(quiet_client_config({**kafka_conf, "group.id": "test-retention"}))
    try:

        def moved() -> bool | None:
            low, _ = consumer.get_watermark_offsets(TopicPartition(topic, 0), 10, cached=False)
            return True if low >= offset else None

        wait_for(moved, 60, f"retention to move the start of {topic}/0 to {offset}", 0.5)
    finally:
        consumer.close()


def test_backfill_of_a_day_with_late_create_time_producers_equals_the_stream(
    spark: Any, kafka_conf: dict[str, Any], flow: Any, engine_settings: Any
) -> None:
    """Producers stamp records with their event time and 5% of them are sent 1-6 h late: the
    stream and a backfill of a day agree on every record, those it accepts and those it
    quarantines as too late."""
    rng = random.Random(20261123)
    today = datetime.now(UTC).replace(hour=0, minute=0, second=0, microsecond=0)
    start_ms = int((today - timedelta(days=2)).timestamp() * 1000)
    span_ms = int(time.time() * 1000) - 7 * _HOUR_MS - start_ms
    events = []
    for n in range(3000):
        event_ms = start_ms + rng.randrange(span_ms)
        late = rng.random() < 0.05
        send_ms = event_ms + (rng.randint(_HOUR_MS, 6 * _HOUR_MS) if late else 0)
        events.append((send_ms, n, event_ms))
    producer = Producer(quiet_client_config(kafka_conf))
    for _, n, event_ms in sorted(events):
        sid, value = call(n, event_ms)
        producer.produce(flow.topic, value, sid.encode(), timestamp=event_ms)  # CreateTime
    assert producer.flush(30) == 0

    stream = run_available_now(spark, flow, engine_settings, kafka_conf)
    day = (today - timedelta(days=1)).date()
    streamed = _keys_of_day(stream.table_uri, day)
    quarantine = read_delta(stream.quarantine_uri).column("error").to_pylist()
    too_late = [e for e in quarantine if e.startswith("too late")]
    # late senders whose own timestamp is on time, caught because newer records came first
    assert too_late, "the test data should hold records sent after their day closed"

    plan = plan_backfill(flow, [day.isoformat()], engine_settings, kafka_conf)
    assert plan.records < 3000
    result = run_backfill(spark, plan, engine_settings, kafka_conf)
    assert result.rows_by_date == {day.isoformat(): len(streamed)}
    assert _keys_of_day(stream.table_uri, day) == streamed
    keys = _keys(stream.table_uri)
    assert len(keys) == len(set(keys)) == 3000 - len(too_late)


def _keys_of_day(uri: str, day: date) -> list[str]:
    table = read_delta(uri)
    dates = table.column("date").to_pylist()
    return sorted(
        k for k, d in zip(table.column("call_sid").to_pylist(), dates, strict=True) if d == day
    )
