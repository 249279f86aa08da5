"""account_activity recomputed in pandas from call_events, and its table as stored: the upsert
table must equal the recomputation however its batches were replayed or killed."""

from typing import Any

import pandas as pd
from lake_readers import read_delta

from tidelake.streaming.calls.use_cases import ACCOUNT_ACTIVITY

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
    table = read_delta(settings.table_uri(ACCOUNT_ACTIVITY.table)).to_pandas()
    return table.set_index("account_sid").sort_index()


def activity_differences(settings: Any, calls: pd.DataFrame) -> dict[str, int]:
    """Columns of the stored table that differ from the recomputation, with the number of
    accounts that differ (empty: equal)."""
    stored, expected = stored_activity(settings), expected_activity(calls)
    if list(stored.index) != list(expected.index):
        return {"accounts": len(set(stored.index) ^ set(expected.index))}
    found = {c: int((stored[c] != expected[c]).sum()) for c in COMPARED}
    return {c: n for c, n in found.items() if n}
