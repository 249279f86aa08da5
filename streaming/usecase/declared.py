"""The declared use cases: tidelake's own use case modules (BUILTIN_USE_CASE_MODULES) and a
team's (TIDELAKE_USE_CASE_MODULES), each a module whose USE_CASES lists its UseCaseSpec
(streaming/calls/use_cases.py is the model). Checked against the declared flows when a code
location loads: an input that does not exist, or a name taken twice, is refused, naming it."""

from __future__ import annotations

from collections.abc import Mapping, Sequence

from tidelake.streaming.errors import ConfigError
from tidelake.streaming.flow.declared import declared_in
from tidelake.streaming.flow.spec import FlowSpec
from tidelake.streaming.usecase.spec import Upsert, UseCaseError, UseCaseSpec, UseCaseTable

BUILTIN_USE_CASE_MODULES = ("tidelake.streaming.calls.use_cases",)


def _module_use_cases(module_name: str) -> list[UseCaseSpec]:
    return declared_in(module_name, "USE_CASES", UseCaseSpec, "TIDELAKE_USE_CASE_MODULES")


def declared_use_cases(
    flows: Mapping[str, FlowSpec], modules: Sequence[str] = ()
) -> dict[str, UseCaseSpec]:
    """The built-in use cases whose flows are declared, plus every use case of `modules`
    (EngineSettings.use_case_modules), by name, checked against `flows`. Modules are imported
    afresh by each process that asks, so a reloaded code location sees a use case added."""
    builtin = {
        u.name: u
        for module_name in BUILTIN_USE_CASE_MODULES
        for u in _module_use_cases(module_name)
    }
    found = {n: u for n, u in builtin.items() if _root_flow(u, builtin) in flows}
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


def input_flow(use_case: UseCaseSpec, use_cases: Mapping[str, UseCaseSpec]) -> str:
    """The flow whose table the use case reads, itself or through the use cases it reads; its
    assets are grouped with that flow's and have its days."""
    flow = _root_flow(use_case, use_cases)
    assert flow is not None, f"{use_case.name}: checked by check_use_cases"
    return flow


def streaming_on(flow: FlowSpec, use_cases: Mapping[str, UseCaseSpec]) -> list[UseCaseSpec]:
    """The streaming use cases reading `flow`'s table: the queries its application hosts
    beside the flow's own (stream/application.py)."""
    return [u for u in use_cases.values() if u.streaming and input_flow(u, use_cases) == flow.name]


def input_use_case(
    use_case: UseCaseSpec, use_cases: Mapping[str, UseCaseSpec]
) -> UseCaseSpec | None:
    """The use case whose table this one reads; None when it reads a flow's."""
    (source,) = use_case.inputs.values()
    return use_cases[source.use_case] if isinstance(source, UseCaseTable) else None


def _root_flow(use_case: UseCaseSpec, use_cases: Mapping[str, UseCaseSpec]) -> str | None:
    """The flow at the start of the chain of inputs; None when the chain breaks or loops."""
    seen = {use_case.name}
    (source,) = use_case.inputs.values()
    while isinstance(source, UseCaseTable):
        upstream = use_cases.get(source.use_case)
        if upstream is None or upstream.name in seen:
            return None
        seen.add(upstream.name)
        (source,) = upstream.inputs.values()
    return source.flow


def check_use_cases(use_cases: Mapping[str, UseCaseSpec], flows: Mapping[str, FlowSpec]) -> None:
    """Refuse use cases that cannot run: an input that does not exist, an upsert table read by
    day, a loop of inputs, or a table name a flow already has."""
    tables = {t for f in flows.values() for t in (f.table, f.quarantine_table)}
    for use_case in use_cases.values():
        if use_case.table in tables:
            raise UseCaseError(
                f"use case {use_case.name}: its table name is a flow's table already"
            )
        for argument, source in use_case.inputs.items():
            if isinstance(source, UseCaseTable):
                _check_use_case_input(use_case, argument, source, use_cases)
            elif source.flow not in flows:
                raise UseCaseError(
                    f"use case {use_case.name}: input {argument!r} reads flow {source.flow!r}, "
                    f"which is not declared (declared flows: {', '.join(sorted(flows))})"
                )
        if _root_flow(use_case, use_cases) is None:
            raise UseCaseError(f"use case {use_case.name}: its inputs read each other in a loop")


def _check_use_case_input(
    use_case: UseCaseSpec,
    argument: str,
    source: UseCaseTable,
    use_cases: Mapping[str, UseCaseSpec],
) -> None:
    upstream = use_cases.get(source.use_case)
    if upstream is None:
        raise UseCaseError(
            f"use case {use_case.name}: input {argument!r} reads use case {source.use_case!r}, "
            f"which is not declared (declared use cases: {', '.join(sorted(use_cases))})"
        )
    if isinstance(upstream.output, Upsert):
        raise UseCaseError(
            f"use case {use_case.name} ({use_case.kind}) reads use case {upstream.name}, an "
            "upsert table, which has no days: read its input instead, or make it an Append"
        )
