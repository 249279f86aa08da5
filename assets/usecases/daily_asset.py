"""A Daily use case as a daily-partitioned asset with the same partitions as its input's table:
day D is made when the input's day D is materialized (the supervisor closing it, or a backfill),
through Dagster's automation (tables/automation.py's after_blocking_checks: once the input day's
blocking checks pass, in the same run when they are requested together), and made again only
when the input day is materialized again. Its expectations are checked on the day it made."""

from datetime import date
from typing import Any

import dagster as dg
import pyarrow as pa
from pyspark.sql import SparkSession

from tidelake.assets.dagster_failures import step_failure
from tidelake.assets.quality.expectations import Validation, validate_table
from tidelake.assets.quality.partition_checks import EXPECTATIONS, validation_verdict
from tidelake.assets.tables.automation import after_blocking_checks
from tidelake.assets.tables.keys import daily_partitions, table_key, use_case_key
from tidelake.assets.usecases.asset_specs import use_case_attributes
from tidelake.streaming.settings import EngineSettings
from tidelake.streaming.spark.session import host_session
from tidelake.streaming.usecase.daily import BuiltDay, DaySource, build_day
from tidelake.streaming.usecase.spec import UseCaseSpec


def use_case_pool(use_case: UseCaseSpec) -> str:
    """The pool of what writes a Daily use case's table (its days, its refresh): one slot, so
    two never replace its days at once."""
    return f"tidelake_use_case_{use_case.name}"


def build_daily_asset(
    use_case: UseCaseSpec,
    source: DaySource,
    settings: EngineSettings,
    schema: pa.Schema | None = None,
) -> dg.AssetsDefinition:
    key = use_case_key(use_case)
    partitions = daily_partitions(source.flow, settings)
    checks = (
        [
            dg.AssetCheckSpec(
                EXPECTATIONS,
                asset=key,
                description=f"{use_case.name}'s declared Great Expectations on the day it made, "
                "on Spark.",
                partitions_def=partitions,
            )
        ]
        if use_case.expectations
        else []
    )

    @dg.asset(
        key=key,
        partitions_def=partitions,
        automation_condition=day_automation(source),
        check_specs=checks,
        required_resource_keys={"spark"},
        pool=use_case_pool(use_case),
        **use_case_attributes(use_case, source.flow, settings, day_deps(source), schema),
    )
    def daily_use_case(context: dg.AssetExecutionContext) -> dg.MaterializeResult:
        day = date.fromisoformat(context.partition_key)
        with step_failure(), host_session(context.resources.spark) as spark:
            built = build_day(spark, use_case, source, settings, day)
            context.log.info(
                f"{use_case.name} {day}: {built.rows} rows from {source.described}'s table, "
                f"version {built.input_version}, in {built.seconds:.1f} s (table version "
                f"{built.table_version})"
            )
            validation = day_validation(spark, use_case, settings, day)
        check_results = (
            []
            if validation is None
            else [dg.AssetCheckResult(check_name=EXPECTATIONS, **validation_verdict(validation))]
        )
        return dg.MaterializeResult(metadata=day_metadata(built), check_results=check_results)

    return daily_use_case


def day_deps(source: DaySource) -> list[dg.AssetKey]:
    """The edges into a Daily use case: from the table it reads, and from its flow's table when
    that is a streaming use case's (whose asset has no days: the flow's days drive it)."""
    if source.reads is None:
        return [table_key(source.flow)]
    if source.reads.streaming:
        return [use_case_key(source.reads), table_key(source.flow)]
    return [use_case_key(source.reads)]


def day_automation(source: DaySource) -> dg.AutomationCondition:
    """after_blocking_checks on the days of what it reads; a streaming use case's table, which
    is never materialized, is left out of "missing" and "in progress" (the day waits for that
    use case to catch up instead, daily.py)."""
    condition = after_blocking_checks()
    if source.reads is None or not source.reads.streaming:
        return condition
    stream = dg.AssetSelection.assets(use_case_key(source.reads))
    AC = dg.AutomationCondition
    return condition.replace("any_deps_missing", AC.any_deps_missing().ignore(stream)).replace(
        "any_deps_in_progress", AC.any_deps_in_progress().ignore(stream)
    )


def day_metadata(built: BuiltDay) -> dict[str, Any]:
    """A made day's materialization metadata (its asset and the full refresh report it)."""
    return {
        "dagster/row_count": dg.MetadataValue.int(built.rows),
        "input_version": dg.MetadataValue.int(built.input_version),
        "table_version": dg.MetadataValue.int(built.table_version),
        "seconds": dg.MetadataValue.float(round(built.seconds, 2)),
    }


def day_validation(
    spark: SparkSession, use_case: UseCaseSpec, settings: EngineSettings, day: date
) -> Validation | None:
    """The use case's expectations on a day of its table; None when it declares none."""
    factory = use_case.expectations
    if factory is None:
        return None
    return validate_table(spark, settings.table_uri(use_case.table), list(factory()), str(day))
