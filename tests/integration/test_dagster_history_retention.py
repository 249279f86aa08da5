"""Dagster's history retention on real instances, SQLite and PostgreSQL: what expires goes, the
partitions' materializations, the runs that made them and each asset's and check's newest
record stay, and nothing younger than the retention is touched."""

import os
import time
from datetime import UTC, datetime, timedelta
from typing import Any

import dagster as dg
from dagster._core.events.log import EventLogEntry
from dagster._core.storage.event_log.sqlite.sqlite_event_log import SqliteEventLogStorage

from tidelake.assets.history.retention import (
    RETENTION_JOB,
    _runs_with_events_to_expire,
    purge_dagster_history,
)

TABLE = dg.AssetKey(["lake", "events"])
ALIVE = dg.AssetCheckKey(TABLE, "stream_alive")


@dg.asset(key=TABLE, check_specs=[dg.AssetCheckSpec("stream_alive", asset=TABLE)])
def events_table() -> Any:
    yield dg.MaterializeResult(metadata={"rows": 1})
    yield dg.AssetCheckResult(check_name="stream_alive", passed=True)


@dg.op
def upkeep_op(context: dg.OpExecutionContext) -> None:
    context.log.info("compacted nothing")
    context.log_event(dg.AssetObservation(asset_key=TABLE, metadata={"from": "upkeep"}))


@dg.job
def upkeep() -> None:
    upkeep_op()


def _history(instance: dg.DagsterInstance) -> None:
    """An upkeep run, a run that materialized a date, a stream run still live with two progress
    lines, then the supervisor's runless health: three observations, three evaluations."""
    upkeep.execute_in_process(instance=instance)
    dg.materialize([events_table], instance=instance)
    for n in range(3):
        instance.report_runless_asset_event(dg.AssetObservation(TABLE, metadata={"lag": n}))
        instance.report_runless_asset_event(
            dg.AssetCheckEvaluation(
                asset_key=TABLE, check_name="stream_alive", passed=True, metadata={"n": n}
            )
        )


def _live_run(instance: dg.DagsterInstance) -> str:
    run = instance.create_run_for_job(job_def=upkeep)
    for line in ("batch 1: 10 rows", "batch 2: 12 rows"):
        _progress_line(instance, run.run_id, line)
    return run.run_id


def _progress_line(instance: dg.DagsterInstance, run_id: str, line: str) -> None:
    instance.store_event(
        EventLogEntry(
            error_info=None,
            level="INFO",
            user_message=line,
            run_id=run_id,
            timestamp=time.time(),
            job_name=upkeep.name,
        )
    )


def _log_lines(instance: dg.DagsterInstance, run_id: str) -> list[str]:
    return [e.user_message for e in instance.all_logs(run_id) if e.dagster_event is None]


def _observations(instance: dg.DagsterInstance) -> list[dict[str, Any]]:
    records = instance.fetch_observations(TABLE, limit=100).records
    return [{k: v.value for k, v in r.asset_observation.metadata.items()} for r in records]


def _evaluations(instance: dg.DagsterInstance) -> int:
    return len(instance.event_log_storage.get_asset_check_execution_history(ALIVE, limit=100))


def test_what_expired_goes_and_what_defines_the_partitions_stays(make_instance: Any) -> None:
    with make_instance() as instance:
        _history(instance)
        live = _live_run(instance)
        runs = {r.job_name: r.run_id for r in instance.get_runs() if r.run_id != live}
        assert len(_observations(instance)) == 4 and _evaluations(instance) == 4

        purged = purge_dagster_history(instance, before=time.time() + 1)

        assert instance.get_run_by_id(runs["upkeep"]) is None  # ended, materialized nothing
        kept = instance.get_run_by_id(runs["__ephemeral_asset_job__"])
        assert kept is not None  # it materialized the date: its record is the partition's status
        assert len(instance.fetch_materializations(TABLE, limit=10).records) == 1
        assert _log_lines(instance, kept.run_id) == []
        assert instance.get_run_by_id(live) is not None and _log_lines(instance, live) == []
        assert _observations(instance) == [{"lag": 2}]  # the newest
        assert _evaluations(instance) == 1
        assert purged.runs == 1 and purged.events > 0 and purged.check_executions == 3
        storage = instance.event_log_storage
        if isinstance(storage, SqliteEventLogStorage):  # the run's own file goes with it
            assert not os.path.exists(storage.path_for_shard(runs["upkeep"]))
        else:
            assert instance.all_logs(runs["upkeep"]) == []

        again = purge_dagster_history(instance, before=time.time() + 1)
        assert (again.runs, again.events, again.check_executions) == (0, 0, 0)


def test_a_later_purge_opens_only_the_runs_that_can_hold_newly_expired_events(
    make_instance: Any,
) -> None:
    with make_instance() as instance:
        _history(instance)
        live = _live_run(instance)
        purge_dagster_history(instance, before=time.time() + 1)
        _progress_line(instance, live, "batch 3: 9 rows")

        # the run that materialized ended before the first purge: nothing of it can expire now
        assert _runs_with_events_to_expire(instance, datetime.now(UTC) + timedelta(hours=1)) == [
            live
        ]
        purge_dagster_history(instance, before=time.time() + 1)
        assert _log_lines(instance, live) == []


def test_history_younger_than_the_retention_is_untouched(make_instance: Any) -> None:
    with make_instance() as instance:
        _history(instance)
        live = _live_run(instance)
        runs_before = {r.run_id for r in instance.get_runs()}

        purged = purge_dagster_history(instance, before=time.time() - 3600)

        assert (purged.runs, purged.events, purged.check_executions) == (0, 0, 0)
        assert {r.run_id for r in instance.get_runs()} == runs_before
        assert len(_observations(instance)) == 4 and _evaluations(instance) == 4
        assert _log_lines(instance, live) == ["batch 1: 10 rows", "batch 2: 12 rows"]


def test_the_daily_job_purges_with_its_configured_retention(make_instance: Any) -> None:
    from tidelake.assets.definitions import build_definitions

    defs = build_definitions()
    job = defs.resolve_job_def(RETENTION_JOB)
    with make_instance() as instance:
        _history(instance)
        result = job.execute_in_process(
            instance=instance,
            run_config={"ops": {"purge_dagster_history_op": {"config": {"days": 1e-9}}}},
        )
        assert result.success
        assert _observations(instance) == [{"lag": 2}]
        assert [r.job_name for r in instance.get_runs()].count("upkeep") == 0
        schedule = defs.resolve_schedule_def(f"{RETENTION_JOB}_daily")
        assert schedule.default_status == dg.DefaultScheduleStatus.RUNNING
