"""Dropping producer retries: repeats of a flow's dedup key that arrive close together.

The rule: a record is kept unless the previous record with the same key (in arrival order, then
Kafka partition and offset) arrived at most the flow's allowed lateness before it. Arrival is the
record's Kafka timestamp (`kafka_timestamp`: records/decode.py), which the records carry in
Kafka, not when the engine read them, so a stream catching up on a backlog and a backfill that
reads the same records later judge them alike, and a key sent to several partitions (after
`add-partitions`) keeps its first arrival. Streams and bounded reads (backfills) run the same
code, dev.tidelake.spark.RepeatFilter, a `transformWithState` processor on Spark's RocksDB state
store.

A bounded read compares each key's records all at once. A stream compares a micro-batch's with
the last arrival it holds for the key, with Spark's state TTL (processing time) of twice the
lateness plus a margin (5 h for CallEvent): RepeatFilter.keyLifetime says when that changes a
verdict (a stream stopped longer than that between a record and its repeat keeps the repeat).
Spark finds expired keys by a range scan over its TTL index, so a micro-batch costs what arrives
and expires, not what is held. A stream also judges a record read after a later-arriving record
of its key (in a later micro-batch) as that one's repeat, where a backfill orders them by arrival.
"""

from __future__ import annotations

from pyspark.sql import DataFrame, SparkSession
from pyspark.sql import functions as F
from pyspark.sql.classic.dataframe import DataFrame as ClassicDataFrame

from tidelake.streaming.flow.engine_columns import (
    ERROR_COLUMN,
    KAFKA_OFFSET,
    KAFKA_PARTITION,
    KAFKA_POSITION,
    KAFKA_TIMESTAMP,
)
from tidelake.streaming.flow.spec import FlowSpec
from tidelake.streaming.spark.extensions import tidelake_jvm

EARLIER_DEDUP_OPERATOR = "dedupeWithinWatermark"
"""The state operator of checkpoints written before RepeatFilter (dropDuplicatesWithinWatermark)."""
DEDUP_KEY_COLUMN = "_dedup_key"


def drop_repeats_in_stream(
    stream: DataFrame, flow: FlowSpec, remembered: DataFrame | None = None
) -> DataFrame:
    """The decoded stream without repeats of the flow's dedup key (unchanged if it has none).
    remembered seeds a new checkpoint's state (remembered_by_earlier_operator)."""
    if flow.dedup_key is None:
        return stream
    return _keep_first_of_repeats(_with_dedup_columns(stream, flow), flow, remembered)


def drop_repeats_in_batch(rows: DataFrame, flow: FlowSpec) -> DataFrame:
    """Decoded rows of a bounded read without repeats, by the same rule and code."""
    if flow.dedup_key is None:
        return rows
    return _keep_first_of_repeats(_with_dedup_columns(rows, flow), flow)


def remembered_by_earlier_operator(
    spark: SparkSession, checkpoint: str, flow: FlowSpec
) -> DataFrame:
    """The keys that a checkpoint of the earlier operator (dropDuplicatesWithinWatermark, which
    stored each key's expiry: its first arrival plus the lateness) remembered, as (key, previous
    arrival in microseconds) rows for drop_repeats_in_stream."""
    _start_state_store_coordinator(spark)
    state = spark.read.format("statestore").load(checkpoint)
    return state.select(
        F.col(f"key.{DEDUP_KEY_COLUMN}"),
        (F.col("value.expiresAtMicros") - _lateness_us(flow)).alias("previous_arrival_us"),
    )


def _start_state_store_coordinator(spark: SparkSession) -> None:
    """Reading a checkpoint's state and a bounded read's RepeatFilter both use a state store,
    whose coordinator the session's streaming query manager starts: a session that never
    streamed has none yet."""
    spark.streams  # noqa: B018 (the property starts the manager)


def _lateness_us(flow: FlowSpec) -> int:
    return int(flow.allowed_lateness.total_seconds() * 1_000_000)


def _keep_first_of_repeats(
    df: DataFrame, flow: FlowSpec, remembered: DataFrame | None = None
) -> DataFrame:
    _start_state_store_coordinator(df.sparkSession)
    kept = tidelake_jvm("drop_repeats").RepeatFilter.keepFirstOfRepeats(
        df._jdf,
        DEDUP_KEY_COLUMN,
        KAFKA_TIMESTAMP,
        KAFKA_PARTITION,
        KAFKA_OFFSET,
        _lateness_us(flow),
        None if remembered is None else remembered._jdf,
    )
    return ClassicDataFrame(kept, df.sparkSession).drop(DEDUP_KEY_COLUMN)


def _with_dedup_columns(df: DataFrame, flow: FlowSpec) -> DataFrame:
    assert flow.dedup_key is not None
    # poison records are never repeats of each other: each is keyed by its own Kafka position
    position = F.concat_ws("/", F.lit("record"), *KAFKA_POSITION)
    key = F.concat(F.lit("key/"), F.col(flow.dedup_key).cast("string"))
    return df.withColumn(
        DEDUP_KEY_COLUMN, F.when(F.col(ERROR_COLUMN).isNull(), key).otherwise(position)
    )
