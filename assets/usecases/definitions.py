"""The Dagster objects of the declared use cases, each generated from its declaration: its
table's asset (an edge from its input, grouped with its flow) and its expectations; a streaming
one's always-on job, supervisor and health checks; a Daily one's days made by automation."""

from __future__ import annotations

from collections.abc import Mapping

import dagster as dg
import pyarrow as pa

from tidelake.assets.stream.supervisor_decision import SupervisorPolicy
from tidelake.assets.usecases.asset_specs import table_schema_if_exists, use_case_asset_spec
from tidelake.assets.usecases.daily_asset import build_daily_asset
from tidelake.assets.usecases.expectations_check import build_expectations_check
from tidelake.assets.usecases.refresh_job import build_refresh_job
from tidelake.assets.usecases.stream_job import use_case_definitions_of
from tidelake.streaming.flow.spec import FlowSpec
from tidelake.streaming.settings import EngineSettings
from tidelake.streaming.usecase.daily import day_source
from tidelake.streaming.usecase.declared import input_use_case
from tidelake.streaming.usecase.planned_schema import planned_schemas
from tidelake.streaming.usecase.spec import UseCaseSpec


def use_case_definitions(
    use_cases: Mapping[str, UseCaseSpec],
    flows: Mapping[str, FlowSpec],
    settings: EngineSettings,
    policy: SupervisorPolicy,
) -> dg.Definitions:
    assets: list[dg.AssetSpec | dg.AssetsDefinition] = []
    jobs, sensors, checks = [], [], []
    schemas = use_case_schemas(use_cases, flows, settings)
    for use_case in use_cases.values():
        source = day_source(use_case, use_cases, flows)
        flow = source.flow
        jobs.append(build_refresh_job(use_case, source, settings))
        schema = schemas.get(use_case.name)
        if not use_case.streaming:
            assets.append(build_daily_asset(use_case, source, settings, schema))
            continue
        job, supervisor, health = use_case_definitions_of(use_case, flow, settings, policy)
        assets.append(use_case_asset_spec(use_case, flow, settings, schema))
        jobs.append(job)
        sensors.append(supervisor)
        checks.append(health)
        expectations = build_expectations_check(use_case, settings)
        if expectations is not None:
            checks.append(expectations)
    return dg.Definitions(assets=assets, jobs=jobs, sensors=sensors, asset_checks=checks)


def use_case_schemas(
    use_cases: Mapping[str, UseCaseSpec], flows: Mapping[str, FlowSpec], settings: EngineSettings
) -> dict[str, pa.Schema]:
    """Each use case's table schema (what its asset lists as its columns' types): its table's,
    read once, or, before the table exists, planned over the existing tables it reads."""
    existing = {}
    for use_case in use_cases.values():
        schema = table_schema_if_exists(settings.table_uri(use_case.table))
        if schema is not None:
            existing[use_case.name] = schema

    def depth(use_case: UseCaseSpec) -> int:
        upstream = input_use_case(use_case, use_cases)
        return 0 if upstream is None else depth(upstream) + 1

    wanted = [
        (use_case, day_source(use_case, use_cases, flows))
        for use_case in sorted(use_cases.values(), key=depth)  # what a use case reads first
        if use_case.name not in existing
    ]
    planned = planned_schemas(wanted, existing) if wanted else {}
    return existing | planned
