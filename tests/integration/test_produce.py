"""The demo producer against a real broker: what lands in the topic matches the report exactly."""

from __future__ import annotations

import dataclasses
import time
from collections import Counter
from dataclasses import dataclass, field
from datetime import UTC, datetime, timedelta
from typing import Any

import pytest
from google.protobuf.message import DecodeError
from kafka_topics import read_records

from tidelake.platform.dev.produce import TOO_LATE, UNDECODABLE, ProduceReport, produce_demo_events
from tidelake.streaming.calls.call_events import CALL_EVENTS
from tidelake.streaming.flow.spec import FlowSpec
from tidelake.streaming.kafka.admin import (
    TopicMissingError,
    ensure_topic,
)

PARTITIONS = 4


@dataclass
class TopicContents:
    """A topic read back and classified the way the engine will see it."""

    good_keys: list[str] = field(default_factory=list)
    good_times_ms: list[int] = field(default_factory=list)
    poison: Counter[str] = field(default_factory=Counter)
    kafka_key_mismatches: int = 0

    @property
    def total(self) -> int:
        return len(self.good_keys) + sum(self.poison.values())

    def by_date(self) -> dict[str, int]:
        dates = Counter(
            datetime.fromtimestamp(ms / 1000, UTC).date().isoformat() for ms in self.good_times_ms
        )
        return dict(sorted(dates.items()))


def _flow(topic: str) -> FlowSpec:
    return dataclasses.replace(CALL_EVENTS, topic=topic, topic_partitions=PARTITIONS)


def _read_topic(conf: dict[str, Any], flow: FlowSpec) -> TopicContents:
    """Read every partition to its end (end = partition EOF from fetch, not ListOffsets)."""
    contents = TopicContents()
    for record in read_records(conf, flow.topic, partitions=list(range(flow.topic_partitions))):
        _classify(flow, record.key, record.value, record.timestamp_ms, contents)
    return contents


def _classify(
    flow: FlowSpec, key: bytes | None, value: bytes, arrival_ms: int, contents: TopicContents
) -> None:
    try:
        event = flow.message.FromString(value)
    except DecodeError:
        contents.poison[UNDECODABLE] += 1
        return
    fields = flow.message.DESCRIPTOR.fields_by_name
    missing = [
        name for name in flow.validity_fields if getattr(event, name) == fields[name].default_value
    ]
    if missing:
        assert len(missing) == 1, f"poison should lack exactly one field, lacks {missing}"
        contents.poison[f"missing_{missing[0]}"] += 1
        return
    event_ms = getattr(event, flow.event_time_field)
    closes_ms = (event_ms // 86_400_000 + 1) * 86_400_000 + flow.allowed_lateness // timedelta(
        milliseconds=1
    )
    if arrival_ms > closes_ms:  # the engine quarantines what arrives after its date closed
        contents.poison[TOO_LATE] += 1
        return
    event_key = getattr(event, flow.key_field)
    contents.good_keys.append(event_key)
    contents.good_times_ms.append(getattr(event, flow.event_time_field))
    contents.kafka_key_mismatches += key != event_key.encode()


def _assert_matches(report: ProduceReport, contents: TopicContents) -> None:
    assert report.produced == report.good + report.malformed == contents.total
    assert report.good == len(contents.good_keys)
    assert report.malformed == sum(contents.poison.values())
    assert report.malformed_kinds == dict(sorted(contents.poison.items()))
    assert report.by_date == contents.by_date()
    assert contents.kafka_key_mismatches == 0
    if report.keys is not None:
        assert Counter(report.keys) == Counter(contents.good_keys)


def test_report_matches_topic_contents_over_several_days(
    kafka_conf: dict[str, Any], topic_name: str
) -> None:
    flow = _flow(topic_name)
    ensure_topic(kafka_conf, flow.topic, flow.topic_partitions)
    report = produce_demo_events(
        flow,
        kafka_conf,
        count=2_000,
        malformed_share=0.05,
        days=3,
        seed=11,
        progress=False,
        collect_keys=True,
    )
    contents = _read_topic(kafka_conf, flow)

    _assert_matches(report, contents)
    assert report.produced == 2_000
    assert 50 <= report.malformed <= 150  # 5% of 2,000, seeded
    # too_late appears only when a late event's arrival crossed its date's close (clock-dependent)
    assert set(report.malformed_kinds) - {TOO_LATE} == {
        UNDECODABLE,
        *(f"missing_{name}" for name in flow.validity_fields),
    }
    assert len(report.by_date) >= 3
    assert report.keys is not None and len(set(report.keys)) == report.good  # unique call_sids


def test_late_events_are_one_to_three_hours_old(
    kafka_conf: dict[str, Any], topic_name: str
) -> None:
    flow = _flow(topic_name)
    ensure_topic(kafka_conf, flow.topic, flow.topic_partitions)
    started_ms = time.time_ns() // 1_000_000
    report = produce_demo_events(
        flow, kafka_conf, count=1_000, late_share=0.2, malformed_share=0, seed=3, progress=False
    )
    finished_ms = time.time_ns() // 1_000_000
    contents = _read_topic(kafka_conf, flow)

    _assert_matches(report, contents)
    # the only poison is late events whose day has closed (its end plus the flow's 2 hours of
    # allowed lateness): events 1-3 hours old sent between 02:00 and 03:00 UTC
    too_late = report.malformed_kinds.get(TOO_LATE, 0)
    assert report.malformed == too_late and report.keys is None
    late = [ms for ms in contents.good_times_ms if ms < started_ms]
    on_time = [ms for ms in contents.good_times_ms if ms >= started_ms]
    assert len(late) == report.late and 150 <= report.late + too_late <= 250
    assert all(started_ms - 3 * 3_600_000 <= ms <= finished_ms - 3_600_000 for ms in late)
    assert all(ms <= finished_ms for ms in on_time)


def test_same_seed_same_messages(kafka_conf: dict[str, Any], topic_name: str) -> None:
    flow = _flow(topic_name)
    ensure_topic(kafka_conf, flow.topic, flow.topic_partitions)
    runs = [
        produce_demo_events(
            flow,
            kafka_conf,
            count=300,
            malformed_share=0.1,
            seed=42,
            progress=False,
            collect_keys=True,
        )
        for _ in range(2)
    ]
    assert runs[0].keys == runs[1].keys
    assert runs[0].malformed_kinds == runs[1].malformed_kinds
    assert (runs[0].good, runs[0].late) == (runs[1].good, runs[1].late)
    other = produce_demo_events(
        flow, kafka_conf, count=300, seed=43, progress=False, collect_keys=True
    )
    assert other.keys != runs[0].keys


def test_rate_paces_count_and_duration(kafka_conf: dict[str, Any], topic_name: str) -> None:
    flow = _flow(topic_name)
    ensure_topic(kafka_conf, flow.topic, flow.topic_partitions)
    by_count = produce_demo_events(flow, kafka_conf, count=200, rate=1_000, progress=False)
    assert by_count.produced == 200
    assert 0.18 <= by_count.elapsed_s < 1.5
    by_duration = produce_demo_events(flow, kafka_conf, rate=500, duration_s=0.4, progress=False)
    assert by_duration.produced == 200
    assert 0.38 <= by_duration.elapsed_s < 1.5
    unpaced = produce_demo_events(flow, kafka_conf, duration_s=0.2, progress=False)
    assert unpaced.produced > 0 and unpaced.elapsed_s < 1.5
    assert _read_topic(kafka_conf, flow).total == 200 + 200 + unpaced.produced


def test_missing_topic_is_an_error_not_auto_created(
    kafka_conf: dict[str, Any], topic_name: str
) -> None:
    with pytest.raises(TopicMissingError, match=topic_name):
        produce_demo_events(_flow(topic_name), kafka_conf, count=10, progress=False)
