"""The call-events flow: CallEvent (protos/call.proto) from the ingest service into
`call_events`, with its contract, its daily expectations and its demo data."""

from __future__ import annotations

from datetime import timedelta
from typing import Any

from tidelake.protos.call_pb2 import CallEvent
from tidelake.streaming.calls import demo_events
from tidelake.streaming.flow.spec import FieldCheck, FlowSpec

CALL_SID_PATTERN = "^CA[0-9a-f]{32}$"
ACCOUNT_SID_PATTERN = "^AC[0-9a-f]{32}$"
MAX_CALL_DURATION_S = 86_400
"""Part of CallEvent's contract (field_checks below), which the ingest service, the stream and
the quality checks all apply."""


def call_event_expectations() -> list[Any]:
    """What every day of call_events must meet besides the contract (Great Expectations 1.x;
    the contract's own expectations are added by the quality suite)."""
    import great_expectations.expectations as gxe

    return [
        gxe.ExpectColumnValuesToBeUnique(column="call_sid"),
        gxe.ExpectColumnValuesToBeOfType(column="duration", type_="LongType"),
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
    demo_incidents=demo_events.incidents_every,
    ingest_edge="tidelake.platform.calls.ingest_edge",
    expectations=call_event_expectations,
)

FLOWS = [CALL_EVENTS]
