"""Streaming deduplication: producer retries never reach the table, and the check agrees."""

from __future__ import annotations

import dataclasses
import time
from datetime import UTC, date, datetime, timedelta
from pathlib import Path
from typing import Any

import pytest
from lake_readers import duckdb_query
from live_stream import produce_and_stream, run_available_now

from tidelake.assets.quality.expectations import validate_partition
from tidelake.platform.dev.produce import produce_demo_events
from tidelake.streaming.calls.call_events import CALL_EVENTS
from tidelake.streaming.flow.spec import FlowSpecError
from tidelake.streaming.records.dedup import rows_dropped_by_watermark
from tidelake.streaming.stream.checkpoint_upgrade import START_OFFSETS_FILE, lacks_state


def counts(uri: str) -> tuple[int, int]:
    return duckdb_query(f"select count(*), count(distinct call_sid) from delta_scan('{uri}')")[0]


def uniqueness_failures(uri: str, flow: Any, days: list[str]) -> dict[str, int]:
    """Day -> unexpected count of the call_sid uniqueness expectation, for days that fail it."""
    failed = {}
    for day in days:
        for outcome in validate_partition(uri, flow, day).failures:
            assert outcome.expectation == "expect_column_values_to_be_unique", outcome
            failed[day] = outcome.unexpected_count
    return failed


def test_dedup_key_must_be_a_field() -> None:
    with pytest.raises(FlowSpecError, match="dedup_key 'sid'"):
        dataclasses.replace(CALL_EVENTS, dedup_key="sid")


def test_progress_counts_rows_dropped_by_the_watermark() -> None:
    progress = {"stateOperators": [{"numRowsDroppedByWatermark": 3}, {}]}
    assert rows_dropped_by_watermark(progress) == 3
    assert rows_dropped_by_watermark({"stateOperators": []}) == 0


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
    assert uniqueness_failures(stream.table_uri, flow, sorted(report.by_date)) == {}


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
    failures = uniqueness_failures(stream.table_uri, flow, sorted(report.by_date))
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
