"""The one Dagster definitions root: everything per flow is generated from the flow declarations.

`dg dev` ([tool.dg] in pyproject.toml; what `make dev` runs) and `dagster dev -w workspace.yaml`
load `defs` from here.
"""

from __future__ import annotations

import dagster as dg

from tidelake.assets.anomaly_model import build_anomaly_model_asset
from tidelake.assets.quality_checks import build_quality_checks
from tidelake.assets.table_backfill import build_table_asset
from tidelake.assets.table_maintenance import (
    build_compaction_asset,
    build_vacuum_job,
    build_vacuum_schedule,
)
from tidelake.platform.anomaly_detection import (
    build_detector_job,
    build_detector_supervisor,
    detector_asset_specs,
)
from tidelake.platform.flow_assets import flow_asset_specs
from tidelake.platform.resources import KafkaResource, engine_settings, spark_resource
from tidelake.platform.stream_checks import build_stream_checks
from tidelake.platform.stream_jobs import build_stream_job
from tidelake.platform.stream_sensors import build_supervisor_sensor
from tidelake.platform.supervisor import SupervisorPolicy
from tidelake.streaming.flow_spec import FlowSpec
from tidelake.streaming.flows import CALL_EVENTS, declared_flows
from tidelake.streaming.settings import EngineSettings


def flow_definitions(
    flow: FlowSpec, settings: EngineSettings, policy: SupervisorPolicy
) -> dg.Definitions:
    """Assets, stream job, supervisor sensor and health checks of one flow."""
    topic, table, quarantine = flow_asset_specs(flow, settings)
    quality = build_quality_checks(flow, settings)
    stream_job = build_stream_job(flow, settings)
    vacuum_job = build_vacuum_job(flow, settings)
    return dg.Definitions(
        assets=[
            topic,
            build_table_asset(flow, settings, table),
            quarantine,
            build_compaction_asset(flow, settings),
        ],
        asset_checks=[build_stream_checks(flow, settings, policy), *quality],
        jobs=[stream_job, vacuum_job],
        schedules=[build_vacuum_schedule(flow, vacuum_job)],
        sensors=[
            build_supervisor_sensor(flow, stream_job, settings, policy),
        ],
    )


def anomaly_definitions(
    flow: FlowSpec, settings: EngineSettings, policy: SupervisorPolicy
) -> dg.Definitions:
    """The anomaly model (daily retraining) and the always-on detector, for call events."""
    detector_job = build_detector_job(flow, settings)
    return dg.Definitions(
        assets=[build_anomaly_model_asset(flow, settings), *detector_asset_specs(flow, settings)],
        jobs=[detector_job],
        sensors=[build_detector_supervisor(detector_job, policy)],
    )


def build_definitions(
    flows: dict[str, FlowSpec] | None = None,
    settings: EngineSettings | None = None,
    policy: SupervisorPolicy | None = None,
) -> dg.Definitions:
    settings = settings or engine_settings()
    policy = policy or SupervisorPolicy()
    declared = flows or declared_flows(settings.flow_modules)
    flows = {name: settings.deployed(flow) for name, flow in declared.items()}
    per_flow = [flow_definitions(f, settings, policy) for f in flows.values()]
    if CALL_EVENTS.name in flows:
        per_flow.append(anomaly_definitions(flows[CALL_EVENTS.name], settings, policy))
    shared = dg.Definitions(
        resources={"kafka": KafkaResource(), "spark": spark_resource(settings)},
        # compaction runs when a date closes: automation must be on from the start
        sensors=[
            dg.AutomationConditionSensorDefinition(
                "tidelake_automation",
                target=dg.AssetSelection.all(),
                default_status=dg.DefaultSensorStatus.RUNNING,
                minimum_interval_seconds=30,
                # one run per date holds a check and what it gates, so blocking works in-run
                emit_backfills=False,
            )
        ],
    )
    return dg.Definitions.merge(shared, *per_flow)


defs = build_definitions()
