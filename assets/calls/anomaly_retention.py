"""The lake's date retention for the detector's anomalies table: the daily job that deletes its
dates older than TIDELAKE_LAKE_RETENTION_DAYS, then the files no snapshot of the last week
needs, as every flow's `<flow>_vacuum` job does for the flow's own tables."""

import dagster as dg
from dagster_pyspark import LazyPySparkResource

from tidelake.assets.calls.detector_job import ANOMALIES_KEY
from tidelake.assets.tables.table_maintenance import ExpiryConfig, expire_old_dates, vacuum_tables
from tidelake.streaming.calls.anomaly.detector import (
    ANOMALIES_PARTITION_COLUMN,
    ANOMALIES_TABLE,
    DETECTOR_NAME,
)
from tidelake.streaming.settings import EngineSettings


def build_anomalies_retention_job(settings: EngineSettings) -> dg.JobDefinition:
    tables = {ANOMALIES_KEY: settings.table_uri(ANOMALIES_TABLE)}

    @dg.op(name=f"expire_dates_{ANOMALIES_TABLE}", out=dg.Out(dg.Nothing))
    def expire(context: dg.OpExecutionContext, config: ExpiryConfig) -> None:
        days = settings.lake_retention_days if config.days is None else config.days
        expire_old_dates(context, tables, ANOMALIES_PARTITION_COLUMN, days)

    @dg.op(name=f"vacuum_{ANOMALIES_TABLE}", ins={"after": dg.In(dg.Nothing)})
    def vacuum(context: dg.OpExecutionContext, spark: LazyPySparkResource) -> None:
        vacuum_tables(context, tables, spark)

    @dg.job(
        name=f"{ANOMALIES_TABLE}_vacuum",
        description=f"Deletes the dates of {ANOMALIES_TABLE} older than the lake's retention "
        f"(TIDELAKE_LAKE_RETENTION_DAYS), alongside the {DETECTOR_NAME}'s appends, then the "
        "files that no snapshot of the last week needs, then checkpoints the Delta log.",
    )
    def anomalies_vacuum_job() -> None:
        vacuum(expire())

    return anomalies_vacuum_job


def build_anomalies_retention_schedule(job: dg.JobDefinition) -> dg.ScheduleDefinition:
    return dg.ScheduleDefinition(
        name=f"{job.name}_daily",
        job=job,
        cron_schedule="45 3 * * *",
        execution_timezone="UTC",
        default_status=dg.DefaultScheduleStatus.RUNNING,
        description="Daily at 03:45 UTC: the anomalies' dates older than "
        "TIDELAKE_LAKE_RETENTION_DAYS deleted, then a vacuum with the default 7-day retention.",
    )
