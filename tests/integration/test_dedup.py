"""Streaming deduplication: producer retries never reach the table, and the check agrees."""

from __future__ import annotations

import dataclasses
import json
import random
import time
from datetime import UTC, date, datetime, timedelta
from pathlib import Path
from typing import Any

import pyarrow as pa
import pyarrow.compute as pc
import pytest
from confluent_kafka import Producer
from lake_readers import duckdb_query, read_delta
from live_stream import produce_and_stream, run_available_now
from pyspark.sql import functions as F

from tidelake.assets.quality.expectations import validate_partition
from tidelake.platform.dev.produce import produce_demo_events
from tidelake.protos.call_pb2 import CallEvent
from tidelake.streaming.batch.backfill import backfill_dates
from tidelake.streaming.calls.call_events import CALL_EVENTS
from tidelake.streaming.calls.demo_events import call_event
from tidelake.streaming.flow.engine_columns import INGEST_TIME_COLUMN
from tidelake.streaming.flow.spec import FlowSpecError
from tidelake.streaming.kafka.admin import quiet_client_config
from tidelake.streaming.kafka.read import stream_records
from tidelake.streaming.records.decode import decode_records
from tidelake.streaming.records.dedup import (
    EARLIER_DEDUP_OPERATOR,
    drop_repeats_in_batch,
    remembered_by_earlier_operator,
)
from tidelake.streaming.schemas.writer_schemas import WriterSchemas
from tidelake.streaming.stream.checkpoint_upgrade import (
    REMEMBERED_KEYS_FILE,
    START_OFFSETS_FILE,
    lacks_state,
    remembered_keys,
    state_operator,
)
from tidelake.streaming.stream.status import kafka_ends


def counts(uri: str) -> tuple[int, int]:
    return duckdb_query(f"select count(*), count(distinct call_sid) from delta_scan('{uri}')")[0]


def uniqueness_failures(spark: Any, uri: str, flow: Any, days: list[str]) -> dict[str, int]:
    """Day -> unexpected count of the call_sid uniqueness expectation, for days that fail it."""
    failed = {}
    for day in days:
        for outcome in validate_partition(spark, uri, flow, day).failures:
            assert outcome.expectation == "expect_column_values_to_be_unique", outcome
            failed[day] = outcome.unexpected_count
    return failed


def test_dedup_key_must_be_a_field() -> None:
    with pytest.raises(FlowSpecError, match="dedup_key 'sid'"):
        dataclasses.replace(CALL_EVENTS, dedup_key="sid")


def test_producer_retries_do_not_reach_the_table(
    spark: Any, kafka_conf: dict[str, Any], flow: Any, engine_settings: Any
) -> None:
    # small batches, so that many retries land in a later batch than their original
    settings = engine_settings.model_copy(update={"max_offsets_per_trigger": 400})
    run = produce_and_stream(
        spark,
        flow,
        settings,
        kafka_conf,
        count=3000,
        days=2,
        duplicate_share=0.1,
        malformed_share=0.03,
        seed=5,
    )
    report, stream = run.report, run.stream
    assert report.duplicates > 200 and report.malformed > 0

    assert counts(stream.table_uri) == (report.good, report.good)
    assert run.quarantine.num_rows == report.malformed
    assert uniqueness_failures(spark, stream.table_uri, flow, sorted(report.by_date)) == {}


def test_records_far_behind_the_newest_arrival_are_kept(
    spark: Any, kafka_conf: dict[str, Any], flow: Any, engine_settings: Any
) -> None:
    live = produce_demo_events(
        flow, kafka_conf, count=300, malformed_share=0, seed=9, progress=False
    )
    live_stamped_by_ms = int(time.time() * 1000)
    # several batches, so that the checkpoint records a watermark (a restart resumes with the
    # watermark of the last batch, which was set from the ones before it)
    settings = engine_settings.model_copy(update={"max_offsets_per_trigger": 100})
    stream = run_available_now(spark, flow, settings, kafka_conf)
    # now the watermark is past yesterday: a replay of two days of history arrives behind it
    replay = produce_and_stream(
        spark,
        flow,
        settings,
        kafka_conf,
        count=1500,
        days=2,
        malformed_share=0,
        duplicate_share=0.05,
        seed=10,
    )
    history = replay.report

    # the replay stands behind the live records in every partition: its dates that had closed
    # before the live records were stamped are too late (the arrival rule); the open ones land
    open_days = {d for d in history.by_date if _closes_ms(flow, d) > live_stamped_by_ms}
    landed = sum(n for d, n in history.by_date.items() if d in open_days)
    assert counts(stream.table_uri) == (live.good + landed,) * 2
    errors = replay.quarantine.column("error").to_pylist()
    assert all(e.startswith("too late") for e in errors)
    assert len(errors) >= history.good - landed


def _closes_ms(flow: Any, day: str) -> int:
    start = datetime.combine(date.fromisoformat(day), datetime.min.time(), UTC)
    return int((start + timedelta(days=1) + flow.allowed_lateness).timestamp() * 1000)


def test_without_a_dedup_key_the_uniqueness_check_catches_the_retries(
    spark: Any, kafka_conf: dict[str, Any], flow: Any, engine_settings: Any
) -> None:
    flow = dataclasses.replace(flow, dedup_key=None)
    run = produce_and_stream(
        spark,
        flow,
        engine_settings,
        kafka_conf,
        count=1000,
        duplicate_share=0.05,
        malformed_share=0,
        seed=6,
    )
    report, stream = run.report, run.stream

    assert counts(stream.table_uri) == (report.good + report.duplicates, report.good)
    # near midnight the events span two dates; a retry lands on its original's date
    failures = uniqueness_failures(spark, stream.table_uri, flow, sorted(report.by_date))
    assert sum(failures.values()) == 2 * report.duplicates


def test_a_checkpoint_without_dedup_state_moves_to_a_new_one_without_loss(
    spark: Any, kafka_conf: dict[str, Any], flow: Any, engine_settings: Any
) -> None:
    first = produce_demo_events(
        flow, kafka_conf, count=600, malformed_share=0, seed=7, progress=False
    )
    stream = run_available_now(
        spark, dataclasses.replace(flow, dedup_key=None), engine_settings, kafka_conf
    )
    assert lacks_state(stream.checkpoint)
    second = produce_and_stream(
        spark,
        flow,
        engine_settings,
        kafka_conf,
        count=600,
        malformed_share=0,
        duplicate_share=0.1,
        seed=8,
    ).report

    assert counts(stream.table_uri) == (first.good + second.good,) * 2
    checkpoint = Path(stream.checkpoint)
    (retired,) = checkpoint.parent.glob(f"{checkpoint.name}.retired-*")
    assert (retired / "commits").is_dir() and (checkpoint / START_OFFSETS_FILE).exists()
    assert not lacks_state(checkpoint)
    run_available_now(spark, flow, engine_settings, kafka_conf)  # restarts on the new checkpoint
    assert counts(stream.table_uri) == (first.good + second.good,) * 2


def _earlier_operator_checkpoint(
    spark: Any, flow: Any, kafka_conf: dict[str, Any], checkpoint: Path
) -> None:
    """A checkpoint whose state is that of the operator the stream used before RepeatFilter
    (dropDuplicatesWithinWatermark on the same key), after reading the whole topic."""
    records = stream_records(
        spark,
        flow,
        kafka_conf,
        starting_offsets="earliest",
        max_offsets_per_trigger=10_000,
        fail_on_data_loss=True,
    )
    decoded = decode_records(records, flow, kafka_conf, WriterSchemas.from_env(flow))
    query = (
        decoded.withColumns(
            {
                "_dedup_key": F.concat(F.lit("key/"), F.col("call_sid")),
                "_arrival": F.col("ingest_time"),
            }
        )
        .withWatermark("_arrival", f"{int(flow.allowed_lateness.total_seconds())} seconds")
        .dropDuplicatesWithinWatermark(["_dedup_key"])
        .writeStream.format("noop")
        .option("checkpointLocation", str(checkpoint))
        .trigger(availableNow=True)
        .start()
    )
    query.awaitTermination()
    assert state_operator(str(checkpoint)) == EARLIER_DEDUP_OPERATOR


def test_keys_the_earlier_operator_remembered_stay_repeats_on_a_new_checkpoint(
    spark: Any, kafka_conf: dict[str, Any], flow: Any, engine_settings: Any, tmp_path: Path
) -> None:
    first = produce_demo_events(
        flow, kafka_conf, count=300, malformed_share=0, late_share=0, seed=12, progress=False
    )
    earlier = tmp_path / "earlier-checkpoint"
    _earlier_operator_checkpoint(spark, flow, kafka_conf, earlier)
    assert remembered_by_earlier_operator(spark, str(earlier), flow).count() == first.good
    ends = kafka_ends(kafka_conf, flow.topic)
    # the retries of every one of those records (the same seed, the same call_sids), then new ones
    produce_demo_events(
        flow, kafka_conf, count=300, malformed_share=0, late_share=0, seed=12, progress=False
    )
    new = produce_demo_events(
        flow, kafka_conf, count=100, malformed_share=0, late_share=0, seed=13, progress=False
    )
    # what preflight leaves when it moves off such a checkpoint (start_new_checkpoint, keep_keys)
    checkpoint = Path(engine_settings.checkpoint_uri(flow.name))
    checkpoint.mkdir(parents=True)
    pinned = {flow.topic: {str(p): o for p, o in ends.items()}}
    (checkpoint / START_OFFSETS_FILE).write_text(json.dumps(pinned))
    (checkpoint / REMEMBERED_KEYS_FILE).write_text(str(earlier))

    stream = run_available_now(spark, flow, engine_settings, kafka_conf)
    assert counts(stream.table_uri) == (new.good, new.good)
    assert remembered_keys(stream.checkpoint) is None  # seeds the first batch only


def _send(kafka_conf: dict[str, Any], topic: str, events: list[tuple[Any, int | None]]) -> None:
    """CallEvents with the Kafka timestamps given (None: the producer's clock), keyed by call_sid
    as producers do (so a repeat lands in its original's partition)."""
    producer = Producer(quiet_client_config(dict(kafka_conf)))
    for event, stamp_ms in events:
        extra = {} if stamp_ms is None else {"timestamp": stamp_ms}
        producer.produce(topic, event.SerializeToString(), event.call_sid.encode(), **extra)
    assert producer.flush(30) == 0


def test_a_repeat_within_the_lateness_is_dropped_and_one_beyond_it_kept_across_a_restart(
    spark: Any, kafka_conf: dict[str, Any], flow: Any, engine_settings: Any
) -> None:
    rng = random.Random(14)
    now_ms = int(time.time() * 1000)
    lateness_ms = int(flow.allowed_lateness.total_seconds() * 1000)
    soon = call_event(rng, now_ms - 60_000)
    # stamped more than the lateness ago; its event time less than the lateness ago, so its date
    # is open even for its repeat
    old_stamp_ms = now_ms - lateness_ms - 30 * 60_000
    old = call_event(rng, old_stamp_ms + 50 * 60_000)
    _send(kafka_conf, flow.topic, [(soon, now_ms - 60_000), (old, old_stamp_ms)])
    stream = run_available_now(spark, flow, engine_settings, kafka_conf)

    # a new query on the same checkpoint: the state it restores remembers both keys
    _send(
        kafka_conf,
        flow.topic,
        [
            (soon, now_ms - 50_000),  # 10 s after its original: a producer retry
            (old, None),  # stamped now: more than the lateness after its original's arrival
        ],
    )
    run_available_now(spark, flow, engine_settings, kafka_conf)
    rows = read_delta(stream.table_uri).column("call_sid").to_pylist()
    assert sorted(rows) == sorted([soon.call_sid, old.call_sid, old.call_sid])


def test_a_backfill_of_a_day_the_stream_caught_up_on_keeps_the_streams_rows(
    spark: Any, kafka_conf: dict[str, Any], flow: Any, engine_settings: Any
) -> None:
    """Yesterday's records, read by the stream hours after they arrived, then backfilled: both
    judge repeats by the records' Kafka timestamps, so the day's rows are the same."""
    rng = random.Random(21)
    day = datetime.now(UTC).date() - timedelta(days=1)
    day_start_ms = int(datetime.combine(day, datetime.min.time(), UTC).timestamp() * 1000)
    lateness_ms = int(flow.allowed_lateness.total_seconds() * 1000)
    sends: list[tuple[Any, int]] = []
    kept: list[str] = []
    for i in range(40):
        event = call_event(rng, day_start_ms + 3_600_000 + i * 360_000)
        sends.append((event, event.event_time + 1_000))
        kept.append(event.call_sid)
        if i % 4 == 1:  # a producer's retry, seconds later: a repeat
            sends.append((event, event.event_time + 6_000))
        if i % 4 == 2:  # a retry just within the lateness: a repeat
            sends.append((event, event.event_time + 1_000 + lateness_ms))
        if i % 4 == 3:  # the key again, more than the lateness later: kept
            again = CallEvent()
            again.CopyFrom(event)
            again.event_time = event.event_time + lateness_ms + 60_000
            sends.append((again, again.event_time + 1_000))
            kept.append(event.call_sid)
    _send(kafka_conf, flow.topic, sorted(sends, key=lambda send: send[1]))
    settings = engine_settings.model_copy(update={"max_offsets_per_trigger": 15})
    stream = run_available_now(spark, flow, settings, kafka_conf)
    streamed = _day_rows(stream.table_uri, day)
    assert sorted(streamed.column("call_sid").to_pylist()) == sorted(kept)

    result = backfill_dates(spark, flow, [day.isoformat()], engine_settings, kafka_conf)
    assert result.rows_by_date == {day.isoformat(): len(kept)}
    assert _day_rows(stream.table_uri, day).equals(streamed)


def _day_rows(uri: str, day: date) -> pa.Table:
    """A date's rows in Kafka order, all columns but the ingest time (when each run read them)."""
    table = read_delta(uri)
    table = table.filter(pc.equal(table["date"], day)).drop_columns([INGEST_TIME_COLUMN])
    return table.sort_by([("kafka_partition", "ascending"), ("kafka_offset", "ascending")])


def test_deduplication_leaves_the_sessions_settings_as_they_were(spark: Any, flow: Any) -> None:
    """Steps of a run share the session: dropping repeats must not change its settings."""
    at = datetime(2026, 11, 23, 9, tzinfo=UTC)
    rows = spark.createDataFrame(
        [
            ("CA1", None, flow.topic, 0, 10, at, at),
            ("CA1", None, flow.topic, 0, 11, at + timedelta(seconds=5), at),
            ("CA2", None, flow.topic, 1, 3, at, at),
        ],
        "call_sid string, _error string, kafka_topic string, kafka_partition int, "
        "kafka_offset long, kafka_timestamp timestamp, ingest_time timestamp",
    )
    before = dict(spark.conf.getAll)

    kept = drop_repeats_in_batch(rows, flow).collect()

    assert sorted((r.call_sid, r.kafka_offset) for r in kept) == [("CA1", 10), ("CA2", 3)]
    assert dict(spark.conf.getAll) == before
