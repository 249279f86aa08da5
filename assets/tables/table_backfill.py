"""Materializing date partitions of a flow's table: a backfill from Kafka (streaming.backfill).

A range of dates runs as one run and one Spark job (single-run backfill policy) and replaces the
dates in one Delta commit. The stream keeps running meanwhile; see
streaming/batch/backfill.py for why nothing is lost or doubled.
"""

from typing import Any

import dagster as dg

from tidelake.assets.dagster_failures import step_failure
from tidelake.streaming.batch.backfill import (
    BackfillResult,
    backfill_dates,
    plan_backfill,
)
from tidelake.streaming.flow.spec import FlowSpec
from tidelake.streaming.settings import EngineSettings
from tidelake.streaming.spark.session import host_session


def table_pool(flow: FlowSpec) -> str:
    """Concurrency pool of the jobs that rewrite a table (backfill, compaction, vacuum): the
    instance gives each pool one slot, so they never overlap on one table."""
    return f"tidelake_table_{flow.name}"


def build_table_asset(
    flow: FlowSpec, settings: EngineSettings, spec: dg.AssetSpec
) -> dg.AssetsDefinition:
    """The table asset: written continuously by the stream, rebuilt by date on request."""

    @dg.multi_asset(
        name=f"backfill_{flow.name}",
        specs=[spec],
        backfill_policy=dg.BackfillPolicy.single_run(),
        required_resource_keys={"kafka", "spark"},
        pool=table_pool(flow),
    )
    def backfill(context: dg.AssetExecutionContext) -> dg.MaterializeResult:
        dates = list(context.partition_keys)
        kafka_conf = context.resources.kafka.client_config()
        with step_failure():
            plan_backfill(flow, dates, settings, kafka_conf)  # refusals before Spark starts
            with host_session(context.resources.spark) as spark:
                result = backfill_dates(spark, flow, dates, settings, kafka_conf)
        plan = result.plan
        context.log.info(
            f"backfill {dates[0]}..{dates[-1]}: {plan.records} Kafka records, window "
            f"{plan.window[0]:%Y-%m-%d %H:%M} .. {plan.window[1]:%Y-%m-%d %H:%M} UTC, table "
            f"version {plan.read_version}"
        )
        return dg.MaterializeResult(metadata=_metadata(result))

    return backfill


def _metadata(result: BackfillResult) -> dict[str, Any]:
    rate = result.plan.records / result.seconds if result.seconds else 0.0
    return {
        "dagster/row_count": dg.MetadataValue.int(result.rows),
        "rows_by_date": dg.MetadataValue.json(result.rows_by_date),
        "kafka_records_read": dg.MetadataValue.int(result.plan.records),
        "records_per_second": dg.MetadataValue.float(round(rate, 1)),
        "seconds": dg.MetadataValue.float(round(result.seconds, 2)),
        "table_version": dg.MetadataValue.int(result.table_version),
        "read_version": dg.MetadataValue.int(result.plan.read_version),
    }
