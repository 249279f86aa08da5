"""Realistic synthetic events for the demo producer and the benchmarks."""

from __future__ import annotations

import random

from tidelake.protos.call_pb2 import CallEvent

_ACCOUNTS = [f"AC{random.Random(i).getrandbits(128):032x}" for i in range(25)]
_REGIONS = [CallEvent.us1, CallEvent.us2, CallEvent.de1]
_REGION_WEIGHTS = [0.5, 0.3, 0.2]


def call_event(rng: random.Random, event_time_ms: int) -> CallEvent:
    """A call that ended at event_time_ms: a few accounts dominate, about 4% fail."""
    failed = rng.random() < 0.04
    return CallEvent(
        call_sid=f"CA{rng.getrandbits(128):032x}",
        account_sid=_ACCOUNTS[min(int(rng.paretovariate(1.2)) - 1, len(_ACCOUNTS) - 1)],
        duration=0 if failed else max(1, int(rng.lognormvariate(4.0, 1.0))),
        call_state=CallEvent.failed if failed else CallEvent.completed,
        region=rng.choices(_REGIONS, _REGION_WEIGHTS)[0],
        event_time=event_time_ms,
    )
