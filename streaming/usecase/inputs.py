"""A use case's input as a streaming DataFrame: the flow's table through Delta's own streaming
source.

Commits that change no data (a compaction: dataChange false) are skipped by the source itself;
commits that rewrite or remove rows (a backfill's replaced dates, a date's expiry, a vacuum's
deletes are no commits at all) are skipped too (`skipChangeCommits`): a use case reads each
appended row once, and a rewrite is no new data (docs/use-cases.md says what a backfill means
for a use case). The input gains `event_timestamp`, its event time as a UTC timestamp, on which
its watermark is set.
"""

from __future__ import annotations

from pyspark.sql import Column, DataFrame, SparkSession
from pyspark.sql import functions as F

from tidelake.streaming.flow.spec import FlowSpec
from tidelake.streaming.usecase.spec import EVENT_TIMESTAMP, UseCaseSpec

MAX_FILES_PER_TRIGGER = 1000
"""Files of the input table a micro-batch reads at most (Delta's default; stated so that a
backlog's batches are bounded by it on purpose)."""


def event_timestamp(flow: FlowSpec) -> Column:
    """The flow's event time column (a UTC timestamp in its table) under the one name every use
    case's watermark is set on."""
    return F.col(flow.event_time_field).cast("timestamp")


def stream_input(
    spark: SparkSession, table_uri: str, flow: FlowSpec, use_case: UseCaseSpec
) -> DataFrame:
    """The flow's table at `table_uri` as a watermarked streaming DataFrame."""
    rows = (
        spark.readStream.format("delta")
        .option("skipChangeCommits", "true")
        .option("maxFilesPerTrigger", str(MAX_FILES_PER_TRIGGER))
        .load(table_uri)
    )
    watermark = f"{int(use_case.watermark.total_seconds() * 1000)} milliseconds"
    return rows.withColumn(EVENT_TIMESTAMP, event_timestamp(flow)).withWatermark(
        EVENT_TIMESTAMP, watermark
    )
