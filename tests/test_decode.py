"""ProtobufDecoder on real serialized CallEvent and PageView messages."""

from __future__ import annotations

import base64
import dataclasses
import json
import pickle
import subprocess
import sys
import time
import uuid
from dataclasses import dataclass
from datetime import UTC, date, datetime, timedelta

import pyarrow as pa
import pytest
from flows import PAGE_VIEWS
from flows.page_view_pb2 import PageView
from google.protobuf import descriptor_pb2, descriptor_pool, message_factory
from google.protobuf.descriptor_pb2 import FieldDescriptorProto as F
from google.protobuf.message import Message

from tidelake.protos.call_pb2 import CallEvent
from tidelake.streaming.decode import ProtobufDecoder
from tidelake.streaming.flow_spec import ENGINE_COLUMNS, FlowSpec
from tidelake.streaming.flows import CALL_EVENTS

UTC_US = pa.timestamp("us", tz="UTC")
EVENT_MS = 1_717_243_200_123  # 2024-06-01T12:00:00.123Z
KAFKA_MS = 1_717_287_600_000  # 2024-06-02T00:20:00Z: the next day, within the lateness
EVENT_DAY = date(2024, 6, 1)
KAFKA_DAY = date(2024, 6, 2)


@dataclass
class FakeRecord:
    """What the decoder reads of a confluent_kafka.Message."""

    value_: bytes | None
    offset_: int = 0
    key_: bytes | None = b"key"
    timestamp_ms: int = KAFKA_MS
    timestamp_type: int = 1

    def key(self) -> bytes | None:
        return self.key_

    def value(self) -> bytes | None:
        return self.value_

    def offset(self) -> int:
        return self.offset_

    def timestamp(self) -> tuple[int, int]:
        return (self.timestamp_type, self.timestamp_ms)


def records(*values: bytes | None, first_offset: int = 100) -> list[FakeRecord]:
    return [
        FakeRecord(v, offset_=first_offset + i, key_=f"k{i}".encode()) for i, v in enumerate(values)
    ]


def call(**fields) -> bytes:
    base = dict(
        call_sid="CA1",
        account_sid="AC1",
        duration=42,
        call_state=CallEvent.completed,
        region=CallEvent.de1,
        event_time=EVENT_MS,
    )
    return CallEvent(**{**base, **fields}).SerializeToString()


def view(**fields) -> bytes:
    base = dict(
        view_id="PV1",
        user="user-1",
        url="https://example.test/docs",
        viewed_at_s=EVENT_MS // 1000,
        bounced=True,
        load_ms=123.5,
        device=PageView.MOBILE,
    )
    return PageView(**{**base, **fields}).SerializeToString()


@pytest.fixture(scope="module")
def calls() -> ProtobufDecoder:
    return ProtobufDecoder.for_flow(CALL_EVENTS)


@pytest.fixture(scope="module")
def views() -> ProtobufDecoder:
    return ProtobufDecoder.for_flow(PAGE_VIEWS)


TAIL = [
    pa.field("date", pa.date32()),
    pa.field("kafka_topic", pa.string()),
    pa.field("kafka_partition", pa.int32()),
    pa.field("kafka_offset", pa.int64()),
    pa.field("kafka_timestamp", UTC_US),
    pa.field("ingest_time", UTC_US),
    pa.field("_error", pa.string()),
    pa.field("_key", pa.binary()),
    pa.field("_value", pa.binary()),
]


def test_call_event_schema_is_exact_and_all_nullable(calls):
    expected = pa.schema(
        [
            pa.field("call_sid", pa.string()),
            pa.field("account_sid", pa.string()),
            pa.field("duration", pa.int64()),  # uint32: Delta has no unsigned types
            pa.field("call_state", pa.string()),
            pa.field("region", pa.string()),
            pa.field("event_time", UTC_US),
            *TAIL,
        ]
    )
    assert calls.schema.equals(expected, check_metadata=True)
    assert all(f.nullable for f in calls.schema)
    batch = calls.decode("t", 0, records(call()))
    assert batch.schema.equals(expected)


def test_page_view_schema_is_exact_and_all_nullable(views):
    expected = pa.schema(
        [
            pa.field("view_id", pa.string()),
            pa.field("user", pa.string()),
            pa.field("url", pa.string()),
            pa.field("viewed_at_s", UTC_US),
            pa.field("bounced", pa.bool_()),
            pa.field("load_ms", pa.float64()),
            pa.field("device", pa.string()),
            *TAIL,
        ]
    )
    assert views.schema.equals(expected, check_metadata=True)
    assert all(f.nullable for f in views.schema)


def test_call_events_decode_to_typed_columns(calls):
    before_us = time.time_ns() // 1000
    batch = calls.decode(
        "call-events",
        3,
        records(call(), call(call_sid="CA2", call_state=CallEvent.failed, region=CallEvent.us2)),
    )
    after_us = time.time_ns() // 1000
    rows = batch.to_pylist()
    event_time = datetime(2024, 6, 1, 12, 0, 0, 123_000, tzinfo=UTC)
    kafka_time = datetime(2024, 6, 2, 0, 20, tzinfo=UTC)
    for row in rows:
        ingest_us = int(row.pop("ingest_time").timestamp() * 1_000_000)
        assert before_us - 1000 <= ingest_us <= after_us + 1000
    assert rows == [
        {
            "call_sid": "CA1",
            "account_sid": "AC1",
            "duration": 42,
            "call_state": "completed",
            "region": "de1",
            "event_time": event_time,
            "date": EVENT_DAY,  # from the event time, not the Kafka timestamp
            "kafka_topic": "call-events",
            "kafka_partition": 3,
            "kafka_offset": 100,
            "kafka_timestamp": kafka_time,
            "_error": None,
            "_key": None,
            "_value": None,
        },
        {
            "call_sid": "CA2",
            "account_sid": "AC1",
            "duration": 42,
            "call_state": "failed",
            "region": "us2",
            "event_time": event_time,
            "date": EVENT_DAY,
            "kafka_topic": "call-events",
            "kafka_partition": 3,
            "kafka_offset": 101,
            "kafka_timestamp": kafka_time,
            "_error": None,
            "_key": None,
            "_value": None,
        },
    ]


def test_page_views_decode_seconds_bools_doubles_and_enums(views):
    batch = views.decode("page-views", 1, records(view(), view(view_id="PV2", bounced=False)))
    assert batch.column("viewed_at_s").to_pylist() == [datetime(2024, 6, 1, 12, tzinfo=UTC)] * 2
    assert batch.column("viewed_at_s").cast(pa.int64()).to_pylist() == [1_717_243_200_000_000] * 2
    assert batch.column("bounced").to_pylist() == [True, False]
    assert batch.column("load_ms").to_pylist() == [123.5, 123.5]
    assert batch.column("device").to_pylist() == ["MOBILE", "MOBILE"]
    assert batch.column("date").to_pylist() == [EVENT_DAY] * 2
    assert batch.column("_error").null_count == 2


def test_event_time_units_are_converted_to_microseconds():
    # CallEvent's uint64 event_time, declared as s, ms or us
    raw = {"s": 1_717_243_200, "ms": 1_717_243_200_123, "us": 1_717_243_200_123_456}
    for unit, value in raw.items():
        decoder = ProtobufDecoder.for_flow(dataclasses.replace(CALL_EVENTS, event_time_unit=unit))
        batch = decoder.decode("t", 0, records(call(event_time=value)))
        micros = batch.column("event_time").cast(pa.int64())[0].as_py()
        assert micros == value * {"s": 1_000_000, "ms": 1000, "us": 1}[unit], unit
        assert batch.column("_error")[0].as_py() is None


def test_enum_values_are_names_and_unknown_numbers_become_null(calls, views):
    batch = calls.decode(
        "t", 0, records(call(region=CallEvent.us1), call(region=42), call(call_state=0))
    )
    assert batch.column("region").to_pylist() == ["us1", None, "de1"]
    assert batch.column("call_state").to_pylist() == ["completed", "completed", "unknown_state"]
    # an unknown enum number is not a poison record: the row is kept
    assert batch.column("_error").null_count == 3
    batch = views.decode("t", 0, records(view(device=7), view(device=0)))
    assert batch.column("device").to_pylist() == [None, "DEVICE_UNSPECIFIED"]


@pytest.mark.parametrize(
    ("value", "error"),
    [
        (b"\x0a\xff\x01", "undecodable: DecodeError: "),
        (b"\xff\xff\xff\xff", "undecodable: DecodeError: "),
        (None, "empty value"),
        (call(call_sid=""), "missing call_sid"),
        (call(event_time=0), "missing event_time"),
        (call(account_sid=""), "missing account_sid"),
        (call(call_sid="", account_sid=""), "missing call_sid"),
        (b"", "missing call_sid"),  # an empty payload parses as an all-default message
        (call(event_time=2**62), f"event_time out of range: {2**62}"),
        (call(event_time=2**64 - 1), "event_time out of range: "),
        (call(event_time=7_258_118_400_000), "event_time out of range: 7258118400000"),  # 2200
    ],
    ids=[
        "truncated",
        "garbage",
        "tombstone",
        "no-call_sid",
        "no-event_time",
        "no-account_sid",
        "first-missing-wins",
        "empty-bytes",
        "time-2**62",
        "time-uint64-max",
        "time-year-2200",
    ],
)
def test_poison_records_get_an_error_and_keep_their_raw_bytes(calls, value, error):
    good = call(call_sid="CA-good")
    batch = calls.decode(
        "call-events",
        2,
        [FakeRecord(good, 7, b"good"), FakeRecord(value, 8, b"poison-key"), FakeRecord(good, 9)],
    )
    rows = batch.to_pylist()
    poison = rows[1]
    assert poison["_error"].startswith(error)
    if not error.endswith(": "):
        assert poison["_error"] == error
    assert poison["_key"] == b"poison-key"
    assert poison["_value"] == value
    assert poison["date"] == KAFKA_DAY  # a poison row is dated by its Kafka timestamp
    assert poison["kafka_offset"] == 8
    assert poison["kafka_partition"] == 2
    for row in (rows[0], rows[2]):
        assert (row["_error"], row["_key"], row["_value"]) == (None, None, None)
        assert row["date"] == EVENT_DAY and row["call_sid"] == "CA-good"


def test_page_view_poison_kinds(views):
    batch = views.decode(
        "t",
        0,
        records(view(user=""), view(viewed_at_s=0), view(viewed_at_s=2**40), view(), None),
    )
    assert batch.column("_error").to_pylist() == [
        "missing user",
        "missing viewed_at_s",
        f"viewed_at_s out of range: {2**40}",
        None,
        "empty value",
    ]


def test_missing_kafka_timestamp_dates_poison_rows_today(calls):
    before = datetime.now(UTC)
    batch = calls.decode("t", 0, [FakeRecord(None, timestamp_ms=-1, timestamp_type=0)])
    row = batch.to_pylist()[0]
    assert row["_error"] == "empty value"
    assert before - timedelta(seconds=5) <= row["kafka_timestamp"] <= datetime.now(UTC)
    assert row["date"] == row["kafka_timestamp"].date()


def test_an_empty_batch_has_the_schema_and_no_rows(calls):
    batch = calls.decode("t", 0, [])
    assert batch.num_rows == 0
    assert batch.schema.equals(calls.schema)


def _without_ingest_time(batch: pa.RecordBatch) -> pa.Table:
    table = pa.Table.from_batches([batch])
    return table.drop_columns(["ingest_time"])


MIXED = [call(), call(call_sid=""), b"\x0a\xff", None, call(region=9), call(event_time=2**62)]


@pytest.mark.parametrize("flow", [CALL_EVENTS, PAGE_VIEWS], ids=lambda f: f.name)
def test_json_round_trip_gives_the_same_decoder_and_output(flow):
    decoder = ProtobufDecoder.for_flow(flow)
    text = decoder.to_json()
    assert json.loads(text)["message_name"] == decoder.message_name
    again = ProtobufDecoder.from_json(text)
    assert again == decoder
    assert again.to_json() == text
    assert again.schema.equals(decoder.schema)
    values = MIXED if flow is CALL_EVENTS else [view(), view(user=""), b"\xff", None]
    expected = _without_ingest_time(decoder.decode("t", 1, records(*values)))
    assert _without_ingest_time(again.decode("t", 1, records(*values))).equals(expected)


def test_json_round_trip_after_use():
    decoder = ProtobufDecoder.for_flow(CALL_EVENTS)
    decoder.decode("t", 0, records(call()))  # populates the cached properties, schema included
    assert ProtobufDecoder.from_json(decoder.to_json()) == decoder


def test_pickle_round_trip_after_use_gives_the_same_output(calls):
    expected = _without_ingest_time(calls.decode("t", 1, records(*MIXED)))  # caches populated
    blob = pickle.dumps(calls)
    assert b"_descriptor" not in blob and b"_message_class" not in blob
    again = pickle.loads(blob)
    assert again == calls
    assert _without_ingest_time(again.decode("t", 1, records(*MIXED))).equals(expected)


def test_decoder_json_works_where_the_flow_module_cannot_be_imported(tmp_path):
    """Executors decode any flow from the JSON alone, without importing the flow's module."""
    script = """
import base64, json, sys
from tidelake.streaming.decode import ProtobufDecoder
assert "flows" not in sys.modules
doc = json.loads(sys.stdin.read())
class R:
    def __init__(self, v): self.v = v
    def key(self): return b"k"
    def value(self): return self.v
    def offset(self): return 5
    def timestamp(self): return (0, -1)
decoder = ProtobufDecoder.from_json(doc["decoder"])
batch = decoder.decode("t", 0, [R(base64.b64decode(doc["value"]))])
print(json.dumps(batch.select(["view_id", "device", "_error"]).to_pylist()))
try:
    import flows  # noqa: F401
    print("flows importable")
except ImportError:
    pass
"""
    doc = {
        "decoder": ProtobufDecoder.for_flow(PAGE_VIEWS).to_json(),
        "value": base64.b64encode(view()).decode(),
    }
    done = subprocess.run(
        [sys.executable, "-c", script],
        input=json.dumps(doc),
        capture_output=True,
        text=True,
        timeout=60,
        cwd=tmp_path,
        check=False,
    )
    assert done.returncode == 0, done.stderr
    assert json.loads(done.stdout.splitlines()[0]) == [
        {"view_id": "PV1", "device": "MOBILE", "_error": None}
    ]
    assert "flows importable" not in done.stdout


def test_a_required_enum_left_at_its_default_is_missing():
    flow = dataclasses.replace(CALL_EVENTS, required_fields=("account_sid", "call_state"))
    batch = ProtobufDecoder.for_flow(flow).decode("t", 0, records(call(call_state=0)))
    assert batch.column("_error").to_pylist() == ["missing call_state"]


def _counter_message() -> type[Message]:
    """A flow message with a uint64 counter besides its uint64 event time."""
    package = f"tidelake.testing.dyn{uuid.uuid4().hex[:10]}"
    file_proto = descriptor_pb2.FileDescriptorProto(
        name=f"{package.replace('.', '/')}.proto", package=package, syntax="proto3"
    )
    event = file_proto.message_type.add(name="Counter")
    for number, (name, type_) in enumerate(
        [("id", F.TYPE_STRING), ("at", F.TYPE_UINT64), ("bytes_sent", F.TYPE_UINT64)], start=1
    ):
        event.field.add(name=name, number=number, type=type_, label=F.LABEL_OPTIONAL)
    pool = descriptor_pool.DescriptorPool()
    pool.Add(file_proto)
    return message_factory.GetMessageClass(pool.FindMessageTypeByName(f"{package}.Counter"))


def test_a_uint64_value_beyond_int64_is_quarantined_not_fatal():
    message = _counter_message()
    flow = FlowSpec(
        name="counters", message=message, topic="counters", key_field="id", event_time_field="at"
    )
    decoder = ProtobufDecoder.for_flow(flow)
    ok = message(id="a", at=EVENT_MS, bytes_sent=5).SerializeToString()
    huge = message(id="b", at=EVENT_MS, bytes_sent=2**64 - 1).SerializeToString()
    batch = decoder.decode("t", 0, records(ok, huge))
    assert batch.column("bytes_sent")[0].as_py() == 5
    assert batch.column("_error")[0].as_py() is None
    assert batch.column("_error")[1].as_py() is not None


@pytest.mark.parametrize("flow", [CALL_EVENTS, PAGE_VIEWS])
def test_the_columns_the_decoder_adds_are_the_reserved_engine_columns(flow):
    added = set(ProtobufDecoder.for_flow(flow).schema.names) - {
        f.name for f in flow.message.DESCRIPTOR.fields
    }
    assert added == {flow.partition_column, *ENGINE_COLUMNS}


@pytest.mark.parametrize(
    ("arrival", "error"),
    [
        (datetime(2024, 6, 2, 1, 59, tzinfo=UTC), None),  # June 1 closes at 02:00 on June 2
        (
            datetime(2024, 6, 2, 2, 0, 0, 1000, tzinfo=UTC),
            "too late: arrived after 2024-06-01 closed",
        ),
        (datetime(2024, 6, 1, 11, 0, 1, tzinfo=UTC), None),  # event time 59 min ahead: skew
        (datetime(2024, 6, 1, 10, 59, tzinfo=UTC), "event_time ahead of the Kafka timestamp"),
    ],
)
def test_arrival_outside_the_dates_window_is_quarantined(
    calls: ProtobufDecoder, arrival: datetime, error: str | None
) -> None:
    record = FakeRecord(call(), timestamp_ms=int(arrival.timestamp() * 1000))
    (row,) = calls.decode("call-events", 0, [record]).to_pylist()
    assert row["_error"] == error
