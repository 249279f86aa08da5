"""An append use case on call_events for the tests, in a module of its own so that a
`tidelake stream failed_calls` process finds it (TIDELAKE_USE_CASE_MODULES)."""

from pyspark.sql import DataFrame
from pyspark.sql import functions as F

from tidelake.streaming.usecase.spec import Append, FlowTable, UseCaseSpec


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

USE_CASES = [FAILED_CALLS]
