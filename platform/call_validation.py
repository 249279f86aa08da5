"""What the ingest service accepts: a CallEvent the stream will store, never one it would
quarantine, so that an acknowledged event is an event in the table.

Each problem names its field, for a google.rpc.BadRequest the client can act on.
"""

from datetime import UTC, datetime, timedelta
from functools import cache

from tidelake.protos.call_pb2 import CallEvent
from tidelake.streaming.flow_contract import FieldViolation, violations
from tidelake.streaming.flow_spec import FlowSpec
from tidelake.streaming.flows import CALL_EVENTS

_DAY_MS = 86_400_000


def validate_call_event(
    event: CallEvent, now_ms: int, flow: FlowSpec = CALL_EVENTS
) -> list[FieldViolation]:
    """Every reason the event cannot be accepted now; empty if it can: the flow's contract (the
    stream applies the same one, flow_contract) and the service's clock rules for event_time."""
    problems = violations(flow, event)
    if not any(p.field == flow.event_time_field for p in problems):
        problems.extend(_event_time_problems(event.event_time, now_ms, flow))
    return problems


def call_sid_problems(call_sid: str) -> list[FieldViolation]:
    """Why call_sid is not a well-formed call sid; empty if it is."""
    probe = CallEvent(call_sid=call_sid)
    return [p for p in violations(CALL_EVENTS, probe) if p.field == "call_sid"]


def _event_time_problems(event_time_ms: int, now_ms: int, flow: FlowSpec) -> list[FieldViolation]:
    if not event_time_ms:
        return [FieldViolation("event_time", "is required (epoch milliseconds, UTC)")]
    skew_ms, lateness_ms = _clock_rules_ms(flow)
    if event_time_ms > now_ms + skew_ms:
        return [
            FieldViolation(
                "event_time",
                f"{_iso(event_time_ms)} is more than {flow.max_clock_skew} ahead of the "
                f"service's clock ({_iso(now_ms)}); is it in seconds instead of milliseconds?",
            )
        ]
    closes_ms = (event_time_ms // _DAY_MS + 1) * _DAY_MS + lateness_ms
    if now_ms > closes_ms:
        day = _iso(event_time_ms)[:10]
        return [
            FieldViolation(
                "event_time",
                f"{_iso(event_time_ms)} is on {day}, which closed at {_iso(closes_ms)}: the "
                "table accepts no more events of that day",
            )
        ]
    return []


@cache
def _clock_rules_ms(flow: FlowSpec) -> tuple[int, int]:
    """The flow's clock skew and allowed lateness in milliseconds (worked out once a flow)."""
    one_ms = timedelta(milliseconds=1)
    return flow.max_clock_skew // one_ms, flow.allowed_lateness // one_ms


def _iso(ms: int) -> str:
    try:
        return datetime.fromtimestamp(ms / 1000, UTC).strftime("%Y-%m-%dT%H:%M:%SZ")
    except (OverflowError, ValueError, OSError):
        return f"{ms} ms since 1970 (beyond year 9999)"
