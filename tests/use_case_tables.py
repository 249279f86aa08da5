"""account_activity and a day of calls_by_region_daily recomputed in pandas from call_events,
and their tables as stored: a use case's table must equal the recomputation however its batches
were replayed or killed, or its days made again."""

from datetime import date
from typing import Any

import pandas as pd
import pytest
from lake_readers import read_delta, read_delta_duckdb

from tidelake.streaming.calls.call_events import CALL_EVENTS
from tidelake.streaming.calls.use_cases import ACCOUNT_ACTIVITY, CALLS_BY_REGION_DAILY

COMPARED = ("calls", "failed_calls", "duration_s", "last_call_sid", "last_event_time")


def expected_activity(calls: pd.DataFrame) -> pd.DataFrame:
    """Per account the call with the greatest event time (ties by call_sid) and the totals."""
    latest = calls.sort_values(["event_time", "call_sid"]).groupby("account_sid").tail(1)
    totals = calls.assign(failed=calls["call_state"] == "failed").groupby("account_sid")
    out = pd.DataFrame(
        {
            "calls": totals.size(),
            "failed_calls": totals["failed"].sum(),
            "duration_s": totals["duration"].sum(),
        }
    )
    latest = latest.set_index("account_sid")
    out["last_call_sid"] = latest["call_sid"]
    out["last_event_time"] = latest["event_time"]
    return out.sort_index()


def stored_activity(settings: Any) -> pd.DataFrame:
    table = read_delta_duckdb(settings.table_uri(ACCOUNT_ACTIVITY.table)).to_pandas()
    return table.set_index("account_sid").sort_index()


def activity_differences(settings: Any, calls: pd.DataFrame) -> dict[str, int]:
    """Columns of the stored table that differ from the recomputation, with the number of
    accounts that differ (empty: equal)."""
    stored, expected = stored_activity(settings), expected_activity(calls)
    if list(stored.index) != list(expected.index):
        return {"accounts": len(set(stored.index) ^ set(expected.index))}
    found = {c: int((stored[c] != expected[c]).sum()) for c in COMPARED}
    return {c: n for c, n in found.items() if n}


PERCENTILES = {"duration_p50_s": 0.5, "duration_p95_s": 0.95, "duration_p99_s": 0.99}


def expected_day(settings: Any, day: str) -> pd.DataFrame:
    """calls_by_region_daily of a day recomputed in pandas from call_events read by delta-rs."""
    calls = read_delta(settings.table_uri(CALL_EVENTS.table)).to_pandas()
    calls = calls[calls["date"] == date.fromisoformat(day)]
    by_region = calls.assign(failed=calls["call_state"] == "failed").groupby("region")
    out = pd.DataFrame({"calls": by_region.size(), "failed_calls": by_region["failed"].sum()})
    out["failed_share"] = out["failed_calls"] / out["calls"]
    for column, q in PERCENTILES.items():
        out[column] = by_region["duration"].quantile(q)  # linear, as Spark's percentile
    return out.sort_index()


def stored_day(settings: Any, day: str, name: str = CALLS_BY_REGION_DAILY.table) -> pd.DataFrame:
    table = read_delta(settings.table_uri(name)).to_pandas()
    table = table[table["date"] == date.fromisoformat(day)]
    return table.drop(columns=["date"]).set_index("region").sort_index()


def assert_day_equals_recomputation(
    settings: Any, day: str, name: str = CALLS_BY_REGION_DAILY.table
) -> None:
    """Day `day` of the table `name` (calls_by_region_daily's function) equals its
    recomputation from call_events as it stands."""
    stored, expected = stored_day(settings, day, name), expected_day(settings, day)
    assert list(stored.index) == list(expected.index), day
    assert list(stored["calls"]) == list(expected["calls"]), day
    assert list(stored["failed_calls"]) == list(expected["failed_calls"]), day
    for column in ["failed_share", *PERCENTILES]:
        assert stored[column].to_numpy() == pytest.approx(expected[column].to_numpy()), column
