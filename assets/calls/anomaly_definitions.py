"""The call-events flow's own Dagster objects: the anomaly model and its detector."""

from __future__ import annotations

import dagster as dg

from tidelake.assets.calls.anomaly_model_asset import build_anomaly_model_asset
from tidelake.assets.calls.anomaly_retention import (
    build_anomalies_retention_job,
    build_anomalies_retention_schedule,
)
from tidelake.assets.calls.detector_job import (
    build_detector_job,
    build_detector_supervisor,
    detector_asset_specs,
)
from tidelake.assets.stream.supervisor_decision import SupervisorPolicy
from tidelake.streaming.flow.spec import FlowSpec
from tidelake.streaming.settings import EngineSettings


def anomaly_definitions(
    flow: FlowSpec, settings: EngineSettings, policy: SupervisorPolicy
) -> dg.Definitions:
    """The anomaly model (daily retraining), the always-on detector and the daily retention of
    its anomalies, for call events."""
    detector_job = build_detector_job(flow, settings)
    retention_job = build_anomalies_retention_job(settings)
    return dg.Definitions(
        assets=[build_anomaly_model_asset(flow, settings), *detector_asset_specs(flow, settings)],
        jobs=[detector_job, retention_job],
        schedules=[build_anomalies_retention_schedule(retention_job)],
        sensors=[build_detector_supervisor(detector_job, policy)],
    )
