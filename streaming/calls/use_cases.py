"""CallEvent's use cases on the lake: each a declaration and one PySpark function.

- `account_activity` (upsert): per account its latest call (the greatest event time wins, ties
  by call_sid), so that an older event never overwrites a newer one, and its running totals.
"""

from __future__ import annotations

from typing import Any

from pyspark.sql import DataFrame
from pyspark.sql import functions as F

from tidelake.streaming.usecase.spec import FlowTable, Upsert, UseCaseSpec

FAILED = "failed"


def account_activity(call_events: DataFrame) -> DataFrame:
    """One row per call: the account's latest-call columns and its contribution to the totals
    (the engine keeps the newest row per account and adds the totals up)."""
    failed = (F.col("call_state") == FAILED).cast("long")
    return call_events.select(
        "account_sid",
        F.col("event_timestamp").alias("last_event_time"),
        F.col("call_sid").alias("last_call_sid"),
        F.col("call_state").alias("last_call_state"),
        F.col("region").alias("last_region"),
        F.lit(1).cast("long").alias("calls"),
        failed.alias("failed_calls"),
        F.col("duration").cast("long").alias("duration_s"),
    )


def account_activity_expectations() -> list[Any]:
    import great_expectations.expectations as gxe

    return [
        gxe.ExpectColumnValuesToBeUnique(column="account_sid"),
        gxe.ExpectColumnValuesToNotBeNull(column="last_call_sid"),
        gxe.ExpectColumnValuesToBeBetween(column="calls", min_value=1),
        gxe.ExpectColumnPairValuesAToBeGreaterThanB(
            column_A="calls", column_B="failed_calls", or_equal=True
        ),
    ]


ACCOUNT_ACTIVITY = UseCaseSpec(
    name="account_activity",
    inputs={"call_events": FlowTable("call_events")},
    function=account_activity,
    output=Upsert(
        key=("account_sid",),
        sequence_by="last_event_time",
        sums=("calls", "failed_calls", "duration_s"),
    ),
    description="Per account: its latest call and its running totals of calls, failed calls "
    "and seconds, updated as call_events lands.",
    owners=("team:voice-insights",),
    columns={
        "account_sid": "the account (key)",
        "last_event_time": "event time of the account's newest call, UTC",
        "last_call_sid": "the newest call",
        "last_call_state": "its state",
        "last_region": "its region",
        "calls": "calls of the account so far",
        "failed_calls": "of which failed",
        "duration_s": "seconds of all its calls",
    },
    expectations=account_activity_expectations,
)

USE_CASES = [ACCOUNT_ACTIVITY]
