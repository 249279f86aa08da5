"""The declared flows. Adding an event type = a .proto in protos/ plus one FlowSpec here."""

from __future__ import annotations

from datetime import timedelta

from tidelake.protos.call_pb2 import CallEvent
from tidelake.streaming import demo_events
from tidelake.streaming.flow_spec import FieldCheck, FlowSpec

CALL_SID_PATTERN = "^CA[0-9a-f]{32}$"
ACCOUNT_SID_PATTERN = "^AC[0-9a-f]{32}$"
MAX_CALL_DURATION_S = 86_400
"""Part of CallEvent's contract (field_checks below), which the ingest service, the stream and
the quality checks all apply."""


def call_event_expectations() -> list:
    """What every day of call_events must meet besides the contract (Great Expectations 1.x;
    the contract's own expectations are added by the quality suite)."""
    import great_expectations.expectations as gxe

    return [
        gxe.ExpectColumnValuesToBeUnique(column="call_sid"),
        gxe.ExpectColumnValuesToBeOfType(column="duration", type_="int64"),
    ]


CALL_EVENTS = FlowSpec(
    name="call_events",
    message=CallEvent,
    topic="call-events",
    key_field="call_sid",
    event_time_field="event_time",
    event_time_unit="ms",
    required_fields=("account_sid", "call_state", "region"),
    field_checks={
        "call_sid": FieldCheck(pattern=CALL_SID_PATTERN),
        "account_sid": FieldCheck(pattern=ACCOUNT_SID_PATTERN),
        "duration": FieldCheck(min_value=0, max_value=MAX_CALL_DURATION_S),
    },
    topic_partitions=4,
    allowed_lateness=timedelta(hours=2),
    dedup_key="call_sid",
    description="Voice call events from the ingest service: one row per finished call.",
    owners=("team:voice-insights",),
    demo_event=demo_events.call_event,
    expectations=call_event_expectations,
)

FLOWS: dict[str, FlowSpec] = {flow.name: flow for flow in [CALL_EVENTS]}


def get_flow(name: str) -> FlowSpec:
    """The declared flow called name, or a KeyError that lists the known flows."""
    try:
        return FLOWS[name]
    except KeyError:
        raise KeyError(
            f"unknown flow {name!r}; declared flows: {', '.join(sorted(FLOWS))}"
        ) from None
