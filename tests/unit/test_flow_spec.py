"""FlowSpec validation: a flow that cannot work is refused, and the error names the field."""

from __future__ import annotations

import dataclasses
import re
import uuid
from datetime import UTC, date, datetime, timedelta

import pyarrow as pa
import pytest
from flows import PAGE_VIEWS
from flows.page_view_pb2 import PageView
from google.protobuf import descriptor_pb2, descriptor_pool, message_factory
from google.protobuf.descriptor_pb2 import FieldDescriptorProto as F
from google.protobuf.message import Message

from tidelake.protos.call_pb2 import CallEvent
from tidelake.streaming.calls.call_events import CALL_EVENTS
from tidelake.streaming.flow.declared import FLOWS, get_flow
from tidelake.streaming.flow.spec import FieldCheck, FlowSpec, FlowSpecError
from tidelake.streaming.flow.table_schema import table_schema


def message_class(fields: list[tuple]) -> type[Message]:
    """A proto3 message class built at run time from (name, TYPE_*[, LABEL_*]) tuples.

    TYPE_MESSAGE fields point at a nested `Inner { string text = 1; }`.
    """
    package = f"tidelake.testing.dyn{uuid.uuid4().hex[:10]}"
    file_proto = descriptor_pb2.FileDescriptorProto(
        name=f"{package.replace('.', '/')}.proto", package=package, syntax="proto3"
    )
    inner = file_proto.message_type.add(name="Inner")
    inner.field.add(name="text", number=1, type=F.TYPE_STRING, label=F.LABEL_OPTIONAL)
    event = file_proto.message_type.add(name="Event")
    for number, (name, type_, *label) in enumerate(fields, start=1):
        field = event.field.add(
            name=name, number=number, type=type_, label=label[0] if label else F.LABEL_OPTIONAL
        )
        if type_ == F.TYPE_MESSAGE:
            field.type_name = f".{package}.Inner"
    pool = descriptor_pool.DescriptorPool()
    pool.Add(file_proto)
    return message_factory.GetMessageClass(pool.FindMessageTypeByName(f"{package}.Event"))


def spec(**changes) -> FlowSpec:
    """CALL_EVENTS with some fields changed (FlowSpec validates in __post_init__)."""
    return dataclasses.replace(CALL_EVENTS, **changes)


def custom_flow(message: type[Message], **changes) -> FlowSpec:
    """A flow over a run-time message with fields `id` (key) and `at` (event time)."""
    fields = {"key_field": "id", "event_time_field": "at", **changes}
    return FlowSpec(name="events", message=message, topic="events", **fields)


def test_declared_flows_are_valid_and_keyed_by_name():
    assert FLOWS == {"call_events": CALL_EVENTS}
    assert CALL_EVENTS.table == "call_events"
    assert CALL_EVENTS.quarantine_table == "call_events_quarantine"
    assert PAGE_VIEWS.table == "page_views"


def test_unknown_key_field_is_named():
    with pytest.raises(FlowSpecError, match=r"call_events: key_field 'call_id' is not a") as e:
        spec(key_field="call_id")
    assert "tidelake.v1.CallEvent" in str(e.value)


def test_unknown_event_time_field_is_named():
    with pytest.raises(FlowSpecError, match=r"event_time_field 'ts' is not a field"):
        spec(event_time_field="ts")


def test_unknown_required_field_is_named():
    with pytest.raises(FlowSpecError, match=r"required field 'tenant' does not exist"):
        spec(required_fields=("account_sid", "tenant"))


@pytest.mark.parametrize(
    ("message", "field"),
    [
        (CallEvent, "call_sid"),  # string
        (CallEvent, "call_state"),  # enum
        (PageView, "load_ms"),  # double
        (PageView, "bounced"),  # bool
    ],
)
def test_non_integer_event_time_field_is_rejected(message, field):
    key = message.DESCRIPTOR.fields[0].name
    with pytest.raises(FlowSpecError, match=rf"event_time_field '{field}' must be an integer"):
        FlowSpec(
            name="events", message=message, topic="events", key_field=key, event_time_field=field
        )


@pytest.mark.parametrize(
    "time_type", [F.TYPE_INT32, F.TYPE_UINT64, F.TYPE_SINT64, F.TYPE_FIXED64, F.TYPE_SFIXED32]
)
def test_every_integer_type_is_accepted_as_event_time(time_type):
    message = message_class([("id", F.TYPE_STRING), ("at", time_type)])
    flow = custom_flow(message)
    assert flow.validity_fields == ("id", "at")


def test_repeated_and_message_fields_become_list_and_struct_columns():
    message = message_class(
        [
            ("id", F.TYPE_STRING),
            ("at", F.TYPE_INT64),
            ("tags", F.TYPE_STRING, F.LABEL_REPEATED),
            ("detail", F.TYPE_MESSAGE),
            ("details", F.TYPE_MESSAGE, F.LABEL_REPEATED),
        ]
    )
    schema = table_schema(custom_flow(message))
    assert schema.field("tags").type == pa.list_(pa.string())
    assert schema.field("detail").type == pa.struct([("text", pa.string())])
    assert schema.field("details").type == pa.list_(pa.struct([("text", pa.string())]))


@pytest.mark.parametrize(
    ("changes", "role", "bad"),
    [
        ({"key_field": "tags"}, "key_field", "tags"),
        ({"dedup_key": "detail"}, "dedup_key", "detail"),
        ({"field_checks": {"tags": FieldCheck(pattern="x")}}, "field_checks['tags']", "tags"),
    ],
)
def test_keys_and_checks_need_a_single_scalar_field(changes, role, bad):
    message = message_class(
        [
            ("id", F.TYPE_STRING),
            ("at", F.TYPE_INT64),
            ("tags", F.TYPE_STRING, F.LABEL_REPEATED),
            ("detail", F.TYPE_MESSAGE),
        ]
    )
    with pytest.raises(FlowSpecError, match=rf"{re.escape(role)} '{bad}' must be a single scalar"):
        custom_flow(message, **changes)


def test_a_message_that_contains_itself_is_rejected():
    package = f"tidelake.testing.dyn{uuid.uuid4().hex[:10]}"
    file_proto = descriptor_pb2.FileDescriptorProto(
        name=f"{package.replace('.', '/')}.proto", package=package, syntax="proto3"
    )
    event = file_proto.message_type.add(name="Event")
    event.field.add(name="id", number=1, type=F.TYPE_STRING, label=F.LABEL_OPTIONAL)
    event.field.add(name="at", number=2, type=F.TYPE_INT64, label=F.LABEL_OPTIONAL)
    event.field.add(
        name="parent",
        number=3,
        type=F.TYPE_MESSAGE,
        label=F.LABEL_OPTIONAL,
        type_name=f".{package}.Event",
    )
    pool = descriptor_pool.DescriptorPool()
    pool.Add(file_proto)
    message = message_factory.GetMessageClass(pool.FindMessageTypeByName(f"{package}.Event"))
    with pytest.raises(FlowSpecError, match=r"contains itself .*Event > .*Event"):
        custom_flow(message)


@pytest.mark.parametrize("topic", ["", "call events", "call/events", "événements", "t" * 250])
def test_bad_topic_name_is_rejected(topic):
    with pytest.raises(FlowSpecError, match=r"topic .* is not a valid Kafka topic"):
        spec(topic=topic)


@pytest.mark.parametrize("topic", ["call-events", "Call_Events.v2", "t" * 249])
def test_valid_topic_names_are_accepted(topic):
    assert spec(topic=topic).topic == topic


@pytest.mark.parametrize("topic", [".", ".."])
def test_dot_topic_names_are_rejected(topic):
    with pytest.raises(FlowSpecError, match="topic"):
        spec(topic=topic)


@pytest.mark.parametrize("name", ["CallEvents", "call-events", "1calls", "", "calls!"])
def test_bad_flow_name_is_rejected(name):
    with pytest.raises(FlowSpecError, match=re.escape(f"flow name {name!r} must match")):
        spec(name=name)


def test_bad_unit_and_partition_count_are_named():
    with pytest.raises(FlowSpecError, match="event_time_unit must be s, ms or us"):
        spec(event_time_unit="ns")
    with pytest.raises(FlowSpecError, match="topic_partitions must be >= 1"):
        spec(topic_partitions=0)


@pytest.mark.parametrize("column", ["call_sid", "event_time", "region"])
def test_partition_column_clashing_with_a_field_is_rejected(column):
    with pytest.raises(FlowSpecError, match=rf"partition_column '{column}' clashes with a field"):
        spec(partition_column=column)


def test_a_message_field_named_like_the_partition_column_is_rejected():
    message = message_class([("id", F.TYPE_STRING), ("at", F.TYPE_INT64), ("date", F.TYPE_STRING)])
    with pytest.raises(FlowSpecError, match=r"partition_column 'date' clashes with a field"):
        custom_flow(message)


@pytest.mark.parametrize(
    ("field", "partition_column", "problem"),
    [
        ("amount", "kafka_offset", "partition_column 'kafka_offset' clashes with a column the"),
        ("amount", "_error", "partition_column '_error' clashes with a column the engine adds"),
        ("ingest_time", "date", "field 'ingest_time' clashes with a column the engine adds"),
    ],
)
def test_names_clashing_with_decoder_columns_are_rejected(field, partition_column, problem):
    message = message_class([("id", F.TYPE_STRING), ("at", F.TYPE_INT64), (field, F.TYPE_INT64)])
    with pytest.raises(FlowSpecError, match=re.escape(problem)):
        custom_flow(message, partition_column=partition_column)


def test_validity_fields_keep_declaration_order_without_duplicates():
    assert CALL_EVENTS.validity_fields == (
        "call_sid",
        "event_time",
        "account_sid",
        "call_state",
        "region",
    )
    flow = spec(required_fields=("region", "call_sid", "account_sid", "region", "event_time"))
    assert flow.validity_fields == ("call_sid", "event_time", "region", "account_sid")
    assert PAGE_VIEWS.validity_fields == ("view_id", "viewed_at_s", "user")


def test_specs_compare_by_value_and_ignore_the_demo_factory():
    same = spec(demo_event=None)
    assert same == CALL_EVENTS
    assert spec(allowed_lateness=timedelta(hours=3)) != CALL_EVENTS


def test_get_flow_returns_the_declared_flow():
    assert get_flow("call_events") is CALL_EVENTS


def test_get_flow_error_lists_the_declared_flows():
    with pytest.raises(KeyError) as e:
        get_flow("page_views_typo")
    message = e.value.args[0]
    assert "unknown flow 'page_views_typo'" in message
    assert "declared flows: call_events" in message


def test_flow_modules_add_a_deployments_own_flows(tmp_path, monkeypatch):
    from tidelake.streaming.errors import ConfigError
    from tidelake.streaming.flow.declared import declared_flows
    from tidelake.streaming.settings import EngineSettings

    (tmp_path / "unit_team_flows.py").write_text(
        "import dataclasses\nfrom flows import PAGE_VIEWS\n"
        "FLOWS = [dataclasses.replace(PAGE_VIEWS, name='team_views')]\n"
    )
    (tmp_path / "no_flows.py").write_text("x = 1\n")
    (tmp_path / "same_name.py").write_text(
        "from tidelake.streaming.calls.call_events import CALL_EVENTS\nFLOWS = [CALL_EVENTS]\n"
    )
    monkeypatch.syspath_prepend(str(tmp_path))
    monkeypatch.setenv("TIDELAKE_FLOW_MODULES", " unit_team_flows , ")
    modules = EngineSettings().flow_modules
    assert modules == ["unit_team_flows"]
    assert set(declared_flows(modules)) == {"call_events", "team_views"}
    assert declared_flows() == FLOWS
    for module, problem in [
        ("missing_module", "cannot import missing_module"),
        ("no_flows", "no_flows must define FLOWS, a list of FlowSpec"),
        ("same_name", "declares flow 'call_events', which is already declared"),
    ]:
        with pytest.raises(ConfigError, match=f"TIDELAKE_FLOW_MODULES: .*{problem}"):
            declared_flows([module])


def test_a_date_closes_at_its_end_plus_the_allowed_lateness() -> None:
    day = date(2026, 11, 20)
    closes = datetime(2026, 11, 21, 2, tzinfo=UTC)
    assert CALL_EVENTS.closes_at(day) == closes
    noon_ms = int(datetime(2026, 11, 20, 12, tzinfo=UTC).timestamp() * 1000)
    assert CALL_EVENTS.closes_at_ms(noon_ms) == int(closes.timestamp() * 1000)
    last_ms = int(datetime(2026, 11, 20, 23, 59, 59, 999_000, tzinfo=UTC).timestamp() * 1000)
    assert CALL_EVENTS.closes_at_ms(last_ms) == int(closes.timestamp() * 1000)
    assert CALL_EVENTS.closes_at_ms(last_ms + 1) == int(closes.timestamp() * 1000) + 86_400_000
    before_1970 = -1  # 1969-12-31 23:59:59.999 closes at 1970-01-01 02:00
    assert CALL_EVENTS.closes_at_ms(before_1970) == 2 * 3_600_000


def test_the_open_dates_run_from_the_oldest_not_closed_to_the_clock_skew_ahead() -> None:
    def open_dates(hour: int, minute: int = 0) -> list[str]:
        at = datetime(2026, 11, 21, hour, minute, tzinfo=UTC)
        return [d.isoformat() for d in CALL_EVENTS.open_dates(at)]

    assert open_dates(1, 59) == ["2026-11-20", "2026-11-21"]  # the 20th closes at 02:00
    assert open_dates(2) == ["2026-11-21"]
    assert open_dates(23) == ["2026-11-21", "2026-11-22"]  # an hour of clock skew ahead
    assert CALL_EVENTS.oldest_open_date(datetime(2026, 11, 21, 2, tzinfo=UTC)) == date(2026, 11, 21)
    late_start = dataclasses.replace(CALL_EVENTS, first_date=date(2026, 11, 21))
    assert late_start.open_dates(datetime(2026, 11, 21, 1, tzinfo=UTC)) == [date(2026, 11, 21)]
