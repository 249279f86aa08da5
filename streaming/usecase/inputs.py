"""A use case's input: the flow's table through Delta's own streaming source (a streaming use
case), or one day of it at one Delta version (a Daily one).

Commits that change no data (a compaction: dataChange false) are skipped by the source itself;
commits that rewrite or remove rows (a backfill's replaced dates, a date's expiry, a vacuum's
deletes are no commits at all) are skipped too (`skipChangeCommits`): a use case reads each
appended row once, and a rewrite is no new data (docs/use-cases.md says what a backfill means
for a use case). The input gains `event_timestamp`, its event time as a UTC timestamp, on which
its watermark is set.
"""

from __future__ import annotations

from datetime import date

from deltalake.exceptions import TableNotFoundError
from pyspark.sql import Column, DataFrame, SparkSession
from pyspark.sql import functions as F

from tidelake.streaming.delta.tables import open_table
from tidelake.streaming.errors import SetupError
from tidelake.streaming.flow.spec import FlowSpec
from tidelake.streaming.usecase.spec import EVENT_TIMESTAMP, UseCaseSpec


class InputMissingError(SetupError, RuntimeError):
    """A use case's input table does not exist yet: its flow's stream creates it with its first
    batch. The supervisor starts the use case again after its back-off."""


def input_version(use_case: UseCaseSpec, table_uri: str, described: str) -> int:
    """The input table's current version; InputMissingError, naming the use case and its input
    (`described`: "flow x", "use case y"), while it does not exist."""
    try:
        return open_table(table_uri, without_files=True).version()
    except TableNotFoundError:
        raise InputMissingError(
            f"use case {use_case.name}: its input, {described}'s table {table_uri}, does not "
            "exist yet (its first write creates it)"
        ) from None


MAX_FILES_PER_TRIGGER = 200
"""Files of the input table a micro-batch reads at most. A use case started with a backlog
works it off in batches that each commit: with Delta's default of 1,000, a restart's first
batch read 1,000 of the flow's files (2,000,000 events) as one MERGE batch, 10.3 s on an idle
2-core machine and none finished within 150 s on a loaded one; with 200 the first batch took
5.0 s and the whole backlog 25 s in 5 batches (11.6 s as one; docs/benchmarks.md)."""
MAX_BYTES_PER_TRIGGER = 32 * 2**20
"""Bytes of input files a micro-batch reads at most (at least one file): the bound for an
input of compacted dates, whose files are large (a new use case reads the whole table)."""


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
        .option("maxBytesPerTrigger", str(MAX_BYTES_PER_TRIGGER))
        .load(table_uri)
    )
    watermark = f"{int(use_case.watermark.total_seconds() * 1000)} milliseconds"
    return rows.withColumn(EVENT_TIMESTAMP, event_timestamp(flow)).withWatermark(
        EVENT_TIMESTAMP, watermark
    )


def day_input(
    spark: SparkSession, table_uri: str, partition_column: str, day: date, version: int
) -> DataFrame:
    """Date `day` of a table (its `partition_column`) as of `version`, a static DataFrame."""
    rows = spark.read.format("delta").option("versionAsOf", str(version)).load(table_uri)
    return rows.where(F.col(partition_column) == F.lit(day))
