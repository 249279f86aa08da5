"""A backfill's Kafka time window, its retention check and the lake's, from dates alone."""

from __future__ import annotations

from datetime import UTC, date, datetime

from tidelake.streaming.batch.backfill import (
    date_window,
    retention_problem,
)
from tidelake.streaming.calls.call_events import CALL_EVENTS
from tidelake.streaming.delta.maintenance import first_kept_date


def test_window_spans_skew_before_and_lateness_after() -> None:
    start, end = date_window(CALL_EVENTS, ["2026-11-20", "2026-11-19"])
    assert start == datetime(2026, 11, 18, 23, tzinfo=UTC)
    assert end == datetime(2026, 11, 21, 2, tzinfo=UTC)


def test_retention_problem_names_the_earliest_complete_date() -> None:
    start_ms = int(datetime(2026, 11, 18, 23, tzinfo=UTC).timestamp() * 1000)
    kept = int(datetime(2026, 11, 19, 6, tzinfo=UTC).timestamp() * 1000)
    problem = retention_problem(CALL_EVENTS, [kept, start_ms - 5], start_ms)
    assert problem is not None
    assert "earliest date still complete in Kafka is 2026-11-20" in problem
    assert "left as it is" in problem
    assert retention_problem(CALL_EVENTS, [start_ms], start_ms) is None
    assert retention_problem(CALL_EVENTS, [], start_ms) is None


def test_the_lake_keeps_the_retention_s_days_before_today_and_0_keeps_every_date() -> None:
    today = date(2026, 3, 1)
    assert first_kept_date(60, today) == date(2025, 12, 31)
    assert first_kept_date(1, today) == date(2026, 2, 28)
    assert first_kept_date(0, today) is None
