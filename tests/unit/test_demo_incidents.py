"""The demo incidents: each event is changed by the incidents under way at its time, exactly as
if it were held against the whole schedule."""

from __future__ import annotations

import random

from tidelake.streaming.calls.demo_events import (
    call_event,
    incident_schedule,
    incidents_every,
    with_incidents,
)

HOUR_MS = 3_600_000


def test_only_the_incidents_under_way_are_asked_and_the_events_are_the_same() -> None:
    start_ms, end_ms = 1_800_000_000_000, 1_800_000_000_000 + 12 * HOUR_MS
    for every_s, length_s in ((60.0, 300.0), (600.0, 60.0), (3600.0, 3600.0)):
        schedule = incident_schedule(start_ms, end_ms, every_s, length_s)
        change = incidents_every(start_ms, end_ms, every_s, length_s)
        events = random.Random(1)
        changed = dropped = 0
        for n in range(2000):
            event_ms = start_ms + events.randrange(end_ms - start_ms)
            seed = random.Random(n).getrandbits(32)
            expected = with_incidents(
                call_event(random.Random(seed), event_ms), schedule, random.Random(seed + 1)
            )
            got = change(call_event(random.Random(seed), event_ms), random.Random(seed + 1))
            assert got == expected, (every_s, length_s, event_ms)
            dropped += got is None
            changed += got is not None and got != call_event(random.Random(seed), event_ms)
        assert changed > 0 and dropped > 0, (every_s, length_s)
