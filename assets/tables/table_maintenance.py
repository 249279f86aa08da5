"""Table upkeep as Dagster objects: a daily-partitioned compaction asset per flow, a vacuum job
on a schedule, and an hourly upkeep job that compacts the dates still open and keeps the Delta
logs to their retention. The flow's jobs keep the tables of the use cases built on it too
(UseCaseTables). Compaction and vacuum hold the table's pool slot, so they never overlap with each
other or with a backfill of the same table; the log upkeep commits nothing and needs none, so it
runs even while a backfill holds the slot."""

from collections.abc import Callable, Mapping
from dataclasses import dataclass, field
from datetime import UTC, date, datetime
from functools import partial
from typing import TypeVar

import dagster as dg
from dagster_pyspark import LazyPySparkResource
from deltalake.exceptions import TableNotFoundError
from pydantic import Field

from tidelake.assets.tables.automation import after_blocking_checks
from tidelake.assets.tables.keys import compaction_key, daily_partitions, quarantine_key, table_key
from tidelake.assets.tables.table_backfill import table_pool
from tidelake.streaming.delta.maintenance import (
    DEFAULT_TARGET_FILE_BYTES,
    MIN_VACUUM_RETENTION_HOURS,
    CompactionResult,
    ExpiryResult,
    LogUpkeepResult,
    compact_partition,
    expire_dates,
    first_kept_date,
    upkeep_log,
    vacuum_table,
)
from tidelake.streaming.flow.spec import FlowSpec
from tidelake.streaming.settings import EngineSettings
from tidelake.streaming.usecase.output import PARTITION_COLUMN as USE_CASE_PARTITION_COLUMN
from tidelake.streaming.usecase.upsert_table import (
    RECENT_COMMITS,
    UpsertTableState,
    upsert_table_state,
)


@dataclass(frozen=True)
class UseCaseTables:
    """The tables of the use cases built on one flow (by asset key), which the flow's upkeep
    keeps with its own: a use case's table must not grow costlier with its age either."""

    appended: Mapping[dg.AssetKey, str] = field(default_factory=dict)
    """Append: a file per micro-batch and date, so dates compacted as the flow's are (open ones
    hourly, a closed one with the flow's), logs cut, dates expired, vacuumed."""
    daily: Mapping[dg.AssetKey, str] = field(default_factory=dict)
    """Daily: a commit per day made, a file per day: logs cut, dates expired, vacuumed."""
    upserted: Mapping[dg.AssetKey, str] = field(default_factory=dict)
    """Upsert: its writer compacts its files (auto compaction) and checkpoints and cuts its log
    (streaming/usecase/upsert_table.py), which the hourly upkeep observes; the files each MERGE
    replaced are vacuumed."""

    @property
    def dated(self) -> dict[dg.AssetKey, str]:
        """The date-partitioned tables: dates expired, logs kept by the hourly upkeep."""
        return {**self.appended, **self.daily}

    @property
    def every(self) -> dict[dg.AssetKey, str]:
        return {**self.dated, **self.upserted}


class CompactionConfig(dg.Config):
    target_file_mb: int = Field(
        default=DEFAULT_TARGET_FILE_BYTES // 2**20, ge=1, description="size of compacted files"
    )


class VacuumConfig(dg.Config):
    retention_hours: int | None = Field(
        default=None,
        ge=0,
        description="keep files any snapshot of the last N hours needs (time travel, readers "
        f"and writers in flight); default {MIN_VACUUM_RETENTION_HOURS}, or "
        "TIDELAKE_DELTA_LOG_RETENTION if longer; at least TIDELAKE_DELTA_LOG_RETENTION (shorter "
        f"is refused), below {MIN_VACUUM_RETENTION_HOURS} only when you know nothing reads older "
        "snapshots",
    )


def build_compaction_asset(
    flow: FlowSpec, settings: EngineSettings, appended: Mapping[dg.AssetKey, str]
) -> dg.AssetsDefinition:
    """Compacts one date of the table, of its quarantine and of the Append use cases' tables on
    it (`appended`, observed on their assets); runs by itself once the date is closed."""
    uri = settings.table_uri(flow.table)
    quarantine_uri = settings.table_uri(flow.quarantine_table)

    @dg.asset(
        key=compaction_key(flow),
        deps=[table_key(flow)],
        partitions_def=daily_partitions(flow, settings),
        group_name=flow.name,
        kinds={"delta"},
        owners=list(flow.owners),
        pool=table_pool(flow),
        automation_condition=after_blocking_checks(),
        description=f"Small files of one date of {flow.table}, its quarantine and the tables of "
        "the Append use cases on it rewritten into large ones. "
        "Materialized automatically when the date closes (or is backfilled) and its blocking "
        "quality checks pass, or on demand.",
        metadata={"dagster/uri": uri},
    )
    def compaction(
        context: dg.AssetExecutionContext, config: CompactionConfig
    ) -> dg.MaterializeResult:
        day = context.partition_key
        target = config.target_file_mb * 2**20
        result = compact_partition(uri, flow.partition_column, day, target)
        context.log.info(f"{flow.table} {day}: {_compaction_line(result)}")
        compact = partial(compact_partition, quarantine_uri, flow.partition_column, day, target)
        quarantined = _if_table_exists(context, quarantine_uri, compact)
        if quarantined is not None:
            context.log.info(f"{flow.quarantine_table} {day}: {_compaction_line(quarantined)}")
        for key, use_case_uri in appended.items():
            compact = partial(
                compact_partition, use_case_uri, USE_CASE_PARTITION_COLUMN, day, target
            )
            found = _if_table_exists(context, use_case_uri, compact)
            if found is not None:
                context.log.info(f"{key.to_user_string()} {day}: {_compaction_line(found)}")
                context.log_event(_compacted(key, day, found))
        return dg.MaterializeResult(
            metadata={
                **_compaction_metadata(result),
                "dagster/row_count": result.after.rows,
                **(
                    {}
                    if quarantined is None
                    else {
                        f"quarantine_{k}": v for k, v in _compaction_metadata(quarantined).items()
                    }
                ),
            }
        )

    return compaction


class ExpiryConfig(dg.Config):
    days: int | None = Field(
        default=None,
        ge=0,
        description="days of dates kept (0: every date); unset: TIDELAKE_LAKE_RETENTION_DAYS",
    )


def build_vacuum_job(
    flow: FlowSpec, settings: EngineSettings, use_cases: UseCaseTables
) -> dg.JobDefinition:
    """Expiry then vacuum of the flow's tables and of the use cases' on it: a use case's day
    outlives its input's by no more than the next expiry."""
    flow_tables = _flow_tables(flow, settings)
    tables = {**flow_tables, **use_cases.every}
    partitions = daily_partitions(flow, settings)

    @dg.op(name=f"expire_dates_{flow.name}", pool=table_pool(flow), out=dg.Out(dg.Nothing))
    def expire(context: dg.OpExecutionContext, config: ExpiryConfig) -> None:
        days = settings.lake_retention_days if config.days is None else config.days
        first_kept, results = expire_old_dates(context, flow_tables, flow.partition_column, days)
        expire_old_dates(context, use_cases.dated, USE_CASE_PARTITION_COLUMN, days)
        expired = results.get(table_key(flow))
        if first_kept is not None and expired is not None:
            for event in _expired_partitions(flow, partitions, expired.dates, first_kept):
                context.log_event(event)

    @dg.op(name=f"vacuum_{flow.name}", pool=table_pool(flow), ins={"after": dg.In(dg.Nothing)})
    def vacuum(
        context: dg.OpExecutionContext, config: VacuumConfig, spark: LazyPySparkResource
    ) -> None:
        vacuum_tables(context, tables, spark, config.retention_hours)

    @dg.job(
        name=f"{flow.name}_vacuum",
        description=f"Deletes the dates of {flow.table}, its quarantine and its use cases' "
        "date-partitioned tables older than the lake's retention (TIDELAKE_LAKE_RETENTION_DAYS), "
        "then, in these and its upsert use cases' tables, the files that no snapshot within the "
        "vacuum's retention needs (orphans of failed batches too), then checkpoints the Delta "
        "logs.",
    )
    def vacuum_job() -> None:
        vacuum(expire())

    return vacuum_job


EXPIRED = "expired"
"""Metadata label of the observation that marks a date partition the lake's retention deleted."""


def _expired_partitions(
    flow: FlowSpec,
    partitions: dg.DailyPartitionsDefinition,
    dates: tuple[str, ...],
    first_kept: date,
) -> list[dg.AssetObservation]:
    """An observation of each deleted date that is still a partition of the loaded definitions
    (keys.daily_partitions: it stops being one when the code location loads again): its page
    then says the rows are gone, under the materialization Dagster cannot wipe."""
    start = partitions.start.date()
    return [
        dg.AssetObservation(
            asset_key=table_key(flow),
            partition=day,
            description=f"{day} deleted by the lake's retention (TIDELAKE_LAKE_RETENTION_DAYS: "
            f"the oldest date kept is {first_kept}); it is no partition once the code location "
            "loads again",
            metadata={EXPIRED: True, "dagster/row_count": 0, "first_kept_date": str(first_kept)},
        )
        for day in dates
        if date.fromisoformat(day) >= start
    ]


def build_vacuum_schedule(flow: FlowSpec, job: dg.JobDefinition) -> dg.ScheduleDefinition:
    return dg.ScheduleDefinition(
        name=f"{flow.name}_vacuum_daily",
        job=job,
        cron_schedule="30 3 * * *",
        execution_timezone="UTC",
        default_status=dg.DefaultScheduleStatus.RUNNING,
        description="Daily at 03:30 UTC: the dates older than TIDELAKE_LAKE_RETENTION_DAYS "
        "deleted, then a vacuum with the default 7-day retention.",
    )


T = TypeVar("T")


def expire_old_dates(
    context: dg.OpExecutionContext, tables: Mapping[dg.AssetKey, str], column: str, days: int
) -> tuple[date | None, dict[dg.AssetKey, ExpiryResult]]:
    """Delete the dates of each table older than `days` (the lake's retention; 0 keeps every
    date), logged and observed on its asset: the first date kept (None: every date), and the
    result of each table that exists."""
    first_kept = first_kept_date(days, datetime.now(UTC).date())
    if first_kept is None:
        context.log.info("the lake's retention is 0: every date is kept")
        return None, {}
    results = {}
    for key, uri in tables.items():
        result = _if_table_exists(context, uri, partial(expire_dates, uri, column, first_kept))
        if result is None:
            continue
        results[key] = result
        context.log.info(
            f"{uri}: {len(result.dates)} dates before {first_kept} deleted "
            f"({result.removed_files} files, {result.removed_rows} rows)"
        )
        context.log_event(
            dg.AssetObservation(
                asset_key=key,
                metadata={
                    "expired_dates": len(result.dates),
                    "expired_files": result.removed_files,
                    "expired_rows": result.removed_rows,
                    "first_kept_date": first_kept.isoformat(),
                    "table_version": result.table_version,
                },
            )
        )
    return first_kept, results


def vacuum_tables(
    context: dg.OpExecutionContext,
    tables: Mapping[dg.AssetKey, str],
    spark: LazyPySparkResource,
    retention_hours: int | None = None,
) -> None:
    """Vacuum each table that exists (delta/maintenance.py vacuum_table), logged and observed
    on its asset. The run's Spark session starts only for a table delta-rs cannot vacuum
    safely (deletion vectors that delta-spark wrote): delta-spark's VACUUM does it."""
    for key, uri in tables.items():
        vacuum = partial(vacuum_table, uri, retention_hours, lambda: spark.spark_session)
        result = _if_table_exists(context, uri, vacuum)
        if result is None:
            continue
        context.log.info(f"{uri}: removed {result.removed_files} files")
        context.log_event(
            dg.AssetObservation(
                asset_key=key,
                metadata={
                    "vacuum_removed_files": result.removed_files,
                    "vacuum_retention_hours": result.retention_hours,
                    "table_version": result.table_version,
                },
            )
        )


def _flow_tables(flow: FlowSpec, settings: EngineSettings) -> dict[dg.AssetKey, str]:
    """The flow's Delta tables that upkeep looks after: the table and its quarantine."""
    return {
        table_key(flow): settings.table_uri(flow.table),
        quarantine_key(flow): settings.table_uri(flow.quarantine_table),
    }


def _if_table_exists(
    context: dg.OpExecutionContext | dg.AssetExecutionContext, uri: str, upkeep: Callable[[], T]
) -> T | None:
    """upkeep(), or None, logged, for a table not created yet (a quarantine nothing was refused
    to, a flow whose stream never ran)."""
    try:
        return upkeep()
    except TableNotFoundError:
        context.log.info(f"{uri}: no table yet")
        return None


def _compaction_line(result: CompactionResult) -> str:
    return f"{result.before.files} files -> {result.after.files} in {result.seconds:.1f}s"


def _compacted(
    key: dg.AssetKey, day: str, result: CompactionResult, label: str = "date_compacted"
) -> dg.AssetObservation:
    """The observation of a compaction of date `day` on a table's asset (one the run does not
    materialize: the quarantine's, a use case's)."""
    return dg.AssetObservation(asset_key=key, metadata={label: day, **_compaction_metadata(result)})


def _compaction_metadata(result: CompactionResult) -> dict[str, int | float]:
    return {
        "files_before": result.before.files,
        "files_after": result.after.files,
        "bytes_before": result.before.bytes,
        "bytes_after": result.after.bytes,
        "seconds": round(result.seconds, 2),
        "table_version": result.table_version,
    }


UNFINISHED = [
    dg.DagsterRunStatus.QUEUED,
    dg.DagsterRunStatus.NOT_STARTED,
    dg.DagsterRunStatus.STARTING,
    dg.DagsterRunStatus.STARTED,
    dg.DagsterRunStatus.CANCELING,
]

TABLE_UPKEEP_CRON = "7 * * * *"
"""Hourly. The stream's commits delete no expired log entry (the cleanup lists the whole log), so
the log holds the retention plus at most about an hour of commits; and a date's small files (a
stream writes one or two a micro-batch) are at most an hour's until the date closes
(docs/benchmarks.md, issue 38)."""


def build_table_upkeep_job(
    flow: FlowSpec, settings: EngineSettings, use_cases: UseCaseTables
) -> dg.JobDefinition:
    flow_tables = _flow_tables(flow, settings)
    compacted = [(key, uri, flow.partition_column) for key, uri in flow_tables.items()] + [
        (key, uri, USE_CASE_PARTITION_COLUMN) for key, uri in use_cases.appended.items()
    ]
    logged = {**flow_tables, **use_cases.dated}
    upserted = use_cases.upserted

    @dg.op(name=f"compact_open_dates_{flow.name}", pool=table_pool(flow))
    def compact_open_dates(context: dg.OpExecutionContext, config: CompactionConfig) -> None:
        """Compacts the dates the stream may still write (FlowSpec.open_dates), in its tables
        and its Append use cases', so that their small files stay an hour's until the date's
        own compaction: a checkpoint carries every live file, a reader of the date opens each
        one. A stream catching up after an outage writes dates closed by the clock in large
        batches (few files); their compaction follows their close."""
        days = [d.isoformat() for d in flow.open_dates(datetime.now(UTC))]
        target = config.target_file_mb * 2**20
        for key, uri, column in compacted:
            for day in days:
                compact = partial(compact_partition, uri, column, day, target)
                result = _if_table_exists(context, uri, compact)
                if result is None:
                    break
                context.log.info(f"{uri} {day}: {_compaction_line(result)}")
                if result.before.files > result.after.files:
                    context.log_event(_compacted(key, day, result, "open_date_compacted"))

    @dg.op(name=f"log_upkeep_{flow.name}")
    def log_upkeep(context: dg.OpExecutionContext) -> None:
        _observe_upkeep(context, logged, upkeep_log, _log_upkeep_report)
        _observe_upkeep(context, upserted, upsert_table_state, _upsert_table_report)

    @dg.job(
        name=f"{flow.name}_table_upkeep",
        description=f"Compacts the dates of {flow.table}, its quarantine and its Append use "
        "cases' tables that are still open, checkpoints their Delta logs (and its Daily use "
        "cases') and deletes the entries older than the log retention "
        "(TIDELAKE_DELTA_LOG_RETENTION): what the stream's commits leave out so that their cost "
        "does not grow with the table's age or the date's. Its Upsert use cases' writers keep "
        "their own files and logs, observed here. Only the compaction takes the table's "
        "pool slot: while a backfill holds it, the log upkeep runs and the compaction waits.",
    )
    def table_upkeep_job() -> None:
        compact_open_dates()
        log_upkeep()

    return table_upkeep_job


def _observe_upkeep(
    context: dg.OpExecutionContext,
    tables: Mapping[dg.AssetKey, str],
    upkeep: Callable[[str], T],
    report: Callable[[T], tuple[str, dict[str, int | float]]],
) -> None:
    """upkeep(uri) of each table that exists, its report's line logged and its metadata
    observed on the table's asset."""
    for key, uri in tables.items():
        result = _if_table_exists(context, uri, partial(upkeep, uri))
        if result is None:
            continue
        line, metadata = report(result)
        context.log.info(f"{uri}: {line}")
        context.log_event(dg.AssetObservation(asset_key=key, metadata=metadata))


def _log_upkeep_report(result: LogUpkeepResult) -> tuple[str, dict[str, int | float]]:
    line = (
        f"checkpoint at version {result.table_version} in {result.checkpoint_seconds:.1f}s; log "
        f"files {result.entries_before} -> {result.entries_after} in "
        f"{result.cleanup_seconds:.1f}s"
    )
    if result.properties_set:
        line += f"; table properties set: {result.properties_set}"
    return line, {
        "delta_log_files": result.entries_after,
        "delta_log_files_removed": result.entries_before - result.entries_after,
        "checkpoint_seconds": round(result.checkpoint_seconds, 2),
        "log_cleanup_seconds": round(result.cleanup_seconds, 2),
        "table_version": result.table_version,
    }


def _upsert_table_report(state: UpsertTableState) -> tuple[str, dict[str, int | float]]:
    line = (
        f"{state.live_files} files, log files {state.delta_log_files}, {state.auto_compactions} "
        f"auto compactions in its last {RECENT_COMMITS} commits (its writer's upkeep)"
    )
    return line, {
        "live_files": state.live_files,
        "delta_log_files": state.delta_log_files,
        f"auto_compactions_in_last_{RECENT_COMMITS}_commits": state.auto_compactions,
        "table_version": state.table_version,
    }


def build_table_upkeep_schedule(flow: FlowSpec, job: dg.JobDefinition) -> dg.ScheduleDefinition:
    def no_run_in_progress(context: dg.ScheduleEvaluationContext) -> bool:
        """One upkeep at a time: a run waiting for the slot behind a long backfill is enough."""
        runs = context.instance.get_runs(
            dg.RunsFilter(job_name=job.name, statuses=UNFINISHED), limit=1
        )
        return not runs

    return dg.ScheduleDefinition(
        name=f"{flow.name}_table_upkeep_hourly",
        job=job,
        cron_schedule=TABLE_UPKEEP_CRON,
        should_execute=no_run_in_progress,
        execution_timezone="UTC",
        default_status=dg.DefaultScheduleStatus.RUNNING,
        description="Hourly table upkeep: the open dates' small files compacted; a checkpoint of "
        "each log, then its entries older than the log retention deleted.",
    )
