"""What the ingest service accepts: a CallEvent the stream will store, never one it would
quarantine, so that an acknowledged event is an event in the table.

Each problem names its field, for a google.rpc.BadRequest the client can act on.
"""

import re
from dataclasses import dataclass
from datetime import UTC, datetime, timedelta

from tidelake.protos.call_pb2 import CallEvent
from tidelake.streaming.flow_spec import FlowSpec
from tidelake.streaming.flows import (
    ACCOUNT_SID_PATTERN,
    CALL_EVENTS,
    CALL_SID_PATTERN,
    MAX_CALL_DURATION_S,
)

_CALL_SID = re.compile(CALL_SID_PATTERN)
_ACCOUNT_SID = re.compile(ACCOUNT_SID_PATTERN)
_DAY_MS = 86_400_000


@dataclass(frozen=True)
class FieldViolation:
    field: str
    description: str

    def __str__(self) -> str:
        return f"{self.field}: {self.description}"


def validate_call_event(
    event: CallEvent, now_ms: int, flow: FlowSpec = CALL_EVENTS
) -> list[FieldViolation]:
    """Every reason the event cannot be accepted now; empty if it can."""
    problems = [
        *_sid_problems("call_sid", event.call_sid, _CALL_SID, "CA"),
        *_sid_problems("account_sid", event.account_sid, _ACCOUNT_SID, "AC"),
    ]
    for name in ("call_state", "region"):
        enum = CallEvent.DESCRIPTOR.fields_by_name[name].enum_type
        value = getattr(event, name)
        known = [v.name for v in enum.values if v.number != 0]
        if value not in enum.values_by_number:
            problems.append(FieldViolation(name, f"unknown value {value}; one of {known}"))
        elif value == 0:
            problems.append(FieldViolation(name, f"is required: one of {known}"))
    if event.duration > MAX_CALL_DURATION_S:
        problems.append(FieldViolation("duration", f"{event.duration} s is longer than a day"))
    problems.extend(_event_time_problems(event.event_time, now_ms, flow))
    return problems


def call_sid_problems(call_sid: str) -> list[FieldViolation]:
    """Why call_sid is not a well-formed call sid; empty if it is."""
    return _sid_problems("call_sid", call_sid, _CALL_SID, "CA")


def _sid_problems(
    field: str, value: str, pattern: re.Pattern[str], prefix: str
) -> list[FieldViolation]:
    if not value:
        return [FieldViolation(field, "is required")]
    if not pattern.fullmatch(value):
        shape = f"{prefix} followed by 32 lowercase hex digits"
        return [FieldViolation(field, f"must be {shape}, got {value[:80]!r}")]
    return []


def _event_time_problems(event_time_ms: int, now_ms: int, flow: FlowSpec) -> list[FieldViolation]:
    if not event_time_ms:
        return [FieldViolation("event_time", "is required (epoch milliseconds, UTC)")]
    skew_ms = flow.max_clock_skew // timedelta(milliseconds=1)
    if event_time_ms > now_ms + skew_ms:
        return [
            FieldViolation(
                "event_time",
                f"{_iso(event_time_ms)} is more than {flow.max_clock_skew} ahead of the "
                f"service's clock ({_iso(now_ms)}); is it in seconds instead of milliseconds?",
            )
        ]
    closes_ms = (event_time_ms // _DAY_MS + 1) * _DAY_MS + flow.allowed_lateness // timedelta(
        milliseconds=1
    )
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


def _iso(ms: int) -> str:
    try:
        return datetime.fromtimestamp(ms / 1000, UTC).strftime("%Y-%m-%dT%H:%M:%SZ")
    except (OverflowError, ValueError, OSError):
        return f"{ms} ms since 1970 (beyond year 9999)"
