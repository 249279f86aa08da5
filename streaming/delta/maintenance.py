"""Maintenance of a flow's Delta tables with delta-rs: compaction of a date, the expiry of old
dates, vacuum, log upkeep.

Date expiry (`expire_dates`) deletes the dates older than the lake's retention
(TIDELAKE_LAKE_RETENTION_DAYS): whole partitions, so the commit only removes files (nothing is
rewritten) and, like compaction, commits alongside the stream's appends of newer dates; vacuum
deletes the files once no snapshot within its retention needs them. A vacuum retention shorter
than the log's (`TIDELAKE_DELTA_LOG_RETENTION`) is refused: it would delete the files a stream or
a backfill has written and not committed yet.

The log upkeep (`upkeep_log`) is what a stream's commits leave out (delta/commit.py): it
deletes log entries older than the table's `delta.logRetentionDuration`
(`TIDELAKE_DELTA_LOG_RETENTION`) that an older checkpoint makes unnecessary, after writing a
checkpoint (a table no stream writes gets one there), and the temporary files of log entries
that a writer which died before linking them left. It commits nothing (it may set tidelake's
table properties once on a table that lacks them), so it runs alongside the stream, a backfill or
a compaction, and needs no pool slot.

Compaction commits alongside the stream's appends (delta-rs checks conflicts and keeps the
stream's application transactions). It must never run twice at once on one table: deltalake
1.6.3 rejects the second commit, but later releases were seen to commit both and duplicate rows,
so the platform also serialises it (one Dagster pool slot per table). A compaction that loses
a race with a commit that removed files it read (a backfill replacing the date, another
compaction) plans again on the new snapshot: the rewrite is idempotent, so a lost race costs a
retry, not a failed run.
"""

from __future__ import annotations

import logging
import math
import time
from collections.abc import Callable
from dataclasses import dataclass
from datetime import date, timedelta
from typing import TYPE_CHECKING

from deltalake import DeltaTable, WriterProperties

from tidelake.streaming.delta.commit import apply_table_properties
from tidelake.streaming.delta.commit_races import retry_lost_commits
from tidelake.streaming.delta.progress import snapshot_progress
from tidelake.streaming.delta.tables import open_table, table_sql
from tidelake.streaming.errors import ConfigError, SetupError
from tidelake.streaming.settings import load_engine_settings
from tidelake.streaming.spark.session import session_settings
from tidelake.streaming.storage.conditional_put import remove_leftovers
from tidelake.streaming.storage.location import Location

if TYPE_CHECKING:
    from pyspark.sql import SparkSession

DEFAULT_TARGET_FILE_BYTES = 128 * 1024 * 1024
MIN_VACUUM_RETENTION_HOURS = 168

log = logging.getLogger(__name__)


@dataclass(frozen=True)
class PartitionFiles:
    files: int
    bytes: int
    rows: int


@dataclass(frozen=True)
class CompactionResult:
    day: str
    before: PartitionFiles
    after: PartitionFiles
    seconds: float
    table_version: int


def partition_files(table: DeltaTable, column: str, value: str) -> PartitionFiles:
    """Files, bytes and rows of one partition in the table's current snapshot."""
    progress = snapshot_progress(table, column)
    return PartitionFiles(
        progress.files_by_date.get(value, 0),
        progress.bytes_by_date.get(value, 0),
        progress.rows_by_date.get(value, 0),
    )


def compact_partition(
    table_uri: str,
    column: str,
    value: str,
    target_file_bytes: int = DEFAULT_TARGET_FILE_BYTES,
) -> CompactionResult:
    """Rewrite the small files of one partition into files of about target_file_bytes.

    A commit conflict (another writer removed files this compaction read) plans the compaction
    again on the table's new snapshot (retry_lost_commits)."""
    started = time.monotonic()
    for attempt in retry_lost_commits(f"compaction of {table_uri} {column}={value}"):
        with attempt:
            before, table = _compact_once(table_uri, column, value, target_file_bytes)
    after = partition_files(table, column, value)
    return CompactionResult(value, before, after, time.monotonic() - started, table.version())


def _compact_once(
    table_uri: str, column: str, value: str, target_file_bytes: int
) -> tuple[PartitionFiles, DeltaTable]:
    """One compaction on the latest snapshot: the partition's files before, and the table after."""
    table = open_table(table_uri)
    before = partition_files(table, column, value)
    if before.files > 1:
        table.optimize.compact(
            partition_filters=[(column, "=", value)],
            target_size=target_file_bytes,
            writer_properties=WriterProperties(compression="ZSTD"),
        )
        table.update_incremental()
    return before, table


def first_kept_date(retention_days: int, today: date) -> date | None:
    """The oldest date the lake keeps with a retention of `retention_days` (None: 0, every
    date): the dates before it expire. The one home of the rule, for the expiry and backfills."""
    return today - timedelta(days=retention_days) if retention_days > 0 else None


@dataclass(frozen=True)
class ExpiryResult:
    table_uri: str
    dates: tuple[str, ...]
    removed_files: int
    removed_rows: int
    table_version: int


def expire_dates(table_uri: str, column: str, first_kept: date) -> ExpiryResult:
    """Delete the partitions of the dates before `first_kept` (`column` is the date partition
    column). A commit that loses a race plans again on the new snapshot."""
    predicate = f"{column} < '{first_kept.isoformat()}'"
    for attempt in retry_lost_commits(f"expiry of {table_uri} {predicate}"):
        with attempt:
            table = open_table(table_uri)
            progress = snapshot_progress(table, column)
            dates = tuple(sorted(d for d in progress.files_by_date if d < first_kept.isoformat()))
            metrics = table.delete(predicate) if dates else {}
            table.update_incremental()
    return ExpiryResult(
        table_uri,
        dates,
        metrics.get("num_removed_files", 0),
        metrics.get("num_deleted_rows", 0),
        table.version(),
    )


@dataclass(frozen=True)
class VacuumResult:
    table_uri: str
    removed_files: int
    retention_hours: int
    table_version: int


DELTA_RS_VACUUM_FEATURES = frozenset(
    {"appendOnly", "invariants", "timestampNtz", "checkConstraints", "vacuumProtocolCheck"}
)
"""Table features under which every file a snapshot reads is an add's data file, all that
delta-rs's vacuum keeps (1.6: it deletes a live deletion vector's file). A table with any other
reader or writer feature is vacuumed by delta-spark, Delta's reference implementation, which knows
them all (PROTOCOL.md's vacuumProtocolCheck: a vacuum checks the table's protocol first)."""

SparkSessionGetter = Callable[[], "SparkSession"]
"""How a vacuum gets a Spark session when it needs one (started then, not before)."""


class UnsafeVacuumError(SetupError):
    """tidelake cannot vacuum this table without deleting files its snapshots still read."""


def vacuum_table(
    table_uri: str,
    retention_hours: int | None = None,
    spark: SparkSessionGetter | None = None,
) -> VacuumResult:
    """Delete files no snapshot within the retention needs, orphans of failed writes included,
    then checkpoint the log and drop log entries older than the log retention. The retention
    defaults to default_vacuum_retention_hours(); a shorter one than the log's is refused
    (require_vacuum_retention).

    The table's protocol is checked first: under DELTA_RS_VACUUM_FEATURES delta-rs vacuums it,
    otherwise (deletion vectors, another engine's features) delta-spark's VACUUM in the session
    `spark` gives; without one the table is refused (UnsafeVacuumError), never damaged."""
    if retention_hours is None:
        retention_hours = default_vacuum_retention_hours()
    require_vacuum_retention(retention_hours)
    features = _table_features(open_table(table_uri, without_files=True))
    if features <= DELTA_RS_VACUUM_FEATURES:
        table = open_table(table_uri)
        removed = len(
            table.vacuum(
                retention_hours=retention_hours,
                dry_run=False,
                enforce_retention_duration=False,  # require_vacuum_retention is the rule
                full=True,
            )
        )
    elif spark is None:
        raise UnsafeVacuumError(
            f"{table_uri} has table features {sorted(features - DELTA_RS_VACUUM_FEATURES)} "
            "whose files delta-rs's vacuum does not keep (a deletion vector's, say): not "
            "vacuumed; vacuum it with a Spark session (delta-spark's VACUUM)"
        )
    else:
        removed = vacuum_with_delta_spark(spark(), table_uri, retention_hours)
        table = open_table(table_uri)
    table.create_checkpoint()
    table.cleanup_metadata()
    return VacuumResult(table_uri, removed, retention_hours, table.version())


def _table_features(table: DeltaTable) -> set[str]:
    """The table's reader and writer features; a legacy protocol's as the features they imply
    (writer version 2: invariants and appendOnly; 3: checkConstraints; 4 and above: change data
    feed, generated columns and more, which delta-rs's vacuum does not know to keep)."""
    protocol = table.protocol()
    features = {*(protocol.reader_features or ()), *(protocol.writer_features or ())}
    legacy = protocol.min_writer_version
    if legacy < 7:
        features |= {"appendOnly", "invariants"} if legacy >= 2 else set()
        features |= {"checkConstraints"} if legacy >= 3 else set()
        features |= {f"writer version {legacy}"} if legacy >= 4 else set()
    if protocol.min_reader_version == 2:
        features.add("columnMapping")
    return features


def vacuum_with_delta_spark(spark: SparkSession, table_uri: str, retention_hours: int) -> int:
    """delta-spark's VACUUM of the table (full: orphans too) at `retention_hours`; the files it
    deleted, from its VACUUM END commit. Its retention check and its habit of ignoring a RETAIN
    other than 0 (Delta 4.1+, using the table's deletedFileRetentionDuration instead) are turned
    off for the call: require_vacuum_retention is the rule, as for delta-rs. Its listing and its
    join get tasks for the session's cores: with Spark's defaults (10,000 listing tasks, 200
    shuffle partitions) a vacuum of a small table took 34-37 s on 2 cores, 2.5-6 s so."""
    tasks = str(max(8, 2 * spark.sparkContext.defaultParallelism))
    settings = {
        "spark.databricks.delta.retentionDurationCheck.enabled": "false",
        "spark.databricks.delta.vacuum.retentionWindowIgnore.enabled": "false",
        "spark.databricks.delta.vacuum.logging.enabled": "true",
        "spark.sql.sources.parallelPartitionDiscovery.parallelism": tasks,
        "spark.sql.shuffle.partitions": tasks,
    }
    with session_settings(spark, settings):
        spark.sql(f"VACUUM {table_sql(table_uri)} RETAIN {retention_hours} HOURS").collect()
    return _files_deleted_by_last_vacuum(table_uri)


def _files_deleted_by_last_vacuum(table_uri: str) -> int:
    for entry in open_table(table_uri, without_files=True).history(limit=5):
        if entry.get("operation") == "VACUUM END":
            metrics = entry.get("operationMetrics") or {}
            return int(metrics.get("numDeletedFiles", 0))
    return 0


def default_vacuum_retention_hours() -> int:
    """A week (MIN_VACUUM_RETENTION_HOURS, delta's default deletedFileRetentionDuration), or the
    log retention if that is longer (the floor of require_vacuum_retention)."""
    return max(MIN_VACUUM_RETENTION_HOURS, _vacuum_floor_hours())


def _vacuum_floor_hours() -> int:
    return math.ceil(load_engine_settings().delta_log_retention_seconds() / 3600)


def require_vacuum_retention(retention_hours: int) -> None:
    """Raise ConfigError for a vacuum retention shorter than TIDELAKE_DELTA_LOG_RETENTION, as
    delta-spark refuses one shorter than the table's deletedFileRetentionDuration (tidelake sets
    it to the same). A full vacuum deletes every file the log does not name that is older than
    its retention: a shorter one deletes the files a running stream or backfill has written and
    not yet committed (the log retention is longer than the longest backfill), and those of the
    snapshots the log still offers to time travel."""
    floor_hours = _vacuum_floor_hours()
    if retention_hours < floor_hours:
        raise ConfigError(
            f"a vacuum retention of {retention_hours} hours is shorter than "
            f"TIDELAKE_DELTA_LOG_RETENTION={load_engine_settings().delta_log_retention}: it "
            "would delete files "
            f"that running streams and backfills have written and not committed yet; vacuum "
            f"with at least {floor_hours} hours"
        )


@dataclass(frozen=True)
class LogUpkeepResult:
    table_uri: str
    table_version: int
    entries_before: int
    """files in `_delta_log` before the upkeep: commits, checkpoints and their companions"""
    entries_after: int
    properties_set: dict[str, str]
    checkpoint_seconds: float
    cleanup_seconds: float
    leftovers_removed: tuple[str, ...]
    """temporary files of log entries that a crashed writer left (storage/conditional_put.py)"""


def upkeep_log(table_uri: str) -> LogUpkeepResult:
    """Checkpoint the table's log at its latest version, then delete the log entries older than
    its log retention that the newest checkpoint before the cut-off makes unnecessary, and the
    temporary files of entries whose writer died before linking them (remove_leftovers)."""
    log_folder = Location(table_uri) / "_delta_log"
    table = open_table(table_uri, without_files=True)  # the checkpoint streams the log
    properties = apply_table_properties(table)
    before = len(log_folder.names())
    started = time.monotonic()
    table.create_checkpoint()
    checkpointed = time.monotonic()
    table.cleanup_metadata()
    cleaned = time.monotonic()
    leftovers = remove_leftovers(str(log_folder))
    return LogUpkeepResult(
        table_uri,
        table.version(),
        before,
        len(log_folder.names()),
        properties,
        checkpointed - started,
        cleaned - checkpointed,
        tuple(leftovers),
    )
