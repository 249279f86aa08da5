"""The one Dagster definitions root: everything per flow and per use case is generated from their
declarations.

`dg dev` ([tool.dg] in pyproject.toml; what `make dev` runs) and `dagster dev -w workspace.yaml`
load `defs` from here.
"""

from __future__ import annotations

from collections.abc import Callable

import dagster as dg

from tidelake.assets.calls.anomaly_definitions import anomaly_definitions
from tidelake.assets.flow_definitions import flow_definitions
from tidelake.assets.history.retention import (
    build_history_retention_job,
    build_history_retention_schedule,
)
from tidelake.assets.resources import KafkaResource, engine_settings, spark_resource
from tidelake.assets.stream.supervisor_decision import SupervisorPolicy
from tidelake.assets.tables.keys import use_case_key
from tidelake.assets.tables.table_maintenance import UseCaseTables
from tidelake.assets.usecases.definitions import use_case_definitions
from tidelake.streaming.calls.call_events import CALL_EVENTS
from tidelake.streaming.flow.declared import declared_flows
from tidelake.streaming.flow.spec import FlowSpec
from tidelake.streaming.settings import EngineSettings
from tidelake.streaming.usecase.declared import declared_use_cases, input_flow
from tidelake.streaming.usecase.spec import Append, Daily, Upsert, UseCaseSpec

FLOW_ADDITIONS: dict[
    str, Callable[[FlowSpec, EngineSettings, SupervisorPolicy], dg.Definitions]
] = {CALL_EVENTS.name: anomaly_definitions}
"""Dagster objects of one flow's own, beyond what every flow gets, by flow name."""


def build_definitions(
    flows: dict[str, FlowSpec] | None = None,
    settings: EngineSettings | None = None,
    policy: SupervisorPolicy | None = None,
) -> dg.Definitions:
    settings = settings or engine_settings()
    # a policy given wins over TIDELAKE_SUPERVISOR_INTERVAL (tests pass their own back-off)
    policy = policy or SupervisorPolicy(interval_s=settings.supervisor_interval)
    declared = flows or declared_flows(settings.flow_modules)
    flows = {name: settings.deployed(flow) for name, flow in declared.items()}
    use_cases = declared_use_cases(flows, settings.use_case_modules)
    per_flow = [
        flow_definitions(f, settings, policy, use_case_tables(f, use_cases, settings))
        for f in flows.values()
    ]
    per_flow.append(use_case_definitions(use_cases, flows, settings, policy))
    per_flow += [
        add(flows[name], settings, policy) for name, add in FLOW_ADDITIONS.items() if name in flows
    ]
    history_retention = build_history_retention_job(settings)
    shared = dg.Definitions(
        jobs=[history_retention],
        schedules=[build_history_retention_schedule(history_retention)],
        resources={"kafka": KafkaResource(), "spark": spark_resource(settings)},
        # a run's steps share its process and so its one Spark session: a process per step
        # started a JVM per step (docs/running.md, "A run's steps share one process")
        executor=dg.in_process_executor,
        # compaction runs when a date closes: automation must be on from the start
        sensors=[
            dg.AutomationConditionSensorDefinition(
                "tidelake_automation",
                target=dg.AssetSelection.all(),
                default_status=dg.DefaultSensorStatus.RUNNING,
                minimum_interval_seconds=settings.automation_interval,
                # one run per date holds a check and what it gates, so blocking works in-run
                emit_backfills=False,
            )
        ],
    )
    return dg.Definitions.merge(shared, *per_flow)


def use_case_tables(
    flow: FlowSpec, use_cases: dict[str, UseCaseSpec], settings: EngineSettings
) -> UseCaseTables:
    """The tables of the use cases on `flow` (read from its table or from one another's), by
    output kind, for the flow's upkeep."""
    on_flow = [u for u in use_cases.values() if input_flow(u, use_cases) == flow.name]

    def tables(kind: type[Append | Daily | Upsert]) -> dict[dg.AssetKey, str]:
        return {
            use_case_key(u): settings.table_uri(u.table)
            for u in on_flow
            if isinstance(u.output, kind)
        }

    return UseCaseTables(appended=tables(Append), daily=tables(Daily), upserted=tables(Upsert))


defs = build_definitions()
