"""The declared flows. Adding an event type = a .proto in protos/ plus one FlowSpec here (or in
a deployment's own module named by TIDELAKE_FLOW_MODULES, see declared_flows)."""

from __future__ import annotations

import importlib
from collections.abc import Mapping, Sequence
from datetime import timedelta
from typing import Any

from tidelake.protos.call_pb2 import CallEvent
from tidelake.streaming import demo_events
from tidelake.streaming.flow_spec import FieldCheck, FlowSpec
from tidelake.streaming.settings import ConfigError

CALL_SID_PATTERN = "^CA[0-9a-f]{32}$"
ACCOUNT_SID_PATTERN = "^AC[0-9a-f]{32}$"
MAX_CALL_DURATION_S = 86_400
"""Part of CallEvent's contract (field_checks below), which the ingest service, the stream and
the quality checks all apply."""


def call_event_expectations() -> list[Any]:
    """What every day of call_events must meet besides the contract (Great Expectations 1.x;
    the contract's own expectations are added by the quality suite)."""
    import great_expectations.expectations as gxe

    return [
        gxe.ExpectColumnValuesToBeUnique(column="call_sid"),
        gxe.ExpectColumnValuesToBeOfType(column="duration", type_="int64"),
    ]


CALL_EVENTS = FlowSpec(
    name="call_events",
    message=CallEvent,
    topic="call-events",
    key_field="call_sid",
    event_time_field="event_time",
    event_time_unit="ms",
    required_fields=("account_sid", "call_state", "region"),
    field_checks={
        "call_sid": FieldCheck(pattern=CALL_SID_PATTERN),
        "account_sid": FieldCheck(pattern=ACCOUNT_SID_PATTERN),
        "duration": FieldCheck(min_value=0, max_value=MAX_CALL_DURATION_S),
    },
    topic_partitions=4,
    allowed_lateness=timedelta(hours=2),
    dedup_key="call_sid",
    description="Voice call events from the ingest service: one row per finished call.",
    owners=("team:voice-insights",),
    demo_event=demo_events.call_event,
    expectations=call_event_expectations,
)

FLOWS: dict[str, FlowSpec] = {flow.name: flow for flow in [CALL_EVENTS]}


def declared_flows(modules: Sequence[str] = ()) -> dict[str, FlowSpec]:
    """FLOWS plus the FLOWS list of each module in `modules` (EngineSettings.flow_modules), by
    name. Modules are imported afresh by every process that asks, so a reloaded Dagster code
    location sees a flow added to one."""
    flows = dict(FLOWS)
    for module_name in modules:
        try:
            module = importlib.import_module(module_name)
        except ImportError as exc:
            raise ConfigError(
                f"TIDELAKE_FLOW_MODULES: cannot import {module_name}: {exc}"
            ) from None
        extra = getattr(module, "FLOWS", None)
        if not isinstance(extra, list | tuple) or not all(isinstance(f, FlowSpec) for f in extra):
            raise ConfigError(
                f"TIDELAKE_FLOW_MODULES: {module_name} must define FLOWS, a list of FlowSpec"
            )
        for flow in extra:
            if flow.name in flows:
                raise ConfigError(
                    f"TIDELAKE_FLOW_MODULES: {module_name} declares flow {flow.name!r}, which is "
                    "already declared"
                )
            flows[flow.name] = flow
    return flows


def get_flow(name: str, flows: Mapping[str, FlowSpec] = FLOWS) -> FlowSpec:
    """The declared flow called name, or a KeyError that lists the known flows."""
    try:
        return flows[name]
    except KeyError:
        raise KeyError(
            f"unknown flow {name!r}; declared flows: {', '.join(sorted(flows))}"
        ) from None
