"""The declared flows: tidelake's own flow modules (BUILTIN_FLOW_MODULES) and a deployment's
(TIDELAKE_FLOW_MODULES). Adding an event type = a .proto in protos/ plus a module whose FLOWS
lists its FlowSpec (streaming/calls/call_events.py is the model)."""

from __future__ import annotations

import importlib
from collections.abc import Mapping, Sequence
from typing import TypeVar

from tidelake.streaming.errors import ConfigError
from tidelake.streaming.flow.spec import FlowSpec

T = TypeVar("T")

BUILTIN_FLOW_MODULES = ("tidelake.streaming.calls.call_events",)


def declared_in(module_name: str, attribute: str, kind: type[T], setting: str) -> list[T]:
    """The list `attribute` of a declaring module (FLOWS of FlowSpec, USE_CASES of
    UseCaseSpec), imported afresh by each process that asks; a ConfigError naming `setting`
    when the module or its list is missing."""
    try:
        module = importlib.import_module(module_name)
    except ImportError as exc:
        raise ConfigError(f"{setting}: cannot import {module_name}: {exc}") from exc
    declared = getattr(module, attribute, None)
    if not isinstance(declared, list | tuple) or not all(isinstance(d, kind) for d in declared):
        raise ConfigError(
            f"{setting}: {module_name} must define {attribute}, a list of {kind.__name__}"
        )
    return list(declared)


def _module_flows(module_name: str) -> list[FlowSpec]:
    return declared_in(module_name, "FLOWS", FlowSpec, "TIDELAKE_FLOW_MODULES")


FLOWS: dict[str, FlowSpec] = {
    flow.name: flow for module in BUILTIN_FLOW_MODULES for flow in _module_flows(module)
}


def declared_flows(modules: Sequence[str] = ()) -> dict[str, FlowSpec]:
    """FLOWS plus the FLOWS list of each module in `modules` (EngineSettings.flow_modules), by
    name. Modules are imported afresh by every process that asks, so a reloaded Dagster code
    location sees a flow added to one."""
    flows = dict(FLOWS)
    for module_name in modules:
        for flow in _module_flows(module_name):
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
