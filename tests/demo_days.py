"""Whole days of demo traffic written straight to a flow's table (delta-rs), for tests that need
history without streaming it."""

from __future__ import annotations

from datetime import UTC, datetime

import pandas as pd
import pyarrow as pa
from deltalake import write_deltalake

from tidelake.streaming.calls.call_events import CALL_EVENTS
from tidelake.streaming.calls.demo_events import scenario_events
from tidelake.streaming.settings import EngineSettings

CALLS_PER_MINUTE = 150


def write_days(settings: EngineSettings, days: list[str], seed: int = 1) -> None:
    """Demo traffic for whole days, written straight to the call_events table (delta-rs)."""
    rows = []
    for n, day in enumerate(days):
        start_ms = int(datetime.fromisoformat(day).replace(tzinfo=UTC).timestamp() * 1000)
        rows += scenario_events(seed + n, start_ms, 1440, CALLS_PER_MINUTE)
    frame = pd.DataFrame(rows)
    frame["event_time"] = pd.to_datetime(frame["event_time"], unit="ms", utc=True)
    frame["date"] = frame["event_time"].dt.date
    write_deltalake(
        settings.table_uri(CALL_EVENTS.table),
        pa.Table.from_pandas(frame, preserve_index=False),
        partition_by=["date"],
    )
