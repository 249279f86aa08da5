"""The anomaly model's scoring and the demo incidents, on small pandas frames."""

from __future__ import annotations

import pandas as pd
import pytest

from tidelake.streaming.calls.anomaly.incidents import Incident
from tidelake.streaming.calls.anomaly.model import (
    ALL_HOURS,
    IncidentTruth,
    Thresholds,
    evaluate,
    inject_incidents,
    score_windows,
    with_silent_keys,
)
from tidelake.streaming.calls.demo_events import ACCOUNTS, incident_schedule


def window(key: tuple[str, str], minute: int, calls: int, failed: int = 0, shift: float = 0.0):
    completed = calls - failed
    mean = 4.0 + shift
    return {
        "window_start": pd.Timestamp("2026-11-18", tz="UTC") + pd.Timedelta(minutes=minute),
        "key_kind": key[0],
        "key": key[1],
        "calls": calls,
        "failed": failed,
        "completed": completed,
        "log_duration_sum": completed * mean,
        "log_duration_sq_sum": completed * (mean**2 + 1.0),
    }


BUSY = ("account", ACCOUNTS[0])
REGION = ("region", "us1")


def baselines_for(calls_per_minute: dict[tuple[str, str], float]) -> pd.DataFrame:
    return pd.DataFrame(
        [
            {
                "key_kind": kind,
                "key": key,
                "hour_of_week": ALL_HOURS,
                "expected_calls": rate,
                "calls_spread": 0.0,
                "failure_rate": 0.04,
                "log_duration_mean": 4.0,
                "log_duration_sd": 1.0,
            }
            for (kind, key), rate in calls_per_minute.items()
        ]
    )


def test_each_metric_alerts_only_when_the_effect_is_large_and_significant() -> None:
    baselines = baselines_for({BUSY: 100.0, REGION: 50.0, ("account", "ACquiet"): 1.0})
    windows = pd.DataFrame(
        [
            window(BUSY, 0, 100, failed=4),  # normal
            window(BUSY, 1, 100, failed=40),  # failure spike
            window(BUSY, 2, 100, failed=4, shift=1.1),  # 3x longer calls
            window(BUSY, 3, 130, failed=5),  # +30%: significant, but not 2x: no alert
            window(REGION, 0, 50, failed=2),
        ]
    )
    windows = with_silent_keys(windows, baselines, Thresholds())
    found = score_windows(windows, baselines)
    hits = {(r.key, r.window_start.minute, r.metric) for r in found.itertuples()}
    assert hits == {
        (BUSY[1], 1, "failure_rate"),
        (BUSY[1], 2, "log_duration"),
        ("us1", 1, "volume"),  # silent in minutes 1-3: a drop to zero
        ("us1", 2, "volume"),
        ("us1", 3, "volume"),
    }
    quiet = found[found["key"] == "ACquiet"]
    assert quiet.empty  # too small to judge its volume


def test_injected_incidents_change_the_sums_as_the_demo_producer_would() -> None:
    start = pd.Timestamp("2026-11-18", tz="UTC")
    start_ms = int(start.timestamp() * 1000)
    windows = pd.DataFrame([window(BUSY, m, 100, failed=4) for m in range(4)])
    spike = Incident("failure_spike", BUSY[1], start_ms + 60_000, start_ms + 180_000)
    changed = inject_incidents(windows, [spike], seed=1)
    assert changed["failed"].tolist()[0] == 4 and changed["failed"].tolist()[3] == 4
    assert all(40 <= f <= 60 for f in changed["failed"].tolist()[1:3])
    assert (changed["calls"] == 100).all()
    truth = IncidentTruth.of([spike], {BUSY[1]: "account"})
    found = score_windows(changed, baselines_for({BUSY: 100.0}))
    assert evaluate(found, changed, truth).recall == 1.0


def test_incident_kinds_are_checked() -> None:
    with pytest.raises(ValueError, match="incident kind"):
        Incident("meltdown", "us1", 0, 1)  # type: ignore[arg-type]
    with pytest.raises(ValueError, match="end after"):
        Incident("volume_drop", "us1", 5, 5)
    assert Incident("volume_drop", "us1", 0, 1).metric == "volume"


def test_incident_schedule_cycles_through_the_three_kinds() -> None:
    schedule = incident_schedule(0, 4 * 900_000, every_s=900, length_s=300)
    assert [(i.kind, i.key, i.start_ms, i.end_ms) for i in schedule] == [
        ("failure_spike", ACCOUNTS[0], 900_000, 1_200_000),
        ("volume_drop", "us1", 1_800_000, 2_100_000),
        ("duration_shift", ACCOUNTS[1], 2_700_000, 3_000_000),
    ]
