"""The flow of a soak with a short key life (`python -m soak --allowed-lateness`).

A deduplication key lives 2.5 times its flow's allowed lateness (streaming/records/dedup.py):
5 hours for CallEvent, so an hour's soak only sees the state fill. CallEvent under another name
with a lateness of minutes lets the state reach the size where keys expire as fast as they
arrive within the hour, and the soak measure what a full state costs. The platform imports this
module as a deployment's flow module (TIDELAKE_FLOW_MODULES), with the lateness in
LATENESS_ENV; the soak itself calls soak_flow.
"""

from __future__ import annotations

import os
from dataclasses import replace
from datetime import timedelta

from tidelake.streaming.calls.call_events import CALL_EVENTS
from tidelake.streaming.flow.spec import FlowSpec

LATENESS_ENV = "TIDELAKE_SOAK_LATENESS_S"
MODULE = "soak.flow"


def soak_flow(lateness: timedelta) -> FlowSpec:
    """CallEvent as the soak's own flow: its own topic and tables, `lateness` allowed, no
    ingest edge (the soak's producer writes to Kafka as it does for call_events)."""
    return replace(
        CALL_EVENTS,
        name="soak_call_events",
        topic="soak-call-events",
        allowed_lateness=lateness,
        ingest_edge=None,
        description=f"CallEvent with {lateness} of lateness, for a soak with a short key life.",
    )


FLOWS = (
    [soak_flow(timedelta(seconds=float(os.environ[LATENESS_ENV])))]
    if LATENESS_ENV in os.environ
    else []
)
