"""A use case's full refresh, after its function changed: its table rebuilt from its input.

- A streaming use case's refresh is requested, not done here: a marker beside its checkpoint
  that its query takes at its next start (UseCaseStream.start), deleting its table and
  checkpoint before Spark reads anything, so that it builds the table anew from the input's
  whole snapshot (Delta's streaming source starts there), exactly once as always. Only the
  query's own start deletes, and at most one query of a use case runs: no refresh can race it.
- A Daily use case's table is deleted and every day its input holds, up to yesterday, is made
  again here (daily.py's build_day), one commit per day.
"""

from __future__ import annotations

from collections.abc import Iterator
from datetime import UTC, date, datetime

from pyspark.sql import SparkSession

from tidelake.streaming.delta.progress import table_progress
from tidelake.streaming.settings import EngineSettings
from tidelake.streaming.storage.location import Location
from tidelake.streaming.usecase.daily import BuiltDay, DaySource, build_day, plan_day
from tidelake.streaming.usecase.spec import UseCaseError, UseCaseSpec


def refresh_marker(use_case: UseCaseSpec, settings: EngineSettings) -> Location:
    """The file whose presence asks a streaming use case's next start for a full refresh."""
    return Location(settings.checkpoint_uri(f"{use_case.checkpoint_name}.refresh"))


def request_refresh(use_case: UseCaseSpec, settings: EngineSettings) -> Location:
    """Ask the streaming use case's next start to rebuild its table from its whole input."""
    marker = refresh_marker(use_case, settings)
    marker.write_text(f"requested {datetime.now(UTC).isoformat(timespec='seconds')}\n")
    return marker


def take_refresh(use_case: UseCaseSpec, settings: EngineSettings) -> bool:
    """At a streaming use case's start: when a refresh was requested, delete its table and
    checkpoint, then the request (a crash in between deletes them again at the next start)."""
    marker = refresh_marker(use_case, settings)
    if not marker.exists():
        return False
    Location(settings.table_uri(use_case.table)).delete_tree()
    Location(settings.checkpoint_uri(use_case.checkpoint_name)).delete_tree()
    marker.delete_file()
    return True


def refresh_daily(
    spark: SparkSession,
    use_case: UseCaseSpec,
    source: DaySource,
    settings: EngineSettings,
    today: date | None = None,
) -> Iterator[BuiltDay]:
    """Delete a Daily use case's table, then make every day its flow's table holds before
    `today` (UTC) again, yielding each as it is committed. The first day is planned before the
    table is deleted: a missing input or a function that fails to plan leaves the table as it
    was; a day that fails later stops the refresh with the days before it made."""
    progress = table_progress(settings.table_uri(source.flow.table), source.flow)
    if progress is None:
        raise UseCaseError(
            f"use case {use_case.name}: nothing to refresh from: flow {source.flow.name}'s "
            "table does not exist yet"
        )
    last = today or datetime.now(UTC).date()
    days = sorted(d for d in map(date.fromisoformat, progress.rows_by_date) if d < last)
    if days:
        plan_day(spark, use_case, source, settings, days[0])
    Location(settings.table_uri(use_case.table)).delete_tree()
    for day in days:
        yield build_day(spark, use_case, source, settings, day)
