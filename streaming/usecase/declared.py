"""The declared use cases: tidelake's own use case modules (BUILTIN_USE_CASE_MODULES) and a
team's (TIDELAKE_USE_CASE_MODULES), each a module whose USE_CASES lists its UseCaseSpec
(streaming/calls/use_cases.py is the model). Checked against the declared flows when a code
location loads: an input that does not exist, or a name taken twice, is refused, naming it."""

from __future__ import annotations

from collections.abc import Mapping, Sequence

from tidelake.streaming.errors import ConfigError
from tidelake.streaming.flow.declared import declared_in
from tidelake.streaming.flow.spec import FlowSpec
from tidelake.streaming.usecase.spec import UseCaseError, UseCaseSpec

BUILTIN_USE_CASE_MODULES = ("tidelake.streaming.calls.use_cases",)


def _module_use_cases(module_name: str) -> list[UseCaseSpec]:
    return declared_in(module_name, "USE_CASES", UseCaseSpec, "TIDELAKE_USE_CASE_MODULES")


def declared_use_cases(
    flows: Mapping[str, FlowSpec], modules: Sequence[str] = ()
) -> dict[str, UseCaseSpec]:
    """The built-in use cases whose flows are declared, plus every use case of `modules`
    (EngineSettings.use_case_modules), by name, checked against `flows`. Modules are imported
    afresh by each process that asks, so a reloaded code location sees a use case added."""
    found: dict[str, UseCaseSpec] = {}
    for module_name in BUILTIN_USE_CASE_MODULES:
        for use_case in _module_use_cases(module_name):
            if input_flow(use_case) in flows:
                found[use_case.name] = use_case
    for module_name in modules:
        for use_case in _module_use_cases(module_name):
            if use_case.name in found:
                raise ConfigError(
                    f"TIDELAKE_USE_CASE_MODULES: {module_name} declares use case "
                    f"{use_case.name!r}, which is already declared"
                )
            found[use_case.name] = use_case
    check_use_cases(found, flows)
    return found


def input_flow(use_case: UseCaseSpec) -> str:
    """The flow whose table the use case reads; its assets are grouped with that flow's."""
    (source,) = use_case.inputs.values()
    return source.flow


def check_use_cases(use_cases: Mapping[str, UseCaseSpec], flows: Mapping[str, FlowSpec]) -> None:
    """Refuse use cases that cannot run: an input that does not exist, or a table name a flow
    already has."""
    tables = {t for f in flows.values() for t in (f.table, f.quarantine_table)}
    for use_case in use_cases.values():
        if use_case.table in tables:
            raise UseCaseError(
                f"use case {use_case.name}: its table name is a flow's table already"
            )
        for argument, source in use_case.inputs.items():
            if source.flow not in flows:
                raise UseCaseError(
                    f"use case {use_case.name}: input {argument!r} reads flow {source.flow!r}, "
                    f"which is not declared (declared flows: {', '.join(sorted(flows))})"
                )
