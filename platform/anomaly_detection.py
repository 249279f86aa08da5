"""The streaming anomaly detector in Dagster: its assets, its always-on job and its supervisor.

Supervised like every stream (one run kept alive, crash back-off, silent runs replaced), but a
restart needs no care for position: the detector always starts at the latest offsets with fresh
state.
"""

import os
import time
import uuid
from typing import Any

import dagster as dg
from dagster_pyspark import LazyPySparkResource

from tidelake.assets.anomaly_model import MODEL_KEY
from tidelake.assets.dagster_failures import step_failure
from tidelake.assets.flow_keys import topic_key
from tidelake.platform.flow_assets import STREAM_TAG
from tidelake.platform.resources import KafkaResource
from tidelake.platform.stream_health import recent_runs
from tidelake.platform.stream_jobs import run_until_stopped
from tidelake.platform.stream_sensors import fail_if_stale
from tidelake.platform.supervisor import SupervisorPolicy, decide
from tidelake.streaming.anomaly_detector import (
    ALERTS_TOPIC,
    ANOMALIES_TABLE,
    ANOMALY_SCHEMA,
    DETECTOR_NAME,
    AnomalyDetector,
)
from tidelake.streaming.flow_spec import FlowSpec
from tidelake.streaming.session import host_session
from tidelake.streaming.settings import ConfigError, EngineSettings

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
                "dagster/uri": str(settings.table_path(ANOMALIES_TABLE)),
                "dagster/column_schema": dg.TableSchema(
                    columns=[dg.TableColumn(f.name, str(f.type)) for f in ANOMALY_SCHEMA]
                ),
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


def build_detector_job(flow: FlowSpec, settings: EngineSettings) -> dg.JobDefinition:
    @dg.op(name=f"run_{DETECTOR_NAME}", tags={"dagster/kind/spark": "", "dagster/kind/kafka": ""})
    def run_detector(
        context: dg.OpExecutionContext, kafka: KafkaResource, spark: LazyPySparkResource
    ) -> None:
        conf = kafka.client_config()
        detector = AnomalyDetector(settings, conf, flow=flow)
        with step_failure():
            detector.preflight()
        context.log.info(
            f"stream worker pid {os.getpid()}: {flow.topic} -> {detector.table_uri} and "
            f"{detector.alerts_topic}, starting at the latest offsets"
        )

        def report(query: Any, progress: Any) -> None:
            model = detector.last_model_version
            context.log.info(
                f"{DETECTOR_NAME}: {detector.batches_scored} batches scored, model "
                f"{model if model is not None else 'none yet (materialize the model asset)'}"
            )

        with host_session(lambda: spark.spark_session, settings.spark_master) as session:
            run_until_stopped(context, lambda: detector.start(session), 30.0, report)

    @dg.job(
        name=DETECTOR_NAME,
        description="The always-on anomaly detector; its supervisor sensor keeps one run alive.",
        tags={STREAM_TAG: DETECTOR_NAME, "dagster/max_retries": "0"},
        executor_def=dg.in_process_executor,
    )
    def detector_job() -> None:
        run_detector()

    return detector_job


def build_detector_supervisor(
    job: dg.JobDefinition, policy: SupervisorPolicy, interval_s: int = 20
) -> dg.SensorDefinition:
    @dg.sensor(
        name=f"{DETECTOR_NAME}_supervisor",
        job=job,
        minimum_interval_seconds=interval_s,
        default_status=dg.DefaultSensorStatus.RUNNING,
        description=f"Keeps one run of {job.name} alive and backs off on crash loops.",
    )
    def supervise(context: dg.SensorEvaluationContext, kafka: KafkaResource) -> dg.SensorResult:
        now = time.time()
        try:
            kafka.client_config()
        except ConfigError as exc:
            return dg.SensorResult(skip_reason=f"Kafka is not configured: {exc}")
        runs = [
            fail_if_stale(context.instance, r, now) for r in recent_runs(context.instance, job.name)
        ]
        decision = decide(runs, now, policy)
        if not decision.launch:
            return dg.SensorResult(skip_reason=decision.reason)
        return dg.SensorResult(
            run_requests=[
                dg.RunRequest(
                    run_key=f"{DETECTOR_NAME}-{uuid.uuid4().hex[:12]}",
                    tags={
                        STREAM_TAG: DETECTOR_NAME,
                        "tidelake/supervisor_reason": decision.reason[:200],
                    },
                )
            ]
        )

    return supervise
