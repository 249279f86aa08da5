"""Rebuild date partitions of a flow's table from Kafka, in one atomic Delta commit.

Where date D can be in Kafka: the engine quarantines a record of D that stands behind a data
record stamped after D closed (end of D plus allowed lateness), or itself is, and one stamped
more than max_clock_skew before its event time (decode and arrival). So every accepted record of
D lies, per partition, between the first data record stamped at or after start(D) - skew and the
first data record stamped after D closed (kafka/offsets.py's first_records_after: Kafka's time
index, then a read past markers and aborted records), exact for any timestamp type and any order
of timestamps. Inside that range the read applies the same
rule as the stream, with the same lookups, so stream and backfill agree record by record.

Semantics while the stream runs: the backfill reads a snapshot V of the table, takes the
stream's committed position E at V (its Delta app transaction names the checkpoint batch whose
offsets are E), reads the window up to E, and replaces the dates' files of snapshot V
(delta/commit.py's replace_partitions). Records after E are the stream's to append, and its appends
committed after V survive the replace. So every accepted record of D is in the table once, and a
rerun yields the same rows.
"""

from __future__ import annotations

import logging
import time
import uuid
from dataclasses import dataclass
from datetime import UTC, date, datetime, timedelta

from deltalake.exceptions import CommitFailedError, TableNotFoundError
from pyspark.sql import Observation, SparkSession
from pyspark.sql import functions as F

from tidelake.streaming.delta.commit import replace_partitions
from tidelake.streaming.delta.commit_races import retry_lost_commits
from tidelake.streaming.delta.constraints import check_constraints
from tidelake.streaming.delta.evolution import SchemaChangeError, evolve_table
from tidelake.streaming.delta.files import write_data_files
from tidelake.streaming.delta.maintenance import first_kept_date
from tidelake.streaming.delta.progress import table_progress
from tidelake.streaming.delta.tables import open_table
from tidelake.streaming.delta.write import good_rows
from tidelake.streaming.errors import TidelakeError
from tidelake.streaming.flow.engine_columns import SCHEMA_ID_COLUMN
from tidelake.streaming.flow.spec import FlowSpec
from tidelake.streaming.kafka.acls import READS
from tidelake.streaming.kafka.admin import require_access
from tidelake.streaming.kafka.offsets import Offsets, PartitionEnds, from_json_offsets
from tidelake.streaming.kafka.read import read_records
from tidelake.streaming.records.decode import decode_records
from tidelake.streaming.records.dedup import drop_repeats_in_batch
from tidelake.streaming.schemas.writer_schemas import WriterSchemas
from tidelake.streaming.settings import EngineSettings
from tidelake.streaming.storage.location import Location
from tidelake.streaming.stream.status import written_position

log = logging.getLogger(__name__)
_DAY = timedelta(days=1)


class BackfillError(TidelakeError, RuntimeError):
    """The backfill cannot run; the message says why and what to do."""


class OutsideRetentionError(BackfillError):
    """Kafka no longer holds all records of the requested dates."""


@dataclass(frozen=True)
class BackfillPlan:
    flow: FlowSpec
    dates: tuple[str, ...]
    read_version: int
    start: Offsets
    end: Offsets
    stream_position: Offsets
    window: tuple[datetime, datetime]

    @property
    def records(self) -> int:
        return sum(self.end[tp] - self.start[tp] for tp in self.end)


@dataclass(frozen=True)
class BackfillResult:
    plan: BackfillPlan
    rows_by_date: dict[str, int]
    table_version: int
    seconds: float

    @property
    def rows(self) -> int:
        return sum(self.rows_by_date.values())


def date_window(flow: FlowSpec, dates: list[str] | tuple[str, ...]) -> tuple[datetime, datetime]:
    """Kafka timestamps that accepted records of these dates can carry."""
    first = datetime.combine(date.fromisoformat(min(dates)), datetime.min.time(), UTC)
    return first - flow.max_clock_skew, flow.closes_at(date.fromisoformat(max(dates)))


def plan_backfill(
    flow: FlowSpec,
    dates: list[str] | tuple[str, ...],
    settings: EngineSettings,
    kafka_conf: dict[str, str],
    timeout_s: float = 30.0,
) -> BackfillPlan:
    """Offsets to read for `dates`, bounded by the stream's committed position."""
    if not dates:
        raise BackfillError("no dates to backfill")
    _check_lake_retention(dates, settings)
    require_access(kafka_conf, flow.topic, READS, timeout_s)
    version, position = stream_position(flow, settings)
    window = date_window(flow, dates)
    start_ms, end_ms = (int(t.timestamp() * 1000) for t in window)
    probe = PartitionEnds(kafka_conf, f"tidelake-{flow.name}-backfill", timeout_s)
    try:
        partitions = probe.partitions([flow.topic])
        low = probe.earliest(partitions)
        _check_retention(flow, probe, low, start_ms)
        done = {tp: max(low[tp], position.get(tp, low[tp])) for tp in partitions}
        closed = probe.first_records_after(partitions, end_ms, below=done)
        end = {tp: _or(closed[tp], done[tp]) for tp in done}
        first = probe.first_records_after(partitions, start_ms - 1, below=end)
        start = {tp: _or(first[tp], end[tp]) for tp in partitions}
    finally:
        probe.close()
    return BackfillPlan(flow, tuple(sorted(dates)), version, start, end, position, window)


def stream_position(flow: FlowSpec, settings: EngineSettings) -> tuple[int, Offsets]:
    """(table version V, offsets the stream had committed at V) from the table and checkpoint."""
    uri = settings.table_uri(flow.table)
    checkpoint = settings.checkpoint_uri(flow.name)
    try:
        table = open_table(uri)
    except TableNotFoundError:
        raise BackfillError(
            f"table {uri} does not exist yet: start the {flow.name} stream, which creates it "
            "and reads the topic from its earliest offset"
        ) from None
    try:
        if evolve_table(flow, uri).changed:
            table = open_table(uri)
    except SchemaChangeError as exc:
        raise BackfillError(str(exc)) from None
    if not (Location(checkpoint) / "metadata").exists():
        raise BackfillError(
            f"no stream checkpoint in {checkpoint}: a backfill rebuilds what the {flow.name} "
            "stream has read, so start the stream first"
        )
    written = written_position(checkpoint, table)
    if written is None:
        raise BackfillError(f"the {flow.name} stream has not committed to {uri} yet")
    offsets = from_json_offsets(written)
    return table.version(), {tp: o for tp, o in offsets.items() if tp[0] == flow.topic}


def _check_lake_retention(dates: list[str] | tuple[str, ...], settings: EngineSettings) -> None:
    days = settings.lake_retention_days
    first_kept = first_kept_date(days, datetime.now(UTC).date())
    if first_kept is None:
        return
    expired = sorted(d for d in dates if d < first_kept.isoformat())
    if expired:
        span = expired[0] if len(expired) == 1 else f"{expired[0]} .. {expired[-1]}"
        raise BackfillError(
            f"{span} is older than the lake's retention ({days} days, "
            f"TIDELAKE_LAKE_RETENTION_DAYS; the oldest date kept is {first_kept}): the daily "
            "expiry would delete it again. Raise the retention to keep older dates"
        )


def _check_retention(flow: FlowSpec, probe: PartitionEnds, low: Offsets, start_ms: int) -> None:
    trimmed = {tp: o for tp, o in low.items() if o > 0}
    firsts = [r[1] for r in probe.records_at(trimmed).values() if r] if trimmed else []
    problem = retention_problem(flow, firsts, start_ms)
    if problem:
        raise OutsideRetentionError(problem)


def retention_problem(flow: FlowSpec, first_kept_ms: list[int], start_ms: int) -> str | None:
    """Why Kafka cannot serve a window starting at start_ms, given the timestamps of the first
    records kept in partitions that retention has trimmed; None if it can."""
    if not first_kept_ms or max(first_kept_ms) <= start_ms:
        return None
    first_kept = datetime.fromtimestamp(max(first_kept_ms) / 1000, UTC)
    oldest = first_kept + flow.max_clock_skew
    complete = oldest.date() + (_DAY if oldest.time() != datetime.min.time() else timedelta(0))
    return (
        f"Kafka topic {flow.topic!r} no longer holds every record of the requested dates "
        f"(retention deleted records before {first_kept:%Y-%m-%d %H:%M} UTC); the earliest "
        f"date still complete in Kafka is {complete.isoformat()}. The table was left as it is."
    )


def backfill_dates(
    spark: SparkSession,
    flow: FlowSpec,
    dates: list[str] | tuple[str, ...],
    settings: EngineSettings,
    kafka_conf: dict[str, str],
    attempts: int = 3,
) -> BackfillResult:
    """Plan and run a backfill of `dates`; when another rewrite of the same files (a compaction
    in another process) commits first, plan again from the new snapshot and run again."""
    what = f"backfill of {min(dates)}..{max(dates)}" if dates else "backfill"
    try:
        for attempt in retry_lost_commits(what, attempts):
            with attempt:
                plan = plan_backfill(flow, dates, settings, kafka_conf)
                log.info(
                    "backfill %s..%s: %s Kafka records, window %s .. %s, table version %s",
                    plan.dates[0],
                    plan.dates[-1],
                    plan.records,
                    f"{plan.window[0]:%Y-%m-%d %H:%M}",
                    f"{plan.window[1]:%Y-%m-%d %H:%M} UTC",
                    plan.read_version,
                )
                return run_backfill(spark, plan, settings, kafka_conf)
    except CommitFailedError as exc:
        raise BackfillError(
            f"{what} lost {attempts} commit races against other rewrites of the table; the "
            f"table was left as it is: {exc}"
        ) from None
    raise AssertionError("unreachable")


def run_backfill(
    spark: SparkSession,
    plan: BackfillPlan,
    settings: EngineSettings,
    kafka_conf: dict[str, str],
) -> BackfillResult:
    """Read the plan's offsets with the stream's decoder and rules, and replace the dates'
    files of the plan's snapshot in one commit."""
    flow = plan.flow
    started = time.monotonic()
    uri = settings.table_uri(flow.table)
    schemas = WriterSchemas.from_env(flow)
    schemas.prefetch()
    # rows that violate the table's CHECK constraints are left out, as the stream quarantines them
    constraints = check_constraints(open_table(uri, without_files=True).metadata().configuration)
    while True:
        records = read_records(spark, flow, kafka_conf, plan.start, plan.end)
        # the stream's decode and rules, then its deduplication
        decoded = decode_records(records, flow, kafka_conf, schemas, constraints)
        seen = Observation(f"schemas-{uuid.uuid4().hex}")
        decoded = drop_repeats_in_batch(
            decoded.observe(seen, F.collect_set(SCHEMA_ID_COLUMN)), flow
        )
        rows = good_rows(decoded, flow).where(F.col(flow.partition_column).isin(*plan.dates))
        files = write_data_files(rows, uri, flow.partition_column, "backfill")
        (schema_ids,) = seen.get.values()
        learned = schemas.learn(schema_ids)
        if not learned:
            break
        # records of schemas the decoder did not know were refused as pending: read again
        log.info("backfill met schema ids %s; reading the window again with them", learned)
    replace_partitions(
        uri,
        files,
        partition_column=flow.partition_column,
        values=plan.dates,
        read_version=plan.read_version,
    )
    progress = table_progress(uri, flow)
    assert progress is not None  # it existed when the plan was made
    counts = {day: progress.rows_by_date.get(day, 0) for day in plan.dates}
    seconds = time.monotonic() - started
    log.info(
        "backfilled %s of %s: %s rows in %.1fs", plan.dates, uri, sum(counts.values()), seconds
    )
    return BackfillResult(plan, counts, progress.version, seconds)


def _or(offset: int | None, default: int) -> int:
    return default if offset is None else offset
