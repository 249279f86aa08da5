"""Dropping producer retries: repeats of a flow's dedup key that arrive close together.

The rule: a record is kept unless the previous record with the same key (by Kafka partition and
offset, the order the stream reads them in) arrived at most the flow's allowed lateness before it.
Streams and bounded reads (backfills) run the same code, dev.tidelake.spark.RepeatFilter, a
`transformWithState` processor on Spark's RocksDB state store.

Arrival is the Kafka timestamp, at most the ingest time (a producer whose clock runs ahead cannot
make its records look later than they were read) and, on streams, at least the ingest time less
the lateness (so a record still to come arrives no earlier than that, which bounds how long a key
must be held). On a stream each key's state is its previous record's arrival, with Spark's state
TTL (processing time) of twice the lateness plus a margin: RepeatFilter.keyLifetime says why that
is safe. Spark finds expired keys by a range scan over its TTL index, so a micro-batch costs what
arrives and expires, not what is held. The TTL changes nothing in the rule, only how long a key is
held: 2.5 times the lateness of wall time (5 h for CallEvent), live or catching up on a backlog.

While a stream catches up, its arrivals are clamped close together, so repeats further apart than
the lateness read in one catch-up are dropped too; a backfill, which reads the Kafka timestamps
unclamped, keeps them.
"""

from __future__ import annotations

from pyspark.sql import DataFrame, SparkSession
from pyspark.sql import functions as F
from pyspark.sql.classic.dataframe import DataFrame as ClassicDataFrame

from tidelake.streaming.flow.engine_columns import (
    ERROR_COLUMN,
    INGEST_TIME_COLUMN,
    KAFKA_OFFSET,
    KAFKA_PARTITION,
    KAFKA_POSITION,
)
from tidelake.streaming.flow.spec import FlowSpec
from tidelake.streaming.spark.extensions import tidelake_jvm

EARLIER_DEDUP_OPERATOR = "dedupeWithinWatermark"
"""The state operator of checkpoints written before RepeatFilter (dropDuplicatesWithinWatermark)."""
DEDUP_KEY_COLUMN = "_dedup_key"
ARRIVAL_COLUMN = "_arrival"


def drop_repeats_in_stream(
    stream: DataFrame, flow: FlowSpec, remembered: DataFrame | None = None
) -> DataFrame:
    """The decoded stream without repeats of the flow's dedup key (unchanged if it has none).
    remembered seeds a new checkpoint's state (remembered_by_earlier_operator)."""
    if flow.dedup_key is None:
        return stream
    clamped = _not_before_ingest_less_lateness(_with_dedup_columns(stream, flow), flow)
    return _keep_first_of_repeats(clamped, flow, remembered)


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
    spark.streams  # noqa: B018 (reading state needs the state store coordinator it starts)
    state = spark.read.format("statestore").load(checkpoint)
    return state.select(
        F.col(f"key.{DEDUP_KEY_COLUMN}"),
        (F.col("value.expiresAtMicros") - _lateness_us(flow)).alias("previous_arrival_us"),
    )


def _lateness_us(flow: FlowSpec) -> int:
    return int(flow.allowed_lateness.total_seconds() * 1_000_000)


def _keep_first_of_repeats(
    df: DataFrame, flow: FlowSpec, remembered: DataFrame | None = None
) -> DataFrame:
    kept = tidelake_jvm("drop_repeats").RepeatFilter.keepFirstOfRepeats(
        df._jdf,
        DEDUP_KEY_COLUMN,
        ARRIVAL_COLUMN,
        KAFKA_PARTITION,
        KAFKA_OFFSET,
        _lateness_us(flow),
        None if remembered is None else remembered._jdf,
    )
    return ClassicDataFrame(kept, df.sparkSession).drop(DEDUP_KEY_COLUMN, ARRIVAL_COLUMN)


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


def _not_before_ingest_less_lateness(df: DataFrame, flow: FlowSpec) -> DataFrame:
    lateness_s = int(flow.allowed_lateness.total_seconds())
    earliest = F.col(INGEST_TIME_COLUMN) - F.make_dt_interval(secs=F.lit(lateness_s))
    return df.withColumn(ARRIVAL_COLUMN, F.greatest(ARRIVAL_COLUMN, earliest))
