"""An append use case on call_events for the tests, in a module of its own so that a
`tidelake stream failed_calls` process finds it (TIDELAKE_USE_CASE_MODULES), and a Daily one
that reads its table by day."""

from pyspark.sql import DataFrame
from pyspark.sql import functions as F

from tidelake.streaming.usecase.spec import Append, Daily, FlowTable, UseCaseSpec, UseCaseTable


def failed_calls(call_events: DataFrame) -> DataFrame:
    return call_events.where(F.col("call_state") == "failed").select(
        "call_sid", "account_sid", "event_timestamp"
    )


FAILED_CALLS = UseCaseSpec(
    name="failed_calls",
    inputs={"call_events": FlowTable("call_events")},
    function=failed_calls,
    output=Append(),
)


def failed_by_account(failed_calls: DataFrame) -> DataFrame:
    return failed_calls.groupBy("account_sid").agg(F.count(F.lit(1)).alias("failed"))


FAILED_BY_ACCOUNT = UseCaseSpec(
    name="failed_by_account",
    inputs={"failed_calls": UseCaseTable("failed_calls")},
    function=failed_by_account,
    output=Daily(),
)

USE_CASES = [FAILED_CALLS, FAILED_BY_ACCOUNT]
