"""The arrival rule against producers no test here wrote: transactional ones (their commit and
abort markers carry the coordinator's wall clock), plain ones of every codec, late and early ones.

The stream's verdict is held, record by record, to the rule computed independently: a plain
consumer reads each partition in offset order under read_committed (so it never sees a control
record or an aborted one) and keeps the newest timestamp of the data records so far.
"""

from __future__ import annotations

import random
import uuid
from datetime import UTC, datetime, timedelta
from typing import Any

import pyarrow.compute as pc
from confluent_kafka import Producer
from kafka_topics import KEEP_FOREVER, read_records, set_retention
from lake_readers import read_delta
from live_stream import run_available_now

from tidelake.protos.call_pb2 import CallEvent
from tidelake.streaming.batch.backfill import backfill_dates
from tidelake.streaming.calls.demo_events import call_event
from tidelake.streaming.flow.spec import FlowSpec
from tidelake.streaming.kafka.admin import quiet_client_config

CODECS = ("none", "gzip", "snappy", "lz4", "zstd")
HOUR_MS = 3_600_000


def _ms(moment: datetime) -> int:
    return int(moment.timestamp() * 1000)


class Producers:
    """Sends CallEvents stamped as each kind of producer stamps them; remembers the aborted."""

    def __init__(self, kafka_conf: dict[str, Any], flow: FlowSpec, seed: int) -> None:
        self.conf = quiet_client_config(dict(kafka_conf))
        self.topic = flow.topic
        self.rng = random.Random(seed)
        self.aborted: set[str] = set()

    def _events(self, event_ms: list[int]) -> list[CallEvent]:
        return [call_event(self.rng, ms) for ms in event_ms]

    def send(self, producer: Producer, events: list[CallEvent], stamp_ms: list[int]) -> None:
        for event, ts in zip(events, stamp_ms, strict=True):
            producer.produce(
                self.topic,
                event.SerializeToString(),
                key=event.call_sid.encode(),
                timestamp=ts,
                headers=[("producer", b"test")],
            )

    def transactional(self, codec: str, event_ms: list[int], *, commit: bool) -> None:
        """One transaction of events stamped with their own event times (CreateTime)."""
        producer = Producer(
            {**self.conf, "transactional.id": f"tx-{uuid.uuid4().hex}", "compression.type": codec}
        )
        producer.init_transactions(30)
        producer.begin_transaction()
        events = self._events(event_ms)
        self.send(producer, events, event_ms)
        if commit:
            producer.commit_transaction(30)
        else:
            producer.abort_transaction(30)
            self.aborted |= {e.call_sid for e in events}

    def plain(self, event_ms: list[int], stamp_ms: list[int], codec: str = "none") -> None:
        producer = Producer({**self.conf, "compression.type": codec, "linger.ms": 5})
        self.send(producer, self._events(event_ms), stamp_ms)
        assert producer.flush(30) == 0


def reference_verdicts(kafka_conf: dict[str, Any], flow: FlowSpec) -> dict[tuple[int, int], str]:
    """(partition, offset) -> "ok", "ahead" or "too late", by the documented rule alone."""
    skew_ms = flow.max_clock_skew // timedelta(milliseconds=1)
    verdicts: dict[tuple[int, int], str] = {}
    newest: dict[int, int] = {}
    records = sorted(read_records(kafka_conf, flow.topic), key=lambda r: (r.partition, r.offset))
    for record in records:
        newest[record.partition] = max(newest.get(record.partition, 0), record.timestamp_ms)
        event_ms = CallEvent.FromString(record.value or b"").event_time
        if event_ms > record.timestamp_ms + skew_ms:
            verdict = "ahead"
        elif newest[record.partition] > flow.closes_at_ms(event_ms):
            verdict = "too late"
        else:
            verdict = "ok"
        verdicts[(record.partition, record.offset)] = verdict
    return verdicts


def _positions(table: Any) -> set[tuple[int, int]]:
    return set(
        zip(
            table.column("kafka_partition").to_pylist(),
            table.column("kafka_offset").to_pylist(),
            strict=True,
        )
    )


def test_transaction_markers_do_not_close_a_day_and_the_stream_agrees_with_the_rule(
    spark: Any, kafka_conf: dict[str, Any], flow: FlowSpec, engine_settings: Any
) -> None:
    set_retention(kafka_conf, flow.topic, KEEP_FOREVER)
    now = datetime.now(UTC)
    day = (now - timedelta(days=3)).replace(hour=0, minute=0, second=0, microsecond=0)
    day_ms, closes_ms, now_ms = _ms(day), flow.closes_at_ms(_ms(day)), _ms(now)
    rng = random.Random(3)

    def times_of_day(n: int) -> list[int]:
        return sorted(day_ms + rng.randrange(22 * HOUR_MS) for _ in range(n))

    send = Producers(kafka_conf, flow, seed=5)
    # yesterday's events from transactional producers of every codec; one transaction aborted
    for codec in CODECS:
        send.transactional(codec, times_of_day(60), commit=True)
    send.transactional("lz4", times_of_day(40), commit=False)
    # then 2,000 more of the same day from a plain producer: no data record before them is
    # stamped after the day closed, so all of them are on time whatever the markers say
    on_time = times_of_day(2000)
    send.plain(on_time, on_time, codec="zstd")
    # a late producer (stamped after the day closed), an early one (event time 2 h ahead of its
    # stamp), today's live events, then the day's events again: behind today's, so too late
    late = times_of_day(50)
    send.plain(late, [closes_ms + HOUR_MS] * len(late))
    send.plain([now_ms + 2 * HOUR_MS] * 30, [now_ms] * 30)
    send.plain([now_ms - 1000] * 200, [now_ms] * 200, codec="snappy")
    behind = times_of_day(100)
    send.plain(behind, behind, codec="gzip")

    expected = reference_verdicts(kafka_conf, flow)
    stream = run_available_now(spark, flow, engine_settings, kafka_conf)
    table = read_delta(stream.table_uri)
    quarantine = read_delta(stream.quarantine_uri)

    # every committed on-time event lands once, no aborted one does
    assert table.num_rows == sum(v == "ok" for v in expected.values()) >= 2300
    assert _positions(table) == {p for p, v in expected.items() if v == "ok"}
    assert not send.aborted & set(table.column("call_sid").to_pylist())
    # and the quarantine holds exactly what the rule refuses, for the rule's reason
    reasons = dict(
        zip(
            zip(
                quarantine.column("kafka_partition").to_pylist(),
                quarantine.column("kafka_offset").to_pylist(),
                strict=True,
            ),
            quarantine.column("error").to_pylist(),
            strict=True,
        )
    )
    assert set(reasons) == {p for p, v in expected.items() if v != "ok"}
    for position, reason in reasons.items():
        assert ("too late" if reason.startswith("too late") else "ahead") == expected[position]
    assert sum(v == "too late" for v in expected.values()) >= 50 + 90  # late + most of behind

    # a backfill of the day bounds its window by data records too: it rebuilds the same rows
    day_iso = day.date().isoformat()
    before = table.filter(pc.equal(table["date"], day.date()))
    result = backfill_dates(spark, flow, [day_iso], engine_settings, kafka_conf)
    assert result.rows_by_date == {day_iso: before.num_rows}
    after = read_delta(stream.table_uri)
    assert _positions(after.filter(pc.equal(after["date"], day.date()))) == _positions(before)
