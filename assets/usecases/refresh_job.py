"""A use case's full refresh as a UI action: the job `<use case>_refresh` (Jobs, or the use
case's asset page -> its job -> Launchpad), what `tidelake use-case refresh` does
(streaming/usecase/refresh.py):

- a Daily use case: its table deleted and every day of its input made again in the run, each day
  reported as a materialization of its partition with its expectations' verdict;
- a streaming one: the refresh requested, then its live run terminated; its supervisor starts it
  again and that start rebuilds the table from the whole input.
"""

import dagster as dg

from tidelake.assets.dagster_failures import step_failure
from tidelake.assets.quality.partition_checks import EXPECTATIONS, validation_verdict
from tidelake.assets.tables.keys import use_case_key
from tidelake.assets.tables.table_maintenance import UNFINISHED
from tidelake.assets.usecases.daily_asset import day_metadata, day_validation, use_case_pool
from tidelake.streaming.settings import EngineSettings
from tidelake.streaming.spark.session import host_session
from tidelake.streaming.usecase.daily import DaySource
from tidelake.streaming.usecase.refresh import refresh_daily, request_refresh
from tidelake.streaming.usecase.spec import UseCaseSpec
from tidelake.streaming.usecase.stream import stream_job_name


def refresh_job_name(use_case: UseCaseSpec) -> str:
    return f"{use_case.name}_refresh"


def build_refresh_job(
    use_case: UseCaseSpec, source: DaySource, settings: EngineSettings
) -> dg.JobDefinition:
    if use_case.streaming:
        refresh = _streaming_refresh_op(use_case, settings)
        how = " (its stream restarted; the restart rebuilds it)."
    else:
        refresh = _daily_refresh_op(use_case, source, settings)
        how = ", every day of it, in this run."

    @dg.job(
        name=refresh_job_name(use_case),
        description=f"Full refresh of use case {use_case.name} after its function changed: its "
        f"table rebuilt from its input{how}",
        tags={"tidelake/use_case": use_case.name},
    )
    def refresh_job() -> None:
        refresh()

    return refresh_job


def _daily_refresh_op(
    use_case: UseCaseSpec, source: DaySource, settings: EngineSettings
) -> dg.OpDefinition:
    key = use_case_key(use_case)

    @dg.op(
        name=f"refresh_{use_case.name}",
        required_resource_keys={"spark"},
        pool=use_case_pool(use_case),
    )
    def refresh_daily_use_case(context: dg.OpExecutionContext) -> None:
        with step_failure(), host_session(context.resources.spark) as spark:
            for built in refresh_daily(spark, use_case, source, settings):
                day = built.day.isoformat()
                context.log.info(f"{use_case.name} {day}: {built.rows} rows")
                context.log_event(
                    dg.AssetMaterialization(key, partition=day, metadata=day_metadata(built))
                )
                validation = day_validation(spark, use_case, settings, built.day)
                if validation is not None:  # an op cannot log a check's result: report it
                    context.instance.report_runless_asset_event(
                        dg.AssetCheckEvaluation(
                            asset_key=key,
                            check_name=EXPECTATIONS,
                            partition=day,
                            **validation_verdict(validation),
                        )
                    )

    return refresh_daily_use_case


def _streaming_refresh_op(use_case: UseCaseSpec, settings: EngineSettings) -> dg.OpDefinition:
    @dg.op(name=f"refresh_{use_case.name}")
    def refresh_streaming_use_case(context: dg.OpExecutionContext) -> None:
        marker = request_refresh(use_case, settings)
        context.log.info(f"refresh requested ({marker}); its next start rebuilds the table")
        runs = context.instance.get_runs(
            dg.RunsFilter(job_name=stream_job_name(use_case), statuses=UNFINISHED)
        )
        for run in runs:
            context.instance.run_coordinator.cancel_run(run.run_id)
            context.log.info(f"terminated run {run.run_id}; its supervisor starts the stream again")
        if not runs:
            context.log.info("no run of the stream is up: it refreshes when it starts next")

    return refresh_streaming_use_case
