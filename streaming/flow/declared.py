"""The declared flows: tidelake's own flow modules (BUILTIN_FLOW_MODULES) and a deployment's
(TIDELAKE_FLOW_MODULES). Adding an event type = a .proto in protos/ plus a module whose FLOWS
lists its FlowSpec (streaming/calls/call_events.py is the model)."""

from __future__ import annotations

import importlib
from collections.abc import Mapping, Sequence

from tidelake.streaming.errors import ConfigError
from tidelake.streaming.flow.spec import FlowSpec

BUILTIN_FLOW_MODULES = ("tidelake.streaming.calls.call_events",)


def _module_flows(module_name: str) -> list[FlowSpec]:
    """The FLOWS list of a flow module."""
    try:
        module = importlib.import_module(module_name)
    except ImportError as exc:
        raise ConfigError(f"TIDELAKE_FLOW_MODULES: cannot import {module_name}: {exc}") from exc
    flows = getattr(module, "FLOWS", None)
    if not isinstance(flows, list | tuple) or not all(isinstance(f, FlowSpec) for f in flows):
        raise ConfigError(
            f"TIDELAKE_FLOW_MODULES: {module_name} must define FLOWS, a list of FlowSpec"
        )
    return list(flows)


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
