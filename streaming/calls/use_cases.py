"""CallEvent's use cases on the lake: each a declaration and one PySpark function.

- `account_activity` (upsert): per account its latest call (the greatest event time wins, ties
  by call_sid), so that an older event never overwrites a newer one, and its running totals;
- `calls_by_region_daily` (daily): per region and UTC day, calls, failed calls, the failed share
  and duration percentiles, made again whenever the day of call_events is.
"""

from __future__ import annotations

from typing import Any

from pyspark.sql import DataFrame
from pyspark.sql import functions as F

from tidelake.streaming.usecase.spec import Daily, FlowTable, Upsert, UseCaseSpec

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


def calls_by_region_daily(call_events: DataFrame) -> DataFrame:
    """Per region, the day's calls, failed calls, failed share and exact duration percentiles
    (linear interpolation between the two nearest durations)."""
    failed = (F.col("call_state") == FAILED).cast("long")
    duration = F.col("duration").cast("double")
    return call_events.groupBy("region").agg(
        F.count(F.lit(1)).alias("calls"),
        F.sum(failed).alias("failed_calls"),
        (F.sum(failed) / F.count(F.lit(1))).alias("failed_share"),
        F.percentile(duration, F.lit(0.5)).alias("duration_p50_s"),
        F.percentile(duration, F.lit(0.95)).alias("duration_p95_s"),
        F.percentile(duration, F.lit(0.99)).alias("duration_p99_s"),
    )


def calls_by_region_expectations() -> list[Any]:
    import great_expectations.expectations as gxe

    return [
        gxe.ExpectColumnValuesToBeUnique(column="region"),
        gxe.ExpectColumnValuesToNotBeNull(column="region"),
        gxe.ExpectColumnValuesToBeBetween(column="calls", min_value=1),
        gxe.ExpectColumnValuesToBeBetween(column="failed_share", min_value=0, max_value=1),
        gxe.ExpectColumnPairValuesAToBeGreaterThanB(
            column_A="duration_p99_s", column_B="duration_p50_s", or_equal=True
        ),
    ]


CALLS_BY_REGION_DAILY = UseCaseSpec(
    name="calls_by_region_daily",
    inputs={"call_events": FlowTable("call_events")},
    function=calls_by_region_daily,
    output=Daily(),
    description="Per region and UTC day: calls, failed calls, their share and call duration "
    "percentiles.",
    owners=("team:voice-insights",),
    columns={
        "region": "the calls' region",
        "calls": "calls that day",
        "failed_calls": "of which failed",
        "failed_share": "failed_calls / calls",
        "duration_p50_s": "median call duration, seconds",
        "duration_p95_s": "95th percentile of call duration, seconds",
        "duration_p99_s": "99th percentile of call duration, seconds",
        "date": "the UTC day of the calls",
    },
    expectations=calls_by_region_expectations,
)

USE_CASES = [ACCOUNT_ACTIVITY, CALLS_BY_REGION_DAILY]
