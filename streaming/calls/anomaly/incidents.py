"""What goes wrong in a stream of calls: an incident of one kind, for one account or region,
between two times. The model is evaluated against injected incidents (training.py), and the demo
producer injects them into its events (demo_events.with_incidents)."""

from __future__ import annotations

from dataclasses import dataclass
from typing import Literal

from tidelake.protos.call_pb2 import CallEvent

IncidentKind = Literal["failure_spike", "volume_drop", "duration_shift"]
INCIDENT_KINDS: tuple[IncidentKind, ...] = ("failure_spike", "volume_drop", "duration_shift")


@dataclass(frozen=True)
class Incident:
    """Something going wrong for one account or region between start_ms and end_ms.

    failure_spike: half the calls of `key` fail; volume_drop: 80% of the calls of `key` never
    happen; duration_shift: calls of `key` last 3 times as long. `key` is an account_sid or a
    region name (us1, us2, de1).
    """

    kind: IncidentKind
    key: str
    start_ms: int
    end_ms: int

    def __post_init__(self) -> None:
        if self.kind not in INCIDENT_KINDS:
            raise ValueError(f"incident kind must be one of {INCIDENT_KINDS}, got {self.kind!r}")
        if self.end_ms <= self.start_ms:
            raise ValueError("an incident must end after it starts")

    @property
    def metric(self) -> str:
        """The anomaly metric this incident shows up in."""
        return {"failure_spike": "failure_rate", "volume_drop": "volume"}.get(
            self.kind, "log_duration"
        )

    def touches(self, event: CallEvent) -> bool:
        key = (
            event.account_sid if self.key.startswith("AC") else CallEvent.Region.Name(event.region)
        )
        return key == self.key and self.start_ms <= event.event_time < self.end_ms
