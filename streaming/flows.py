"""The declared flows. Adding an event type = a .proto in protos/ plus one FlowSpec here."""

from __future__ import annotations

from datetime import timedelta

from tidelake.protos.call_pb2 import CallEvent
from tidelake.streaming import demo_events
from tidelake.streaming.flow_spec import FlowSpec

CALL_EVENTS = FlowSpec(
    name="call_events",
    message=CallEvent,
    topic="call-events",
    key_field="call_sid",
    event_time_field="event_time",
    event_time_unit="ms",
    required_fields=("account_sid",),
    topic_partitions=4,
    allowed_lateness=timedelta(hours=2),
    description="Voice call events from the ingest service, one row per call state change.",
    owners=("team:voice-insights",),
    demo_event=demo_events.call_event,
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
