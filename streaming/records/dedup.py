"""Dropping producer retries: repeats of a flow's dedup key that arrive close together.

The stream uses Spark's `dropDuplicatesWithinWatermark`, which remembers each key for the flow's
allowed lateness, on an arrival time: the Kafka timestamp, clamped into [ingest time - allowed
lateness, ingest time]. The upper clamp keeps a producer whose clock runs ahead from pushing the
watermark past everybody else. The lower clamp means no record is ever behind the watermark,
which Spark would drop silently: the watermark is at most the newest earlier ingest time minus
the lateness. The price is state while catching up on a backlog: old records are remembered for
about twice the lateness of wall time, however many there are (hence RocksDB state).

Batch reads (backfills) cannot use that operator. They keep a record unless the previous record
with the same key (by partition and offset, the order the stream reads them in) arrived at most
the allowed lateness before it. Live, retries seconds apart give the same rows both ways. They
can differ for repeats about the allowed lateness apart (the stream forgets a key only when its
watermark passes, once per batch), and for repeats further apart read in one catch-up, which the
stream drops too.
"""

from __future__ import annotations

from typing import Any

from pyspark.sql import DataFrame, Window
from pyspark.sql import functions as F

from tidelake.streaming.flow.engine_columns import (
    ERROR_COLUMN,
    INGEST_TIME_COLUMN,
    KAFKA_OFFSET,
    KAFKA_PARTITION,
    KAFKA_POSITION,
)
from tidelake.streaming.flow.spec import FlowSpec

DEDUP_KEY_COLUMN = "_dedup_key"
ARRIVAL_COLUMN = "_arrival"


def drop_repeats_in_stream(stream: DataFrame, flow: FlowSpec) -> DataFrame:
    """The decoded stream without repeats of the flow's dedup key (unchanged if it has none)."""
    if flow.dedup_key is None:
        return stream
    window = f"{int(flow.allowed_lateness.total_seconds())} seconds"
    return (
        _not_behind_watermark(_with_dedup_columns(stream, flow), flow)
        .withWatermark(ARRIVAL_COLUMN, window)
        .dropDuplicatesWithinWatermark([DEDUP_KEY_COLUMN])
        .drop(DEDUP_KEY_COLUMN, ARRIVAL_COLUMN)
    )


def drop_repeats_in_batch(rows: DataFrame, flow: FlowSpec) -> DataFrame:
    """Decoded rows of a bounded read without repeats, by the rule the module describes."""
    if flow.dedup_key is None:
        return rows
    # repeats of a key share its Kafka partition; the stream keeps the first it reads
    by_key = Window.partitionBy(DEDUP_KEY_COLUMN).orderBy(KAFKA_PARTITION, KAFKA_OFFSET)
    gap_us = F.unix_micros(ARRIVAL_COLUMN) - F.unix_micros(F.lag(ARRIVAL_COLUMN).over(by_key))
    window_us = int(flow.allowed_lateness.total_seconds() * 1_000_000)
    return (
        _with_dedup_columns(rows, flow)
        .withColumn("_gap_us", gap_us)
        .where(F.col("_gap_us").isNull() | (F.col("_gap_us") > window_us))
        .drop(DEDUP_KEY_COLUMN, ARRIVAL_COLUMN, "_gap_us")
    )


def rows_dropped_by_watermark(progress: dict[str, Any]) -> int:
    """Rows of one micro-batch that Spark dropped as behind the watermark: 0 unless the ingest
    clock went backwards."""
    operators = progress.get("stateOperators") or []
    return sum(int(op.get("numRowsDroppedByWatermark", 0)) for op in operators)


def _with_dedup_columns(df: DataFrame, flow: FlowSpec) -> DataFrame:
    assert flow.dedup_key is not None
    # poison records are never repeats of each other: each is keyed by its own Kafka position
    position = F.concat_ws("/", F.lit("record"), *KAFKA_POSITION)
    key = F.concat(F.lit("key/"), F.col(flow.dedup_key).cast("string"))
    return df.withColumns(
        {
            DEDUP_KEY_COLUMN: F.when(F.col(ERROR_COLUMN).isNull(), key).otherwise(position),
            ARRIVAL_COLUMN: F.least("kafka_timestamp", INGEST_TIME_COLUMN),
        }
    )


def _not_behind_watermark(df: DataFrame, flow: FlowSpec) -> DataFrame:
    lateness_s = int(flow.allowed_lateness.total_seconds())
    earliest = F.col(INGEST_TIME_COLUMN) - F.make_dt_interval(secs=F.lit(lateness_s))
    return df.withColumn(ARRIVAL_COLUMN, F.greatest(ARRIVAL_COLUMN, earliest))
