"""The supervisor sensor of each always-on stream.

Every tick it (1) keeps exactly one run of the stream job alive, restarting crashed runs with a
capped exponential back-off, (2) records the stream's health (lag per partition, last batch,
restarts) as an observation of the table asset plus the stream_alive and lag_below_threshold
checks, and (3) marks date partitions of the table materialized once the stream's event time has
passed them by the allowed lateness. It touches Kafka only through one probe bounded by a few
seconds, far below the sensor tick's timeout, and never starts Spark.
"""

import json
import time
import uuid
from dataclasses import dataclass

import dagster as dg

from tidelake.assets.flow_keys import table_key
from tidelake.platform.flow_assets import STREAM_TAG
from tidelake.platform.resources import KafkaResource
from tidelake.platform.stream_health import measure_health, recent_runs, stream_restarts
from tidelake.platform.supervisor import RunState, RunView, SupervisorPolicy
from tidelake.streaming.flow_spec import FlowSpec
from tidelake.streaming.settings import ConfigError, EngineSettings
from tidelake.streaming.stream_status import closed_dates, table_progress

STALE_RUN_AFTER_S = 300.0
"""A STARTED stream run that logged nothing for this long has lost its worker (it reports
progress every 30 s by default); the supervisor marks it failed so that it can be replaced."""


@dataclass
class SupervisorCursor:
    """What the sensor remembers between ticks: the newest date partition already announced."""

    closed_through: str | None = None

    @classmethod
    def parse(cls, text: str | None) -> "SupervisorCursor":
        return cls(**json.loads(text)) if text else cls()

    def dump(self) -> str:
        return json.dumps(self.__dict__)


def supervisor_sensor_name(flow: FlowSpec) -> str:
    return f"{flow.name}_stream_supervisor"


def build_supervisor_sensor(
    flow: FlowSpec,
    job: dg.JobDefinition,
    settings: EngineSettings,
    policy: SupervisorPolicy,
    interval_s: int = 20,
) -> dg.SensorDefinition:
    checkpoint = str(settings.checkpoint_path(flow.name))
    table_uri = str(settings.table_path(flow.table))

    @dg.sensor(
        name=supervisor_sensor_name(flow),
        job=job,
        minimum_interval_seconds=interval_s,
        default_status=dg.DefaultSensorStatus.RUNNING,
        description=f"Keeps one run of {job.name} alive, backs off on crash loops, records "
        f"lag and health of {flow.table}, and closes its daily partitions.",
    )
    def supervise(context: dg.SensorEvaluationContext, kafka: KafkaResource) -> dg.SensorResult:
        now = time.time()
        instance = context.instance
        runs = recent_runs(instance, job.name)
        runs = [fail_if_stale(instance, run, now) for run in runs]
        try:
            conf = kafka.client_config()
        except ConfigError as exc:
            return dg.SensorResult(skip_reason=f"Kafka is not configured: {exc}")
        restarts = stream_restarts(instance, job.name)
        health = measure_health(flow, checkpoint, conf, runs, restarts, policy, now)
        cursor = SupervisorCursor.parse(context.cursor)
        events: list[dg.AssetMaterialization | dg.AssetObservation | dg.AssetCheckEvaluation]
        events = [health.observation(), *health.check_evaluations()]
        events += _close_partitions(flow, table_uri, cursor)
        decision = health.decision
        context.log.info(decision.reason)
        if not decision.launch:
            return dg.SensorResult(
                skip_reason=decision.reason, cursor=cursor.dump(), asset_events=events
            )
        request = dg.RunRequest(
            run_key=f"{flow.name}-{uuid.uuid4().hex[:12]}",
            tags={STREAM_TAG: flow.name, "tidelake/supervisor_reason": decision.reason[:200]},
        )
        return dg.SensorResult(run_requests=[request], cursor=cursor.dump(), asset_events=events)

    return supervise


def fail_if_stale(instance: dg.DagsterInstance, run: RunView, now: float) -> RunView:
    """Mark a STARTED run failed when its log has been silent past STALE_RUN_AFTER_S.

    The default run launcher cannot health-check run workers, so a worker lost with its code
    server (a hard-killed `dagster dev`) would otherwise look alive forever.
    """
    if run.state is not RunState.STARTED:
        return run
    records = instance.get_records_for_run(run.run_id, limit=1, ascending=False).records
    last = records[0].event_log_entry.timestamp if records else (run.started_at or now)
    if now - last < STALE_RUN_AFTER_S:
        return run
    dagster_run = instance.get_run_by_id(run.run_id)
    if dagster_run is None or dagster_run.is_finished:
        return run
    instance.report_engine_event(
        f"stream run silent for {now - last:.0f}s: marking it failed so the supervisor can "
        "replace it",
        dagster_run,
    )
    instance.report_run_failed(dagster_run)
    return RunView(run.run_id, RunState.FAILURE, run.created_at, run.started_at, now)


def _close_partitions(
    flow: FlowSpec, table_uri: str, cursor: SupervisorCursor
) -> list[dg.AssetMaterialization]:
    """Materializations for every date the stream's event time has left behind for good."""
    progress = table_progress(table_uri, flow)
    if progress is None:
        return []
    events = []
    first = flow.first_date.isoformat()
    for day in closed_dates(progress, flow.allowed_lateness, cursor.closed_through):
        if day < first:
            continue
        events.append(
            dg.AssetMaterialization(
                asset_key=table_key(flow),
                partition=day,
                description=f"{day} closed: event time reached "
                f"{progress.max_event_time:%Y-%m-%d %H:%M:%S} UTC",
                metadata={
                    "dagster/row_count": dg.MetadataValue.int(progress.rows_by_date.get(day, 0)),
                    "files": dg.MetadataValue.int(progress.files_by_date.get(day, 0)),
                    "table_version": dg.MetadataValue.int(progress.version),
                },
            )
        )
        cursor.closed_through = day
    return events
