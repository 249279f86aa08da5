"""The streaming anomaly detector in Dagster: its assets, its always-on job and its supervisor.

Supervised like every stream (one run kept alive, crash back-off, silent runs replaced), but a
restart needs no care for position: the detector always starts at the latest offsets with fresh
state.
"""

from typing import Any

import dagster as dg

from tidelake.assets.calls.anomaly_model_asset import MODEL_KEY
from tidelake.assets.stream.always_on import AlwaysOn, build_always_on_job, build_supervisor
from tidelake.assets.stream.supervisor_decision import SupervisorPolicy
from tidelake.assets.tables.asset_specs import column_schema
from tidelake.assets.tables.keys import topic_key
from tidelake.streaming.calls.anomaly.detector import (
    ALERTS_TOPIC,
    ANOMALIES_TABLE,
    ANOMALY_SCHEMA,
    DETECTOR_NAME,
    AnomalyDetector,
)
from tidelake.streaming.flow.spec import FlowSpec
from tidelake.streaming.settings import EngineSettings
from tidelake.streaming.stream.query import ProgressHandler

ANOMALIES_KEY = dg.AssetKey(["lake", ANOMALIES_TABLE])
ALERTS_KEY = dg.AssetKey(["kafka", ALERTS_TOPIC])


def detector_asset_specs(flow: FlowSpec, settings: EngineSettings) -> list[dg.AssetSpec]:
    description = (
        "Written by the always-on call_anomaly_detector job: minute windows per account and "
        "region whose volume, failure rate or duration is far from the newest model."
    )
    return [
        dg.AssetSpec(
            ANOMALIES_KEY,
            deps=[topic_key(flow), MODEL_KEY],
            group_name="anomalies",
            kinds={"spark", "delta"},
            description=description,
            metadata={
                "dagster/uri": settings.table_uri(ANOMALIES_TABLE),
                "dagster/column_schema": column_schema(ANOMALY_SCHEMA),
            },
        ),
        dg.AssetSpec(
            ALERTS_KEY,
            deps=[topic_key(flow), MODEL_KEY],
            group_name="anomalies",
            kinds={"kafka", "protobuf"},
            description="The same anomalies as protobuf CallAnomaly messages "
            "(protos/anomaly.proto), keyed by '<key_kind>:<key>'.",
        ),
    ]


def detector_stream(flow: FlowSpec) -> AlwaysOn[AnomalyDetector]:
    """The detector as an always-on query."""

    def started(detector: AnomalyDetector) -> str:
        return (
            f"{flow.topic} -> {detector.table_uri} and {detector.alerts_topic}, starting at the "
            "latest offsets"
        )

    def reporter(
        context: dg.OpExecutionContext, detector: AnomalyDetector, _: dict[str, str]
    ) -> ProgressHandler:
        def report(query: Any, progress: Any) -> None:
            model = detector.last_model_version
            context.log.info(
                f"{DETECTOR_NAME}: {detector.batches_scored} batches scored, model "
                f"{model if model is not None else 'none yet (materialize the model asset)'}"
            )

        return report

    return AlwaysOn[AnomalyDetector](
        name=DETECTOR_NAME,
        tag=DETECTOR_NAME,
        description="The always-on anomaly detector; its supervisor sensor keeps one run alive.",
        op_name=f"run_{DETECTOR_NAME}",
        op_description=f"Scores minute windows of {flow.topic!r} against the newest anomaly model "
        "until the run is terminated.",
        make_query=lambda settings, conf: AnomalyDetector(settings, conf, flow=flow),
        started=started,
        make_reporter=reporter,
    )


def build_detector_job(flow: FlowSpec, settings: EngineSettings) -> dg.JobDefinition:
    return build_always_on_job(detector_stream(flow), settings)


def build_detector_supervisor(
    job: dg.JobDefinition, policy: SupervisorPolicy
) -> dg.SensorDefinition:
    return build_supervisor(
        job,
        policy,
        name=f"{DETECTOR_NAME}_supervisor",
        description=f"Keeps one run of {job.name} alive and backs off on crash loops.",
    )
