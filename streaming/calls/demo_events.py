"""Realistic synthetic events for the demo producer and the benchmarks, with incidents
(calls/anomaly/incidents.py) injected at known times so that anomaly detection can be measured."""

from __future__ import annotations

import bisect
import random
from collections.abc import Callable
from typing import Any

from tidelake.protos.call_pb2 import CallEvent
from tidelake.streaming.calls.anomaly.incidents import Incident, IncidentKind

ACCOUNTS = [f"AC{random.Random(i).getrandbits(128):032x}" for i in range(25)]
"""Demo accounts, busiest first (about 56%, 24%, 8% ... of calls)."""
_REGIONS = [CallEvent.us1, CallEvent.us2, CallEvent.de1]
_REGION_WEIGHTS = [0.5, 0.3, 0.2]
FAILURE_RATE = 0.04


def call_event(rng: random.Random, event_time_ms: int) -> CallEvent:
    """A call that ended at event_time_ms: a few accounts dominate, about 4% fail."""
    failed = rng.random() < FAILURE_RATE
    return CallEvent(
        call_sid=f"CA{rng.getrandbits(128):032x}",
        account_sid=ACCOUNTS[min(int(rng.paretovariate(1.2)) - 1, len(ACCOUNTS) - 1)],
        duration=0 if failed else max(1, int(rng.lognormvariate(4.0, 1.0))),
        call_state=CallEvent.failed if failed else CallEvent.completed,
        region=rng.choices(_REGIONS, _REGION_WEIGHTS)[0],
        event_time=event_time_ms,
    )


def with_incidents(
    event: CallEvent, incidents: list[Incident], rng: random.Random
) -> CallEvent | None:
    """The event as the incidents change it; None if an incident means it never happened."""
    for incident in incidents:
        if not incident.touches(event):
            continue
        if incident.kind == "volume_drop" and rng.random() < 0.8:
            return None
        if incident.kind == "failure_spike" and rng.random() < 0.5:
            event.call_state = CallEvent.failed
            event.duration = 0
        if incident.kind == "duration_shift" and event.duration:
            event.duration = min(event.duration * 3, 86_400)
    return event


def incident_schedule(
    start_ms: int, end_ms: int, every_s: float, length_s: float = 300
) -> list[Incident]:
    """An incident every `every_s` seconds from start_ms + every_s, `length_s` long, cycling
    through a failure spike on the busiest account, a volume drop in the busiest region and a
    duration shift on the second-busiest account."""
    plan: list[tuple[IncidentKind, str]] = [
        ("failure_spike", ACCOUNTS[0]),
        ("volume_drop", "us1"),
        ("duration_shift", ACCOUNTS[1]),
    ]
    incidents: list[Incident] = []
    at = start_ms + int(every_s * 1000)
    while at < end_ms:
        kind, key = plan[len(incidents) % len(plan)]
        incidents.append(Incident(kind, key, at, at + int(length_s * 1000)))
        at += int(every_s * 1000)
    return incidents


def scenario_events(
    seed: int,
    start_ms: int,
    minutes: int,
    calls_per_minute: float,
    incidents: list[Incident] | None = None,
) -> list[dict[str, Any]]:
    """Demo calls spread evenly over `minutes` from start_ms, with the incidents applied, as rows
    (event_time in ms, account_sid, region, call_state, duration) for a DataFrame."""
    rng = random.Random(seed)
    total = int(minutes * calls_per_minute)
    span_ms = minutes * 60_000
    rows = []
    for n in range(total):
        event = call_event(rng, start_ms + int((n + rng.random()) * span_ms / total))
        changed = with_incidents(event, incidents or [], rng)
        if changed is None:
            continue
        rows.append(
            {
                "event_time": changed.event_time,
                "account_sid": changed.account_sid,
                "region": CallEvent.Region.Name(changed.region),
                "call_state": CallEvent.CallState.Name(changed.call_state),
                "duration": changed.duration,
            }
        )
    return rows


def incidents_every(
    start_ms: int, end_ms: int, every_s: float, length_s: float
) -> Callable[[CallEvent, random.Random], CallEvent | None]:
    """The demo events' change for incident_schedule's incidents (CALL_EVENTS.demo_incidents).
    An event is held against the incidents under way at its time only (found by bisection):
    against all of a week's, one every minute, the producer made 70 events/s, not 25,000."""
    incidents = incident_schedule(start_ms, end_ms, every_s, length_s)
    starts = [incident.start_ms for incident in incidents]
    length_ms = int(length_s * 1000)

    def change(event: CallEvent, rng: random.Random) -> CallEvent | None:
        first = bisect.bisect_right(starts, event.event_time - length_ms)
        under_way = incidents[first : bisect.bisect_right(starts, event.event_time)]
        return with_incidents(event, under_way, rng)

    return change
