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
the runs that hold any of these or that an asset names as its last run.
"""

import contextlib
import os
import time
from dataclasses import dataclass
from datetime import UTC, datetime

import dagster as dg
import sqlalchemy as sa
from dagster._core.events import DagsterEventType
from dagster._core.storage.dagster_run import FINISHED_STATUSES, NOT_FINISHED_STATUSES
from dagster._core.storage.event_log.schema import (
    AssetCheckExecutionsTable,
    AssetEventTagsTable,
    AssetKeyTable,
    SqlEventLogStorageTable,
)
from dagster._core.storage.event_log.sql_event_log import SqlEventLogStorage
from dagster._core.storage.event_log.sqlite.sqlite_event_log import SqliteEventLogStorage
from pydantic import Field

from tidelake.streaming.errors import ConfigError
from tidelake.streaming.settings import EngineSettings

RETENTION_JOB = "dagster_history_retention"
RUNLESS_SHARD = ""
"""The run id of events recorded outside any run (the supervisor's): SQLite keeps them in a
shard of that name, as it keeps each run's in one of its own."""
EXPIRING_EVENTS = (
    DagsterEventType.ASSET_OBSERVATION.value,
    DagsterEventType.ASSET_CHECK_EVALUATION.value,
)
"""Besides log lines (events without a Dagster type), what expires in a run that is kept."""
TESTED_DIALECTS = ("sqlite", "postgresql")
COMPLETED = ("SUCCEEDED", "FAILED")
"""asset_check_executions' statuses of an execution that ended with a verdict (not PLANNED)."""
LAST_CUTOFF_KEY = "tidelake/dagster_history_purged_before"
"""The previous purge's cutoff (a Unix time), in the instance's key-value storage."""


@dataclass(frozen=True)
class PurgedHistory:
    """What one purge deleted."""

    runs: int
    events: int
    check_executions: int


def purge_dagster_history(instance: dg.DagsterInstance, before: float) -> PurgedHistory:
    """Delete the history older than `before` (a Unix time) that the module's docstring names.

    Works on Dagster's storage on SQLite and PostgreSQL; another refuses in one line."""
    storage = _sql_storage(instance)
    cutoff = datetime.fromtimestamp(before, UTC)
    since = _previous_cutoff(instance)
    with storage.index_connection() as conn:
        kept = _runs_holding_kept_records(conn)
    # a run ended before the previous purge's cutoff was kept then, and still is (it holds a
    # materialization) or nearly so (a newest record of a long quiet asset): not asked again
    ended = instance.get_run_records(
        dg.RunsFilter(statuses=list(FINISHED_STATUSES), updated_before=cutoff, updated_after=since)
    )
    deleted_runs = 0
    for record in ended:
        run_id = record.dagster_run.run_id
        if run_id in kept or _materialized(instance, run_id):
            continue
        instance.delete_run(run_id)
        _delete_run_files(instance, storage, run_id)
        deleted_runs += 1
    naive_cutoff = cutoff.replace(tzinfo=None)  # how Dagster stores its timestamps
    with storage.index_connection() as conn:
        # on PostgreSQL every run's events are here; on SQLite the mirrored asset events
        check_executions = _delete_expired_check_executions(conn, naive_cutoff)
        events = _delete_expired_events(conn, naive_cutoff)  # the kept executions' events stay
    if isinstance(storage, SqliteEventLogStorage):
        for shard in (RUNLESS_SHARD, *_runs_with_events_to_expire(instance, cutoff, since)):
            with storage.run_connection(shard) as conn:
                events += _delete_expired_events(conn, naive_cutoff)
    instance.daemon_cursor_storage.set_cursor_values({LAST_CUTOFF_KEY: str(before)})
    return PurgedHistory(deleted_runs, events, check_executions)


def _sql_storage(instance: dg.DagsterInstance) -> SqlEventLogStorage:
    storage = instance.event_log_storage
    dialect = None
    if isinstance(storage, SqlEventLogStorage):
        with storage.index_connection() as conn:
            dialect = conn.dialect.name
    if dialect not in TESTED_DIALECTS:
        raise ConfigError(
            f"{RETENTION_JOB}: Dagster's event log is {type(storage).__name__}"
            f"{f' on {dialect}' if dialect else ''}; the history retention deletes from Dagster's "
            "storage on SQLite or PostgreSQL only"
        )
    assert isinstance(storage, SqlEventLogStorage)
    return storage


def _previous_cutoff(instance: dg.DagsterInstance) -> datetime | None:
    values = instance.daemon_cursor_storage.get_cursor_values({LAST_CUTOFF_KEY})
    previous = values.get(LAST_CUTOFF_KEY)
    return datetime.fromtimestamp(float(previous), UTC) if previous else None


def _runs_holding_kept_records(conn: sa.Connection) -> set[str]:
    """Runs that hold an asset's newest observation or a kept check execution, or that an asset
    names as its last run (asset_keys.last_run_id)."""
    events, executions = SqlEventLogStorageTable, AssetCheckExecutionsTable
    newest_observations = sa.select(events.c.run_id).where(
        events.c.id.in_(_newest_observation_ids())
    )
    kept_executions = sa.select(executions.c.run_id).where(
        sa.or_(
            executions.c.id.in_(_newest_executions()),
            executions.c.id.in_(_newest_executions(completed=True)),
        )
    )
    last_runs = sa.select(AssetKeyTable.c.last_run_id)
    runs: set[str] = set()
    for query in (newest_observations, kept_executions, last_runs):
        runs.update(run_id for (run_id,) in conn.execute(query) if run_id)
    return runs


def _newest_observation_ids() -> sa.ScalarSelect[int]:
    events = SqlEventLogStorageTable
    return (
        sa.select(sa.func.max(events.c.id))
        .where(events.c.dagster_event_type == DagsterEventType.ASSET_OBSERVATION.value)
        .group_by(events.c.asset_key)
        .scalar_subquery()
    )


def _newest_executions(completed: bool = False) -> sa.ScalarSelect[int]:
    """Per check and partition, the newest execution, or with `completed` the newest that ended
    with a verdict: what Dagster shows as the check's last result while a newer one is planned."""
    executions = AssetCheckExecutionsTable
    query = sa.select(sa.func.max(executions.c.id))
    if completed:
        query = query.where(executions.c.execution_status.in_(COMPLETED))
    return query.group_by(
        executions.c.asset_key, executions.c.check_name, executions.c.partition
    ).scalar_subquery()


def _runs_with_events_to_expire(
    instance: dg.DagsterInstance, cutoff: datetime, since: datetime | None
) -> list[str]:
    """The kept runs whose SQLite files may hold events that expire now: started before the
    cutoff, and still running or last updated after the previous purge's cutoff (`since`: a run
    that ended before it had all its expiring events deleted then). Without the bound a daily
    purge would open every materializing run's file ever kept, more each day."""
    if since is None:
        return list(instance.get_run_ids(dg.RunsFilter(created_before=cutoff)))
    running = dg.RunsFilter(created_before=cutoff, statuses=list(NOT_FINISHED_STATUSES))
    updated = dg.RunsFilter(created_before=cutoff, updated_after=since)
    return sorted({*instance.get_run_ids(running), *instance.get_run_ids(updated)})


def _materialized(instance: dg.DagsterInstance, run_id: str) -> bool:
    records = instance.get_records_for_run(
        run_id, of_type=DagsterEventType.ASSET_MATERIALIZATION, limit=1
    ).records
    return bool(records)


def _delete_run_files(
    instance: dg.DagsterInstance, storage: SqlEventLogStorage, run_id: str
) -> None:
    """What a deleted run leaves on disk: its captured stdout and stderr (a compute log manager
    that cannot delete keeps them), and on SQLite its own file, which delete_run empties and
    leaves behind (~100 KB a run, 24 upkeep runs a day). This process forgets it set that file
    up, so that a later read of the run sets up an empty one instead of failing on a missing
    table."""
    with contextlib.suppress(NotImplementedError):
        instance.compute_log_manager.delete_logs(prefix=[run_id])
    if isinstance(storage, SqliteEventLogStorage):
        storage._initialized_dbs.discard(run_id)
        path = storage.path_for_shard(run_id)
        for name in (path, f"{path}-wal", f"{path}-shm"):
            with contextlib.suppress(FileNotFoundError):
                os.unlink(name)


def _delete_expired_events(conn: sa.Connection, cutoff: datetime) -> int:
    events = SqlEventLogStorageTable
    kept_evaluations = sa.select(AssetCheckExecutionsTable.c.evaluation_event_storage_id).where(
        AssetCheckExecutionsTable.c.evaluation_event_storage_id.is_not(None)
    )
    deleted = conn.execute(
        events.delete().where(
            events.c.timestamp < cutoff,
            sa.or_(
                events.c.dagster_event_type.is_(None),
                events.c.dagster_event_type.in_(EXPIRING_EVENTS),
            ),
            events.c.id.not_in(_newest_observation_ids()),
            events.c.id.not_in(kept_evaluations.scalar_subquery()),
        )
    ).rowcount
    tags = AssetEventTagsTable
    conn.execute(
        tags.delete().where(
            tags.c.event_timestamp < cutoff,
            ~sa.exists().where(events.c.id == tags.c.event_id),
        )
    )
    return deleted


def _delete_expired_check_executions(conn: sa.Connection, cutoff: datetime) -> int:
    executions = AssetCheckExecutionsTable
    when = sa.func.coalesce(executions.c.evaluation_event_timestamp, executions.c.create_timestamp)
    return conn.execute(
        executions.delete().where(
            when < cutoff,
            executions.c.id.not_in(_newest_executions()),
            executions.c.id.not_in(_newest_executions(completed=True)),
        )
    ).rowcount


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
    purged = purge_dagster_history(context.instance, time.time() - config.days * 86_400)
    context.log.info(
        f"deleted {purged.runs} runs, {purged.events} events and {purged.check_executions} "
        f"check executions older than {config.days:g} days ({time.monotonic() - started:.1f} s)"
    )


def build_history_retention_job(settings: EngineSettings) -> dg.JobDefinition:
    """The job; its retention is TIDELAKE_DAGSTER_HISTORY_DAYS unless a launch's config says."""

    @dg.job(
        name=RETENTION_JOB,
        description=purge_dagster_history_op.description,
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
