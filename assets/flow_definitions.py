"""All Dagster objects of one flow, made from its FlowSpec: the topic, table, quarantine and
compaction assets, the table's backfill, the stream job and its supervisor, health and quality
checks, vacuum and the hourly table upkeep (open dates compacted, Delta logs cut), which keep the
tables of the use cases on the flow too."""

from __future__ import annotations

import dagster as dg

from tidelake.assets.quality.partition_checks import build_quality_checks
from tidelake.assets.stream.health_checks import build_stream_checks
from tidelake.assets.stream.job import build_stream_job
from tidelake.assets.stream.supervisor_decision import SupervisorPolicy
from tidelake.assets.stream.supervisor_sensor import build_supervisor_sensor
from tidelake.assets.tables.asset_specs import flow_asset_specs
from tidelake.assets.tables.table_backfill import build_table_asset
from tidelake.assets.tables.table_maintenance import (
    UseCaseTables,
    build_compaction_asset,
    build_table_upkeep_job,
    build_table_upkeep_schedule,
    build_vacuum_job,
    build_vacuum_schedule,
)
from tidelake.streaming.flow.spec import FlowSpec
from tidelake.streaming.settings import EngineSettings


def flow_definitions(
    flow: FlowSpec,
    settings: EngineSettings,
    policy: SupervisorPolicy,
    use_cases: UseCaseTables | None = None,
) -> dg.Definitions:
    """Assets, stream job, supervisor sensor and health checks of one flow. `use_cases`: the
    tables of the use cases built on it, which its compaction, vacuum and upkeep keep with its
    own."""
    use_cases = use_cases or UseCaseTables()
    topic, table, quarantine = flow_asset_specs(flow, settings)
    quality = build_quality_checks(flow, settings)
    stream_job = build_stream_job(flow, settings)
    vacuum_job = build_vacuum_job(flow, settings, use_cases)
    table_upkeep_job = build_table_upkeep_job(flow, settings, use_cases)
    return dg.Definitions(
        assets=[
            topic,
            build_table_asset(flow, settings, table),
            quarantine,
            build_compaction_asset(flow, settings, use_cases.appended),
        ],
        asset_checks=[build_stream_checks(flow, settings, policy), *quality],
        jobs=[stream_job, vacuum_job, table_upkeep_job],
        schedules=[
            build_vacuum_schedule(flow, vacuum_job),
            build_table_upkeep_schedule(flow, table_upkeep_job),
        ],
        sensors=[
            build_supervisor_sensor(flow, stream_job, settings, policy),
        ],
    )
