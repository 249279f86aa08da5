"""Dagster's history kept for a retention: the event-log retention Dagster does not have.

A stream that runs for months makes Dagster's storage grow with its age: the supervisor's
health (observations and check evaluations with no run), the stream run's progress lines and
observations (one run can live for months), the hourly upkeep's runs. Dagster purges sensor and
schedule ticks by the retention in dagster.yaml and nothing else (dagster-io/dagster#33785). The
daily `dagster_history_retention` job deletes what is older than TIDELAKE_DAGSTER_HISTORY_DAYS:

- runs that ended and hold nothing kept (replaced streams, upkeep, vacuum, this job), whole, with
  Dagster's own `delete_run`, and their captured logs;
- in the runs kept and in the runless log: log lines, observations and check evaluations.

Kept whatever their age: materializations, and the runs that made them (they are the daily
partitions' status: a date whose materialization went would look missing and be built again);
each asset's newest observation; for each check and partition its newest execution and its newest
completed one (Dagster reads a check's status from them, per date for a partitioned check); and
the runs that hold any of these or that an asset names as its last run, for as long as they do:
each purge looks again at the runs the previous one kept for that alone.

The run deletes use Dagster's API and run on any Dagster version; the deletes from Dagster's
tables run only on the storage they were tested on (event_log_tables.py), and are otherwise
skipped with a warning that says so (then every run that evaluated a check is kept too).
"""

import contextlib
import json
import logging
import os
import time
from dataclasses import dataclass
from datetime import UTC, datetime

import dagster as dg
from pydantic import Field

from tidelake.assets.history.event_log_tables import (
    RUNLESS_RUN_ID,
    EventLogTables,
    UntestedStorageError,
    stored_time,
    untested_dagster_warning,
)
from tidelake.streaming.settings import EngineSettings

RETENTION_JOB = "dagster_history_retention"
EXPIRING_EVENTS = (
    None,  # a log line
    dg.DagsterEventType.ASSET_OBSERVATION.value,
    dg.DagsterEventType.ASSET_CHECK_EVALUATION.value,
)
"""What expires in a run that is kept, and in the runless log."""
FINISHED = (dg.DagsterRunStatus.SUCCESS, dg.DagsterRunStatus.FAILURE, dg.DagsterRunStatus.CANCELED)
NOT_FINISHED = tuple(status for status in dg.DagsterRunStatus if status not in FINISHED)
LAST_CUTOFF_KEY = "tidelake/dagster_history_purged_before"
"""The previous purge's cutoff (a Unix time), in the instance's key-value storage."""
KEPT_RUNS_KEY = "tidelake/dagster_history_kept_runs"
"""The ended runs the previous purge kept only as an asset's or a check's newest record (JSON)."""

logger = logging.getLogger(__name__)


@dataclass(frozen=True)
class PurgedHistory:
    """What one purge deleted."""

    runs: int
    events: int
    check_executions: int
    skipped: str | None = None
    """Why the deletes from Dagster's tables were skipped (an untested storage), if they were."""


def purge_dagster_history(
    instance: dg.DagsterInstance, before: float, log: logging.Logger | None = None
) -> PurgedHistory:
    """Delete the history older than `before` (a Unix time) that the module's docstring names.

    On a storage, Dagster version or schema the table deletes were not tested on
    (event_log_tables.py) only Dagster's API is used: ended runs are deleted with delete_run,
    the deletes from Dagster's tables are skipped, with a warning saying so (PurgedHistory.skipped).
    """
    try:
        tables: EventLogTables | None = EventLogTables.of(instance, RETENTION_JOB)
        skipped = None
    except UntestedStorageError as untested:
        tables, skipped = None, str(untested)
        (log or logger).warning(skipped)
    cutoff = datetime.fromtimestamp(before, UTC)
    since = _previous_cutoff(instance)
    kept_executions = tables.kept_check_executions() if tables else []
    kept_runs = _runs_holding_kept_records(instance) | {run_id for _, run_id in kept_executions}
    still_kept: set[str] = set()
    deleted_runs = 0
    for record in _ended_runs(instance, cutoff, since):
        run_id = record.dagster_run.run_id
        if _kept_for_good(instance, run_id, checks=tables is None):
            continue
        if run_id in kept_runs:
            still_kept.add(run_id)  # looked at again by the next purge
            continue
        if tables:
            tables.delete_run_events(run_id)
        instance.delete_run(run_id)
        _delete_run_files(instance, tables, run_id)
        deleted_runs += 1
    events = check_executions = 0
    if tables:
        older = stored_time(before)
        check_executions = tables.delete_check_executions(older, {i for i, _ in kept_executions})
        # on PostgreSQL every run's events are in the index; on SQLite the mirrored asset events
        events = tables.delete_expired_events(
            tables.index, older, EXPIRING_EVENTS, tables.kept_evaluation_events()
        )
        if tables.run_sharded:
            # a shard's ids are its own: the index's kept evaluations name none of them
            for run_id in (RUNLESS_RUN_ID, *_runs_with_events_to_expire(instance, cutoff, since)):
                shard = tables.shard(run_id)
                events += tables.delete_expired_events(shard, older, EXPIRING_EVENTS, tags=False)
    instance.daemon_cursor_storage.set_cursor_values(
        {LAST_CUTOFF_KEY: str(before), KEPT_RUNS_KEY: json.dumps(sorted(still_kept))}
    )
    return PurgedHistory(deleted_runs, events, check_executions, skipped)


def _ended_runs(
    instance: dg.DagsterInstance, cutoff: datetime, since: datetime | None
) -> list[dg.RunRecord]:
    """The runs that ended before the cutoff and that no purge looked at yet (ended after the
    previous purge's cutoff), plus those the previous purge kept only as an asset's newest
    record: a newer one may have replaced it since. A run that materialized is kept for good,
    so not asked again; without the bound a daily purge would read every such run ever kept."""
    ended = list(
        instance.get_run_records(
            dg.RunsFilter(statuses=list(FINISHED), updated_before=cutoff, updated_after=since)
        )
    )
    values = instance.daemon_cursor_storage.get_cursor_values({KEPT_RUNS_KEY})
    again = set(json.loads(values.get(KEPT_RUNS_KEY) or "[]")) - {
        r.dagster_run.run_id for r in ended
    }
    if again:
        ended += instance.get_run_records(dg.RunsFilter(run_ids=sorted(again)))
    return ended


def _previous_cutoff(instance: dg.DagsterInstance) -> datetime | None:
    values = instance.daemon_cursor_storage.get_cursor_values({LAST_CUTOFF_KEY})
    previous = values.get(LAST_CUTOFF_KEY)
    return datetime.fromtimestamp(float(previous), UTC) if previous else None


def _runs_holding_kept_records(instance: dg.DagsterInstance) -> set[str]:
    """Runs that hold an asset's newest observation, or that an asset names as its last run."""
    runs: set[str] = set()
    for record in instance.get_asset_records():
        key = record.asset_entry.asset_key
        runs.update(r.run_id for r in instance.fetch_observations(key, limit=1).records)
        runs.add(record.asset_entry.last_run_id or RUNLESS_RUN_ID)
    return runs - {RUNLESS_RUN_ID}


def _runs_with_events_to_expire(
    instance: dg.DagsterInstance, cutoff: datetime, since: datetime | None
) -> list[str]:
    """The kept runs whose SQLite files may hold events that expire now: started before the
    cutoff, and still running or last updated after the previous purge's cutoff (`since`: a run
    that ended before it had all its expiring events deleted then). Without the bound a daily
    purge would open every materializing run's file ever kept, more each day."""
    if since is None:
        return list(instance.get_run_ids(dg.RunsFilter(created_before=cutoff)))
    running = dg.RunsFilter(created_before=cutoff, statuses=list(NOT_FINISHED))
    updated = dg.RunsFilter(created_before=cutoff, updated_after=since)
    return sorted({*instance.get_run_ids(running), *instance.get_run_ids(updated)})


def _kept_for_good(instance: dg.DagsterInstance, run_id: str, checks: bool) -> bool:
    """Whether the run materialized an asset (its record is a partition's status); with
    `checks`, also whether it evaluated a check: without the table deletes the purge cannot tell
    a check's newest execution per date, so it keeps every run that holds one."""
    kinds = {dg.DagsterEventType.ASSET_MATERIALIZATION}
    if checks:
        kinds |= {
            dg.DagsterEventType.ASSET_CHECK_EVALUATION,
            dg.DagsterEventType.ASSET_CHECK_EVALUATION_PLANNED,
        }
    return any(instance.get_records_for_run(run_id, of_type=kinds, limit=1).records)


def _delete_run_files(
    instance: dg.DagsterInstance, tables: EventLogTables | None, run_id: str
) -> None:
    """What a deleted run leaves on disk: its captured stdout and stderr (a compute log manager
    that cannot delete keeps them), and on SQLite its own file, which delete_run empties and
    leaves behind (~100 KB a run, 24 upkeep runs a day).

    A process that opened the file remembers it set it up (SqliteEventLogStorage caches that),
    and would find no table if it opened it again; none does: Dagster reads a run's events
    only for a run it has a record of (the webserver answers RunNotFound first), and the record
    went with delete_run."""
    with contextlib.suppress(NotImplementedError):
        instance.compute_log_manager.delete_logs(prefix=[run_id])
    if tables and tables.run_sharded:
        path = tables.storage.path_for_shard(run_id)
        for name in (path, f"{path}-wal", f"{path}-shm"):
            with contextlib.suppress(FileNotFoundError):
                os.unlink(name)


class HistoryRetention(dg.Config):
    days: float = Field(gt=0, description="days of Dagster's history kept")


@dg.op(
    description="Deletes Dagster's history older than the retention: ended runs that hold "
    "nothing kept, and the log lines, observations and check evaluations of the rest "
    "(materializations, each asset's newest observation and each check's newest and newest "
    "completed execution per date kept)."
)
def purge_dagster_history_op(context: dg.OpExecutionContext, config: HistoryRetention) -> None:
    started = time.monotonic()
    purged = purge_dagster_history(
        context.instance, time.time() - config.days * 86_400, context.log
    )
    context.log.info(
        f"deleted {purged.runs} runs, {purged.events} events and {purged.check_executions} "
        f"check executions older than {config.days:g} days ({time.monotonic() - started:.1f} s)"
    )


def build_history_retention_job(settings: EngineSettings) -> dg.JobDefinition:
    """The job; its retention is TIDELAKE_DAGSTER_HISTORY_DAYS unless a launch's config says.
    On a Dagster the table deletes were not tested on, the code location says so as it loads (a
    warning in its log and in the job's description)."""
    untested = untested_dagster_warning(RETENTION_JOB)
    if untested:
        logger.warning(untested)

    @dg.job(
        name=RETENTION_JOB,
        description=" ".join(filter(None, (purge_dagster_history_op.description, untested))),
        config=dg.RunConfig(
            ops={"purge_dagster_history_op": HistoryRetention(days=settings.dagster_history_days)}
        ),
    )
    def history_retention() -> None:
        purge_dagster_history_op()

    return history_retention


def build_history_retention_schedule(job: dg.JobDefinition) -> dg.ScheduleDefinition:
    return dg.ScheduleDefinition(
        name=f"{RETENTION_JOB}_daily",
        job=job,
        cron_schedule="40 3 * * *",
        execution_timezone="UTC",
        default_status=dg.DefaultScheduleStatus.RUNNING,
        description="Daily at 03:40 UTC: Dagster's history older than "
        "TIDELAKE_DAGSTER_HISTORY_DAYS deleted (a stream's history grows from its first day).",
    )
