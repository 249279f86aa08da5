"""The JVM decoder and the flow's rules (decode.decode_records) on real Spark, without Kafka:
rows shaped like Spark's Kafka source's are made in the test."""

from __future__ import annotations

from datetime import UTC, date, datetime, timedelta
from typing import Any

import pytest
from flows import ORDERS, PAGE_VIEWS
from flows.page_view_pb2 import PageView
from pyspark.sql.pandas.types import to_arrow_schema

from tidelake.protos.call_pb2 import CallEvent
from tidelake.streaming.calls.call_events import CALL_EVENTS
from tidelake.streaming.delta.commit import same_column_type
from tidelake.streaming.delta.write import good_rows
from tidelake.streaming.flow.spec import FlowSpec
from tidelake.streaming.flow.table_schema import table_schema
from tidelake.streaming.records.decode import decode_records

NOW = datetime(2026, 11, 23, 12, 0, tzinfo=UTC)
NOW_MS = int(NOW.timestamp() * 1000)
KAFKA_SCHEMA = (
    "key binary, value binary, topic string, partition int, offset long, timestamp timestamp"
)


def call(**changes: Any) -> CallEvent:
    fields: dict[str, Any] = {
        "call_sid": "CA" + "a" * 32,
        "account_sid": "AC" + "b" * 32,
        "duration": 42,
        "call_state": CallEvent.completed,
        "region": CallEvent.de1,
        "event_time": NOW_MS - 60_000,
    }
    fields.update(changes)
    return CallEvent(**fields)


def decode(
    spark: Any, flow: FlowSpec, values: list[bytes | None], kafka_time: datetime = NOW
) -> list[dict[str, Any]]:
    rows = [
        (b"k", value, flow.topic, 0, offset, kafka_time.replace(tzinfo=None))
        for offset, value in enumerate(values)
    ]
    records = spark.createDataFrame(rows, KAFKA_SCHEMA)
    return [r.asDict() for r in decode_records(records, flow).orderBy("kafka_offset").collect()]


@pytest.mark.parametrize("flow", [CALL_EVENTS, PAGE_VIEWS, ORDERS], ids=lambda f: f.name)
def test_decoded_rows_have_exactly_the_table_schema(spark: Any, flow: FlowSpec) -> None:
    records = spark.createDataFrame([], KAFKA_SCHEMA)
    decoded = to_arrow_schema(good_rows(decode_records(records, flow), flow).schema, timezone="UTC")
    assert decoded.names == table_schema(flow).names
    for column, table_column in zip(decoded, table_schema(flow), strict=True):
        assert same_column_type(column.type, table_column.type), column.name


def test_a_call_event_decodes_to_typed_columns(spark: Any) -> None:
    (row,) = decode(spark, CALL_EVENTS, [call().SerializeToString()])
    assert row["_error"] is None
    assert row["call_sid"] == "CA" + "a" * 32
    assert (row["duration"], row["call_state"], row["region"]) == (42, "completed", "de1")
    assert row["event_time"] == (NOW - timedelta(minutes=1)).replace(tzinfo=None)
    assert row["date"] == date(2026, 11, 23)
    assert (row["kafka_topic"], row["kafka_partition"], row["kafka_offset"]) == (
        "call-events",
        0,
        0,
    )
    # the raw bytes are for the quarantine only; a good row does not carry them on
    assert (row["_key"], row["_value"]) == (None, None)


def test_page_views_convert_seconds_and_honour_presence(spark: Any) -> None:
    seconds = NOW_MS // 1000 - 30
    sent = PageView(view_id="v1", user="u", viewed_at_s=seconds, bounced=True, load_ms=1.5)
    with_referrer = PageView(view_id="v2", user="u", viewed_at_s=seconds, referrer="")
    first, second = decode(
        spark, PAGE_VIEWS, [sent.SerializeToString(), with_referrer.SerializeToString()]
    )
    assert first["viewed_at_s"] == datetime.fromtimestamp(seconds, UTC).replace(tzinfo=None)
    assert (first["bounced"], first["load_ms"], first["device"]) == (
        True,
        1.5,
        "DEVICE_UNSPECIFIED",
    )
    assert first["referrer"] is None  # optional and not sent: null, not ""
    assert second["referrer"] == ""  # optional and sent empty


POISON = [
    (b"\xff\xff\xff", "undecodable: "),
    (bytes([(5 << 3) | 7]) + b"\x00" * 8, "undecodable: invalid wire type 7"),
    (b"", "empty value"),
    (None, "empty value"),
    (call(call_sid="").SerializeToString(), "call_sid: is required"),
    (call(account_sid="").SerializeToString(), "account_sid: is required"),
    (call(call_state=0).SerializeToString(), "call_state: is required"),
    (call(region=0).SerializeToString(), "region: is required"),
    (call(event_time=0).SerializeToString(), "event_time: is required"),
    (
        call(call_state=7).SerializeToString(),
        "call_state: unknown value 7; one of [completed, failed]",
    ),
    (call(region=99).SerializeToString(), "region: unknown value 99; one of [us1, us2, de1]"),
    (call(call_sid="CA123").SerializeToString(), "call_sid: does not match ^CA[0-9a-f]{32}$"),
    (
        call(duration=4_000_000_000).SerializeToString(),
        "duration: 4000000000 is outside [0, 86400]",
    ),
    (
        call(event_time=2**64 - 1).SerializeToString(),
        "event_time out of range: 18446744073709551615",
    ),
    (call(event_time=NOW_MS + 2 * 3_600_000).SerializeToString(), "event_time ahead of the Kafka"),
    (
        call(event_time=NOW_MS - 3 * 86_400_000).SerializeToString(),
        "too late: arrived after 2026-11-20",
    ),
]


@pytest.mark.parametrize(("value", "reason"), POISON, ids=[r for _, r in POISON])
def test_records_that_break_the_contract_are_refused_with_their_reason(
    spark: Any, value: bytes | None, reason: str
) -> None:
    (row,) = decode(spark, CALL_EVENTS, [value])
    assert row["_error"] is not None and row["_error"].startswith(reason)
    assert (row["_key"], row["_value"]) == (b"k", value)
    assert row["date"] == date(2026, 11, 23)  # a refused record is dated by its Kafka time
