"""A use case's always-on run in Dagster: its job (one op running its query until the run is
terminated), its supervisor sensor (one run kept alive, back-off on crash loops, health each
tick) and its health checks runnable on demand. Made by the same always-on builders as a flow's
stream (assets/stream/always_on.py)."""

import time
from collections.abc import Iterator, Sequence
from typing import Any

import dagster as dg
from pyspark.sql.streaming import StreamingQuery

from tidelake.assets.stream.always_on import (
    AlwaysOn,
    Observed,
    build_always_on_job,
    build_supervisor,
)
from tidelake.assets.stream.health import recent_runs
from tidelake.assets.stream.supervisor_decision import Decision, RunView, SupervisorPolicy, decide
from tidelake.assets.tables.keys import use_case_key
from tidelake.assets.usecases.asset_specs import use_case_check_specs
from tidelake.assets.usecases.health import UseCaseHealth
from tidelake.streaming.flow.spec import FlowSpec
from tidelake.streaming.settings import EngineSettings
from tidelake.streaming.stream.query import ProgressHandler
from tidelake.streaming.usecase.freshness import Freshness, FreshnessWindow
from tidelake.streaming.usecase.inputs import InputMissingError
from tidelake.streaming.usecase.position import measure_lag
from tidelake.streaming.usecase.spec import UseCaseSpec
from tidelake.streaming.usecase.stream import UseCaseStream, stream_job_name

FRESHNESS_REPORT_S = 60.0


def freshness_observation(use_case: UseCaseSpec, figures: Freshness) -> dg.AssetObservation:
    """The use case's freshness over the last hour as numbers the asset's page plots."""
    return dg.AssetObservation(
        asset_key=use_case_key(use_case),
        description=f"Seconds from an input version's commit to the end of the batch that "
        f"wrote it, over the run's last {figures.window_s / 60:.0f} minutes (at most an hour).",
        metadata={
            "freshness_p50_s": dg.MetadataValue.float(round(figures.p50_s, 2)),
            "freshness_p99_s": dg.MetadataValue.float(round(figures.p99_s, 2)),
            "freshness_max_s": dg.MetadataValue.float(round(figures.max_s, 2)),
            "freshness_samples": dg.MetadataValue.int(figures.samples),
            "freshness_window_s": dg.MetadataValue.int(round(figures.window_s)),
        },
    )


def use_case_stream(use_case: UseCaseSpec, flow: FlowSpec) -> AlwaysOn[UseCaseStream]:
    """The use case's query as an always-on query."""

    def reporter(
        context: dg.OpExecutionContext, stream: UseCaseStream, _: dict[str, str]
    ) -> ProgressHandler:
        window = FreshnessWindow(stream.input_uri)
        reported_at = time.monotonic()

        def report(query: StreamingQuery, progress: dict[str, Any] | None) -> None:
            nonlocal reported_at
            lag = measure_lag(stream.input_uri, stream.checkpoint, time.time())
            if progress is None:
                context.log.info(f"{query.name}: started, waiting for the first batch")
                return
            context.log.info(
                f"{query.name} batch {progress['batchId']}: {progress['numInputRows']} rows; "
                f"{lag.versions} input versions behind, the oldest unread waiting "
                f"{lag.waiting_s:.1f} s"
            )
            window.record(query.recentProgress)
            if time.monotonic() - reported_at < FRESHNESS_REPORT_S:
                return
            reported_at = time.monotonic()
            figures = window.figures(time.time())
            if figures is not None:
                context.log_event(freshness_observation(use_case, figures))

        return report

    return AlwaysOn[UseCaseStream](
        name=stream_job_name(use_case),
        tag=stream_job_name(use_case),
        description=f"The always-on stream of use case {use_case.name}; its supervisor sensor "
        "keeps one run alive.",
        op_name=f"run_{stream_job_name(use_case)}",
        op_description=f"Streams {flow.table!r} through {use_case.name}'s function into its "
        f"table ({use_case.kind}) until the run is terminated.",
        make_query=lambda settings, _: UseCaseStream(use_case, flow, settings),
        started=lambda s: f"{s.input_uri} -> {s.table_uri} (checkpoint {s.checkpoint})",
        make_reporter=reporter,
        reads_kafka=False,
    )


def use_case_health(
    use_case: UseCaseSpec,
    flow: FlowSpec,
    settings: EngineSettings,
    decision: Decision,
    now: float,
) -> UseCaseHealth:
    lag = measure_lag(
        settings.table_uri(flow.table), settings.checkpoint_uri(use_case.checkpoint_name), now
    )
    return UseCaseHealth(use_case, decision, lag)


def input_missing(use_case: UseCaseSpec, flow: FlowSpec, settings: EngineSettings) -> str | None:
    """Why the use case cannot start yet: its input table does not exist (the flow's first batch
    creates it); a run started now would only fail."""
    try:
        UseCaseStream(use_case, flow, settings).require_input()
    except InputMissingError as exc:
        return str(exc)
    return None


def use_case_definitions_of(
    use_case: UseCaseSpec, flow: FlowSpec, settings: EngineSettings, policy: SupervisorPolicy
) -> tuple[dg.JobDefinition, dg.SensorDefinition, dg.AssetChecksDefinition]:
    """The use case's job, supervisor and health checks."""
    job = build_always_on_job(use_case_stream(use_case, flow), settings)

    def observe(
        context: dg.SensorEvaluationContext,
        _: dict[str, str],
        decision: Decision,
        __: Sequence[RunView],
        now: float,
    ) -> Observed:
        health = use_case_health(use_case, flow, settings, decision, now)
        events, cursor = health.events(context.cursor, now)
        return Observed(events, cursor)

    supervisor = build_supervisor(
        job,
        policy,
        name=f"{stream_job_name(use_case)}_supervisor",
        description=f"Keeps one run of {job.name} alive, backs off on crash loops and records "
        f"{use_case.name}'s health.",
        observe=observe,
        not_ready=lambda: input_missing(use_case, flow, settings),
        reads_kafka=False,
    )

    @dg.multi_asset_check(
        name=f"{stream_job_name(use_case)}_health", specs=use_case_check_specs(use_case)
    )
    def health_checks(context: dg.AssetCheckExecutionContext) -> Iterator[dg.AssetCheckResult]:
        now = time.time()
        decision = decide(recent_runs(context.instance, job.name), now, policy)
        yield from use_case_health(use_case, flow, settings, decision, now).check_results()

    return job, supervisor, health_checks
