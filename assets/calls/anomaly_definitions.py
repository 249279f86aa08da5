"""The call-events flow's own Dagster objects: the anomaly model and its detector."""

from __future__ import annotations

import dagster as dg

from tidelake.assets.calls.anomaly_model_asset import build_anomaly_model_asset
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
    """The anomaly model (daily retraining) and the always-on detector, for call events."""
    detector_job = build_detector_job(flow, settings)
    return dg.Definitions(
        assets=[build_anomaly_model_asset(flow, settings), *detector_asset_specs(flow, settings)],
        jobs=[detector_job],
        sensors=[build_detector_supervisor(detector_job, policy)],
    )
