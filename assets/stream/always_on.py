"""An always-on query as Dagster objects: a job whose one op runs the query until the run is
terminated, and a supervisor sensor that keeps exactly one run of it alive.

Every flow's stream and the anomaly detector are made here; what differs (the query, its
progress report, what the supervisor records besides its decision) is passed in.

The op blocks until the run is terminated. Terminating from the UI sends the run worker SIGINT;
the op then stops the query between batches, so the checkpoint stays consistent, and ends the
run as canceled. Dagster has no always-on run: the sensor makes one, deciding each tick from the
job's recent runs (supervisor_decision.decide) whether to leave a live run alone, back off, or
launch.
"""

import os
import time
import uuid
from collections.abc import Callable, Sequence
from dataclasses import dataclass
from typing import Any, Generic, Protocol, TypeVar

import dagster as dg
from dagster_pyspark import LazyPySparkResource
from pydantic import Field
from pyspark.sql import SparkSession
from pyspark.sql.streaming import StreamingQuery

from tidelake.assets.dagster_failures import step_failure
from tidelake.assets.resources import KafkaResource
from tidelake.assets.stream.health import recent_runs
from tidelake.assets.stream.restart_pause import restarts_paused
from tidelake.assets.stream.supervisor_decision import (
    Decision,
    RunState,
    RunView,
    SupervisorPolicy,
    decide,
)
from tidelake.streaming.errors import ConfigError, TidelakeError
from tidelake.streaming.settings import EngineSettings
from tidelake.streaming.spark.session import host_session
from tidelake.streaming.stream.query import ProgressHandler, run_query
from tidelake.streaming.stream.stop_signals import graceful_stop_signals

STREAM_TAG = "tidelake/stream"
"""Run tag naming an always-on query; the instance allows one run per value (dagster.yaml)."""
STALE_RUN_AFTER_S = 300.0
"""A STARTED run that logged nothing for this long has lost its worker (it reports progress every
30 s by default); the supervisor marks it failed so that it can be replaced."""

SupervisorEvent = dg.AssetMaterialization | dg.AssetObservation | dg.AssetCheckEvaluation


class StreamRunConfig(dg.Config):
    """Per-run knobs of an always-on query; defaults come from TIDELAKE_* settings."""

    max_offsets_per_trigger: int | None = Field(
        default=None, ge=1, description="records per micro-batch at most"
    )
    trigger_interval: str | None = Field(
        default=None,
        description='processing-time trigger of a flow stream, e.g. "5 seconds" (the anomaly '
        "detector keeps its own, 5 seconds)",
    )
    progress_interval_s: float = Field(
        default=30.0,
        gt=0,
        le=120,
        description="seconds between progress reports; they are the run's heartbeat, and the "
        f"supervisor replaces a run silent for {STALE_RUN_AFTER_S:.0f} s",
    )

    def run_settings(self, settings: EngineSettings) -> EngineSettings:
        chosen = {
            "max_offsets_per_trigger": self.max_offsets_per_trigger,
            "trigger_interval": self.trigger_interval,
        }
        return settings.model_copy(update={k: v for k, v in chosen.items() if v is not None})


class AlwaysOnQuery(Protocol):
    """What the op needs of a query: checks before Spark starts, and the start itself."""

    def preflight(self) -> None: ...

    def start(self, spark: SparkSession) -> StreamingQuery: ...

    def explain_failure(self, message: str) -> str: ...

    def batch_error(self) -> TidelakeError | None: ...


Query = TypeVar("Query", bound=AlwaysOnQuery)


@dataclass(frozen=True)
class AlwaysOn(Generic[Query]):
    """One always-on query: its job's name, what it does, and how to make and watch it."""

    name: str
    """The job's name."""
    tag: str
    """The value of its STREAM_TAG: one run at a time per value."""
    description: str
    op_name: str
    op_description: str
    make_query: Callable[[EngineSettings, dict[str, str]], Query]
    started: Callable[[Query], str]
    """The log line once preflight passed: what the run reads and writes."""
    make_reporter: Callable[[dg.OpExecutionContext, Query, dict[str, str]], ProgressHandler]
    reads_kafka: bool = True
    """Whether the query reads Kafka (a use case reads a Delta table): only then is a broker
    needed by the run and its supervisor."""


def build_always_on_job(query: AlwaysOn[Any], settings: EngineSettings) -> dg.JobDefinition:
    """The job whose run is the always-on query."""

    @dg.op(
        name=query.op_name,
        description=query.op_description,
        tags={"dagster/kind/spark": "", "dagster/kind/kafka": ""},
    )
    def run_query(
        context: dg.OpExecutionContext,
        config: StreamRunConfig,
        kafka: KafkaResource,
        spark: LazyPySparkResource,
    ) -> None:
        run_settings = config.run_settings(settings)
        conf = kafka.client_config() if query.reads_kafka else {}
        running = query.make_query(run_settings, conf)
        with step_failure():
            running.preflight()
        context.log.info(f"stream worker pid {os.getpid()}: {query.started(running)}")
        reporter = query.make_reporter(context, running, conf)
        with host_session(spark) as session:
            run_until_stopped(
                context,
                lambda: running.start(session),
                config.progress_interval_s,
                reporter,
                running.explain_failure,
                running.batch_error,
            )

    @dg.job(
        name=query.name,
        description=query.description,
        tags={
            STREAM_TAG: query.tag,
            # restarts are the supervisor's job (with back-off), not the run-retry daemon's
            "dagster/max_retries": "0",
        },
        executor_def=dg.in_process_executor,
    )
    def always_on_job() -> None:
        run_query()

    return always_on_job


def run_until_stopped(
    context: dg.OpExecutionContext,
    start: Callable[[], StreamingQuery],
    progress_interval_s: float,
    on_progress: ProgressHandler,
    explain: Callable[[str], str] = str,
    batch_error: Callable[[], TidelakeError | None] = lambda: None,
) -> None:
    """Run a query in an op until the run is terminated (SIGINT/SIGTERM: stop between batches,
    end the run canceled) or the query fails (a Failure with its error)."""
    with graceful_stop_signals() as stop, step_failure():
        run_query(start, stop, progress_interval_s, on_progress, explain, batch_error)
    if stop.is_set():
        context.log.info("stream stopped gracefully; checkpoint is consistent")
        raise dg.DagsterExecutionInterruptedError()


@dataclass(frozen=True)
class Observed:
    """What a supervisor records on a tick besides its decision, and its cursor after it."""

    events: Sequence[SupervisorEvent] = ()
    cursor: str | None = None


Observe = Callable[
    [dg.SensorEvaluationContext, dict[str, str], Decision, Sequence[RunView], float], Observed
]
"""(context, Kafka settings, the tick's decision, the runs it was made from, now) -> what to
record."""


def build_supervisor(
    job: dg.JobDefinition,
    policy: SupervisorPolicy,
    *,
    name: str,
    description: str,
    observe: Observe | None = None,
    not_ready: Callable[[], str | None] = lambda: None,
    reads_kafka: bool = True,
) -> dg.SensorDefinition:
    """The sensor that keeps one run of `job` alive, backs off on crash loops and replaces runs
    whose worker was lost; `observe` adds what it records each tick (health, closed days);
    `not_ready` says why no run may start yet (a use case's input table not there), or None."""
    tag = job.tags[STREAM_TAG]

    @dg.sensor(
        name=name,
        job=job,
        minimum_interval_seconds=policy.interval_s,
        default_status=dg.DefaultSensorStatus.RUNNING,
        description=description,
    )
    def supervise(context: dg.SensorEvaluationContext, kafka: KafkaResource) -> dg.SensorResult:
        now = time.time()
        instance = context.instance
        runs = [fail_if_stale(instance, r, now) for r in recent_runs(instance, job.name)]
        try:
            conf = kafka.client_config() if reads_kafka else {}
        except ConfigError as exc:
            return dg.SensorResult(skip_reason=f"Kafka is not configured: {exc}")
        decision = decide(runs, now, policy)
        observed = observe(context, conf, decision, runs, now) if observe else Observed()
        events = list(observed.events)
        paused = (restarts_paused(instance) or not_ready()) if decision.launch else None
        if not decision.launch or paused:
            reason = f"{decision.reason}; not now: {paused}" if paused else decision.reason
            # the tick keeps the reason; a log line here would be a captured-log file per tick
            # in the instance's storage, which nothing ever deletes
            return dg.SensorResult(skip_reason=reason, cursor=observed.cursor, asset_events=events)
        context.log.info(decision.reason)
        request = dg.RunRequest(
            run_key=f"{tag}-{uuid.uuid4().hex[:12]}",
            # the reason names the failed run's error line (bounded by health.one_line)
            tags={STREAM_TAG: tag, "tidelake/supervisor_reason": decision.reason[:1000]},
        )
        return dg.SensorResult(run_requests=[request], cursor=observed.cursor, asset_events=events)

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
    why = f"stream run silent for {now - last:.0f}s: its worker is lost"
    instance.report_engine_event(
        f"{why}; marking it failed so the supervisor can replace it", dagster_run
    )
    instance.report_run_failed(dagster_run, message=why)
    return RunView(run.run_id, RunState.FAILURE, run.created_at, run.started_at, now, why)
