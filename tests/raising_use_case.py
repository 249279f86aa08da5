"""A team's use case module (TIDELAKE_USE_CASE_MODULES) whose function raises when its query is
planned: what its run, its supervisor and its checks show."""

from typing import Any

from tidelake.streaming.usecase.spec import Append, FlowTable, UseCaseSpec


def reads_a_missing_column(call_events: Any) -> Any:
    return call_events.select("no_such_column")


USE_CASES = [
    UseCaseSpec(
        name="raising",
        inputs={"call_events": FlowTable("call_events")},
        function=reads_a_missing_column,
        output=Append(),
    )
]
