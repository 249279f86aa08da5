"""The assets of a flow, as the Dagster UI shows them: its Kafka topic and its Delta tables.

The stream writes the tables continuously, outside any materialization, so they are declared as
asset specs; the supervisor sensor records their health and marks a date partition materialized
once the stream has passed, in every partition of the topic, a record Kafka stamped after that
day's close (its end plus the flow's allowed lateness, FlowSpec.closes_at): Kafka's clock, not
the events' own time.
"""

from __future__ import annotations

from datetime import date, timedelta

import dagster as dg
import pyarrow as pa

from tidelake.assets.tables.keys import (
    daily_partitions,
    quarantine_key,
    table_key,
    topic_key,
)
from tidelake.streaming.flow.spec import FlowSpec
from tidelake.streaming.flow.table_schema import column_doc, table_schema
from tidelake.streaming.settings import EngineSettings

STREAM_ALIVE = "stream_alive"
LAG_BELOW_THRESHOLD = "lag_below_threshold"


def column_schema(schema: pa.Schema) -> dg.TableSchema:
    """A table's columns as the UI lists them, with their docs (table_schema.column_doc; the
    engine's internal `_` columns left out)."""
    return dg.TableSchema(
        columns=[
            dg.TableColumn(f.name, str(f.type), description=column_doc(f) or None)
            for f in schema
            if not f.name.startswith("_")
        ]
    )


def flow_asset_specs(flow: FlowSpec, settings: EngineSettings) -> list[dg.AssetSpec]:
    """Topic -> table and quarantine, with the metadata that makes the UI self-explanatory."""
    message = flow.message.DESCRIPTOR.full_name
    schema = table_schema(flow)
    owners = list(flow.owners)
    topic = dg.AssetSpec(
        topic_key(flow),
        description=f"Kafka topic {flow.topic!r} carrying {message} messages keyed by "
        f"{flow.key_field}.",
        group_name=flow.name,
        kinds={"kafka", "protobuf"},
        owners=owners,
        metadata={
            "topic": flow.topic,
            "partitions": flow.topic_partitions,
            "protobuf_message": message,
            "key_field": flow.key_field,
        },
    )
    table = dg.AssetSpec(
        table_key(flow),
        deps=[topic.key],
        description=(
            f"{flow.description} Written by the always-on {flow.name} stream, exactly once per "
            f"Kafka record; partition D is marked materialized once D has closed (its end plus "
            f"{flow.allowed_lateness}, by Kafka timestamp) in every partition the stream read."
        ).strip(),
        group_name=flow.name,
        kinds={"spark", "delta", "protobuf"},
        owners=owners,
        partitions_def=daily_partitions(flow, settings),
        freshness_policy=daily_freshness(flow),
        metadata={
            "dagster/uri": settings.table_uri(flow.table),
            "dagster/column_schema": column_schema(schema),
            "partition_column": flow.partition_column,
            "event_time_field": flow.event_time_field,
            "key_field": flow.key_field,
            "allowed_lateness": str(flow.allowed_lateness),
            "max_lag": flow.max_lag,
        },
    )
    quarantine = dg.AssetSpec(
        quarantine_key(flow),
        deps=[topic.key],
        description=(
            f"Records of {flow.topic!r} that could not be accepted into {flow.table}: raw key and "
            "value, the reason, and where they were on Kafka."
        ),
        group_name=flow.name,
        kinds={"spark", "delta"},
        owners=owners,
        metadata={
            "dagster/uri": settings.table_uri(flow.quarantine_table),
            "partition_column": flow.partition_column,
        },
    )
    return [topic, table, quarantine]


FRESHNESS_MARGIN = timedelta(hours=2)
"""How long after a day closes (FlowSpec.closes_at) its partition may take to be announced."""


def daily_freshness(flow: FlowSpec) -> dg.FreshnessPolicy:
    """A day's partition is materialized within FRESHNESS_MARGIN of its closing time."""
    return dg.FreshnessPolicy.cron(
        deadline_cron=freshness_deadline_cron(flow),
        lower_bound_delta=timedelta(hours=24),
        timezone="UTC",
    )


def freshness_deadline_cron(flow: FlowSpec) -> str:
    """The daily deadline: the time of day the flow's days close, plus FRESHNESS_MARGIN."""
    closes = flow.closes_at(date(2026, 1, 1)) + FRESHNESS_MARGIN
    return f"{closes.minute} {closes.hour} * * *"
