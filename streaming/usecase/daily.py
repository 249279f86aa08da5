"""A Daily use case's day: the function applied to its input's same day, read at one Delta
version, replacing that day of its table whole in one commit (delta/commit.py's
replace_partitions). Running a day twice gives the same table; the other days' files are not
touched. Its Dagster asset (assets/usecases/daily_asset.py) runs it when the input day closes or
is rebuilt; a full refresh (refresh.py) runs it for every day of the input.

The input is a flow's table or another use case's (`DaySource`). An Append use case's table is
complete for a day only once that use case has read what its flow had when the day was asked
for: the day waits for it (a few seconds behind a running stream), and fails naming it if it
does not catch up. A day whose input's day changed while it was made is made again from the
newer version.
"""

from __future__ import annotations

import logging
import time
from collections.abc import Iterator, Mapping
from contextlib import contextmanager
from dataclasses import dataclass
from datetime import date

from py4j.protocol import Py4JJavaError
from pyspark.errors import PySparkException
from pyspark.sql import DataFrame, SparkSession

from tidelake.streaming.delta.commit import DeltaCommitError, replace_partitions
from tidelake.streaming.delta.files import write_data_files
from tidelake.streaming.delta.progress import date_files
from tidelake.streaming.delta.tables import open_table
from tidelake.streaming.flow.spec import FlowSpec
from tidelake.streaming.polling import poll_until
from tidelake.streaming.settings import EngineSettings
from tidelake.streaming.usecase.declared import input_flow, input_use_case
from tidelake.streaming.usecase.inputs import (
    InputMissingError,
    day_input,
    event_timestamp,
    input_version,
)
from tidelake.streaming.usecase.output import PARTITION_COLUMN, function_rows, stored_schema
from tidelake.streaming.usecase.position import committed_input_version
from tidelake.streaming.usecase.sinks import prepare_table
from tidelake.streaming.usecase.spec import (
    EVENT_TIMESTAMP,
    UseCaseError,
    UseCaseSpec,
    failure_line,
)

log = logging.getLogger(__name__)

MADE_AT_MOST = 3
"""Times a day is made in a row while its input's day keeps changing under it."""

CATCH_UP_WAIT_S = 300.0
"""How long a day waits for the Append use case it reads to read what its flow had."""


@dataclass(frozen=True)
class DaySource:
    """A Daily use case's input, resolved: whose table, and the flow whose days it has."""

    flow: FlowSpec
    """The flow at the start of the chain of inputs: the days are its days."""
    reads: UseCaseSpec | None
    """The use case whose table is read; None when it is the flow's."""

    def table_uri(self, settings: EngineSettings) -> str:
        return settings.table_uri(self.flow.table if self.reads is None else self.reads.table)

    @property
    def day_column(self) -> str:
        """The read table's date partition column: the flow's, or a use case table's `date`."""
        return self.flow.partition_column if self.reads is None else PARTITION_COLUMN

    @property
    def described(self) -> str:
        return f"flow {self.flow.name}" if self.reads is None else f"use case {self.reads.name}"


def day_source(
    use_case: UseCaseSpec, use_cases: Mapping[str, UseCaseSpec], flows: Mapping[str, FlowSpec]
) -> DaySource:
    return DaySource(flows[input_flow(use_case, use_cases)], input_use_case(use_case, use_cases))


@dataclass(frozen=True)
class BuiltDay:
    day: date
    rows: int
    input_version: int
    """The input table's version the day was read at."""
    table_version: int
    seconds: float


def build_day(
    spark: SparkSession,
    use_case: UseCaseSpec,
    source: DaySource,
    settings: EngineSettings,
    day: date,
) -> BuiltDay:
    """Replace day `day` of the use case's table with the function applied to the input's day.
    A function that raises or an output that does not fit the table: a UseCaseError naming the
    use case and the day, the table untouched."""
    for _ in range(MADE_AT_MOST):
        built = _build_day_once(spark, use_case, source, settings, day)
        changed = _day_changed_since(source, settings, day, built.input_version)
        if changed is None:
            return built
        log.info(
            "%s %s: the input's day changed while it was made (version %s -> %s): made again",
            use_case.name,
            day,
            built.input_version,
            changed,
        )
    return built  # still changing: the next materialization of the input day makes it again


def _build_day_once(
    spark: SparkSession,
    use_case: UseCaseSpec,
    source: DaySource,
    settings: EngineSettings,
    day: date,
) -> BuiltDay:
    started = time.monotonic()
    table_uri = settings.table_uri(use_case.table)
    rows, version = plan_day(spark, use_case, source, settings, day)
    with _naming_the_day(use_case, day):
        schema = stored_schema(use_case, rows)
        table = prepare_table(spark, use_case, table_uri, schema)
        files = write_data_files(rows, table_uri, PARTITION_COLUMN, f"day-{day}")
        result = replace_partitions(
            table_uri,
            files,
            partition_column=PARTITION_COLUMN,
            values=[day.isoformat()],
            read_version=table.version(),
        )
    return BuiltDay(day, result.rows, version, int(result.version or 0), time.monotonic() - started)


def plan_day(
    spark: SparkSession,
    use_case: UseCaseSpec,
    source: DaySource,
    settings: EngineSettings,
    day: date,
) -> tuple[DataFrame, int]:
    """The day's rows as the function makes them, planned by Spark but not run, and the input
    version they are read at; a UseCaseError naming the use case and the day when the input is
    missing or behind, or the function fails to plan."""
    with _naming_the_day(use_case, day):
        _wait_for_feeder(use_case, source, settings)
        uri = source.table_uri(settings)
        version = input_version(use_case, uri, source.described)
        rows = function_rows(use_case, day_rows(spark, source, uri, day, version), day)
    return rows, version


@contextmanager
def _naming_the_day(use_case: UseCaseSpec, day: date) -> Iterator[None]:
    """tidelake's and Spark's errors while making a day as one line naming the use case and
    the day."""
    try:
        yield
    except (UseCaseError, InputMissingError, DeltaCommitError) as exc:
        raise UseCaseError(_of_day(use_case, day, str(exc))) from None
    except (PySparkException, Py4JJavaError) as exc:  # the function's code, run by Spark
        raise UseCaseError(_of_day(use_case, day, failure_line(use_case, exc))) from None


def day_rows(
    spark: SparkSession, source: DaySource, uri: str, day: date, version: int
) -> DataFrame:
    """The input's day at `version` of its table at `uri`. A flow's rows gain the
    event_timestamp a streaming input has; a use case's table has its own columns."""
    rows = day_input(spark, uri, source.day_column, day, version)
    if source.reads is None:
        rows = rows.withColumn(EVENT_TIMESTAMP, event_timestamp(source.flow))
    return rows


def _wait_for_feeder(use_case: UseCaseSpec, source: DaySource, settings: EngineSettings) -> None:
    """When the input is a streaming use case's table: wait until it has read the flow's table
    as it is now."""
    feeder = source.reads
    if feeder is None or not feeder.streaming:
        return
    flow_uri = settings.table_uri(source.flow.table)
    target = input_version(use_case, flow_uri, f"flow {source.flow.name}")
    checkpoint = settings.checkpoint_uri(feeder.checkpoint_name)

    def caught_up() -> bool | None:
        read = committed_input_version(checkpoint)
        return True if read is not None and read >= target else None

    poll_until(
        caught_up,
        timeout_s=CATCH_UP_WAIT_S,
        interval_s=1.0,
        timeout_error=lambda _: UseCaseError(
            f"use case {use_case.name}: its input, use case {feeder.name}, has not read "
            f"{source.flow.table} version {target} within {CATCH_UP_WAIT_S:.0f} s (read: "
            f"{committed_input_version(checkpoint)}); is its stream running?"
        ),
    )


def _day_changed_since(
    source: DaySource, settings: EngineSettings, day: date, version: int
) -> int | None:
    """The input table's newest version when its files of `day` differ from those at `version`
    (a backfill or a late write landed while the day was made; a compaction too, which costs a
    needless remake only), else None."""
    uri = source.table_uri(settings)
    latest = open_table(uri)
    if latest.version() == version:
        return None
    before = open_table(uri, version=version)
    if date_files(before, source.day_column, day) == date_files(latest, source.day_column, day):
        return None
    return latest.version()


def _of_day(use_case: UseCaseSpec, day: date, message: str) -> str:
    """A use case's one-line error with the day it was building."""
    return f"use case {use_case.name}, day {day}: " + message.removeprefix(
        f"use case {use_case.name}: "
    )
