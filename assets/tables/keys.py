"""Asset keys and partitions of a flow's assets, shared by the assets and the platform."""

import dagster as dg

from tidelake.streaming.flow.spec import FlowSpec


def topic_key(flow: FlowSpec) -> dg.AssetKey:
    return dg.AssetKey(["kafka", flow.topic])


def table_key(flow: FlowSpec) -> dg.AssetKey:
    return dg.AssetKey(["lake", flow.table])


def quarantine_key(flow: FlowSpec) -> dg.AssetKey:
    return dg.AssetKey(["lake", flow.quarantine_table])


def compaction_key(flow: FlowSpec) -> dg.AssetKey:
    return dg.AssetKey(["lake", f"{flow.table}_compacted"])


def daily_partitions(flow: FlowSpec) -> dg.DailyPartitionsDefinition:
    """UTC days from the flow's first date up to yesterday (today is still open)."""
    return dg.DailyPartitionsDefinition(start_date=flow.first_date.isoformat(), timezone="UTC")
