"""A use case declaration that cannot work is refused when the code location loads, naming the
use case and the problem."""

from __future__ import annotations

import re
from typing import Any

import pytest

from tidelake.streaming.calls.call_events import CALL_EVENTS
from tidelake.streaming.calls.use_cases import ACCOUNT_ACTIVITY
from tidelake.streaming.errors import ConfigError
from tidelake.streaming.usecase.declared import check_use_cases, declared_use_cases, input_flow
from tidelake.streaming.usecase.spec import (
    Append,
    Daily,
    FlowTable,
    Upsert,
    UseCaseError,
    UseCaseSpec,
    UseCaseTable,
)

FLOWS = {CALL_EVENTS.name: CALL_EVENTS}


def identity(**inputs: Any) -> Any:
    return next(iter(inputs.values()))


def spec(name: str, inputs: dict[str, Any], output: Any = None) -> UseCaseSpec:
    return UseCaseSpec(name=name, inputs=inputs, function=identity, output=output or Append())


def test_the_builtin_use_cases_are_declared_on_call_events() -> None:
    declared = declared_use_cases(FLOWS)
    assert {"account_activity", "calls_by_region_daily"} <= set(declared)
    kinds = {name: (u.kind, u.streaming) for name, u in declared.items()}
    assert kinds["account_activity"] == ("upsert", True)
    assert kinds["calls_by_region_daily"] == ("daily", False)
    assert all(input_flow(u, declared) == "call_events" for u in declared.values())
    assert declared_use_cases({}) == {}  # a deployment without call_events has none of them


@pytest.mark.parametrize(
    ("make", "message"),
    [
        (lambda: spec("Bad-Name", {"e": FlowTable("call_events")}), "must match"),
        (lambda: spec("no_inputs", {}), "no_inputs: it declares no inputs"),
        (
            lambda: spec("two", {"a": FlowTable("call_events"), "b": FlowTable("call_events")}),
            "two: it reads exactly one input, not 2",
        ),
        (
            lambda: spec("keyless", {"e": FlowTable("call_events")}, Upsert((), "event_time")),
            "keyless: Upsert needs a key",
        ),
        (
            lambda: spec(
                "clash", {"e": FlowTable("call_events")}, Upsert(("a",), "t", sums=("a",))
            ),
            "clash: key column(s) ['a'] cannot also be sequence_by or sums",
        ),
        (
            lambda: spec("not_a_table", {"e": "call_events"}),
            "not_a_table: input 'e' is 'call_events', not a FlowTable or UseCaseTable",
        ),
        (
            lambda: spec("what", {"e": FlowTable("call_events")}, "upsert"),
            "what: output is 'upsert', not Append(...), Upsert(...) or Daily()",
        ),
        (
            lambda: spec("chained", {"e": UseCaseTable("failed_calls")}, Append()),
            "chained: input 'e' is use case 'failed_calls''s table, which only a Daily use case "
            "reads; a streaming one reads a flow's table",
        ),
    ],
)
def test_a_declaration_that_cannot_work_is_refused(make: Any, message: str) -> None:
    with pytest.raises(UseCaseError, match=re.escape(message)):
        make()


@pytest.mark.parametrize(
    ("use_cases", "message"),
    [
        (
            [spec("x", {"events": FlowTable("page_views")})],
            "use case x: input 'events' reads flow 'page_views', which is not declared "
            r"\(declared flows: call_events\)",
        ),
        ([spec("call_events_quarantine", {"e": FlowTable("call_events")})], "a flow's table"),
        (
            [ACCOUNT_ACTIVITY, spec("by_day", {"a": UseCaseTable("account_activity")}, Daily())],
            r"use case by_day \(daily\) reads use case account_activity, an upsert table, which "
            "has no days",
        ),
        (
            [spec("by_day", {"a": UseCaseTable("nothing")}, Daily())],
            "use case by_day: input 'a' reads use case 'nothing', which is not declared",
        ),
        (
            [
                spec("one", {"a": UseCaseTable("two")}, Daily()),
                spec("two", {"a": UseCaseTable("one")}, Daily()),
            ],
            "use case one: its inputs read each other in a loop",
        ),
    ],
)
def test_inputs_are_checked_against_the_declared_flows(
    use_cases: list[UseCaseSpec], message: str
) -> None:
    with pytest.raises(UseCaseError, match=message):
        check_use_cases({u.name: u for u in use_cases}, FLOWS)


def test_a_use_case_module_that_cannot_be_used_is_named() -> None:
    with pytest.raises(ConfigError, match="TIDELAKE_USE_CASE_MODULES: cannot import no_such"):
        declared_use_cases(FLOWS, ["no_such_module_here"])
    with pytest.raises(ConfigError, match="json must define USE_CASES"):
        declared_use_cases(FLOWS, ["json"])


def test_a_function_that_raises_becomes_one_line_naming_the_use_case() -> None:
    def broken(events: Any) -> Any:
        raise ValueError("first line\nsecond line")

    use_case = UseCaseSpec(
        name="broken", inputs={"events": FlowTable("call_events")}, function=broken, output=Append()
    )
    with pytest.raises(
        UseCaseError, match=r"^use case broken: its function raised ValueError: first line$"
    ):
        use_case.call({"events": None})


def test_two_use_cases_with_one_name_are_refused_naming_it() -> None:
    with pytest.raises(ConfigError, match="declares use case 'account_activity', which is already"):
        declared_use_cases(FLOWS, ["tidelake.streaming.calls.use_cases"])


def test_a_daily_use_case_reads_an_append_or_daily_table_by_its_flows_days() -> None:
    appended = spec("appended", {"e": FlowTable("call_events")})
    daily = spec("by_day", {"a": UseCaseTable("appended")}, Daily())
    second = spec("by_day_again", {"d": UseCaseTable("by_day")}, Daily())
    use_cases = {u.name: u for u in (appended, daily, second)}
    check_use_cases(use_cases, FLOWS)
    assert input_flow(second, use_cases) == "call_events"
