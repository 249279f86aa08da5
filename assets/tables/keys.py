"""Asset keys and partitions of a flow's assets and of use cases, shared by the assets and the
platform."""

from datetime import UTC, date, datetime

import dagster as dg

from tidelake.streaming.delta.maintenance import first_kept_date
from tidelake.streaming.flow.spec import FlowSpec
from tidelake.streaming.settings import EngineSettings
from tidelake.streaming.usecase.spec import UseCaseSpec


def topic_key(flow: FlowSpec) -> dg.AssetKey:
    return dg.AssetKey(["kafka", flow.topic])


def table_key(flow: FlowSpec) -> dg.AssetKey:
    return dg.AssetKey(["lake", flow.table])


def quarantine_key(flow: FlowSpec) -> dg.AssetKey:
    return dg.AssetKey(["lake", flow.quarantine_table])


def compaction_key(flow: FlowSpec) -> dg.AssetKey:
    return dg.AssetKey(["lake", f"{flow.table}_compacted"])


def daily_partitions(
    flow: FlowSpec, settings: EngineSettings, today: date | None = None
) -> dg.DailyPartitionsDefinition:
    """UTC days up to yesterday (today is still open), from the flow's first date or, if later,
    the oldest date the lake keeps (TIDELAKE_LAKE_RETENTION_DAYS) when the definitions load.

    Dagster OSS cannot wipe a partition's materializations, so a date the daily expiry deleted
    would keep showing as materialized with its old row count and checks; a date before the
    start is no partition at all: not listed, not counted, not offered for a backfill. The start
    moves when the code location loads again; until then the expiry marks each date it deleted
    with an observation (table_maintenance.py)."""
    first_kept = first_kept_date(settings.lake_retention_days, today or datetime.now(UTC).date())
    start = flow.first_date if first_kept is None else max(flow.first_date, first_kept)
    return dg.DailyPartitionsDefinition(start_date=start.isoformat(), timezone="UTC")


def use_case_key(use_case: UseCaseSpec) -> dg.AssetKey:
    """A use case's table, beside the flows' tables under lake/."""
    return dg.AssetKey(["lake", use_case.table])
