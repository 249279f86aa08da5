"""Dagster's history retention on real instances, SQLite and PostgreSQL: what expires goes, the
partitions' materializations, the runs that made them and each asset's and check's newest
record stay, and nothing younger than the retention is touched."""

import os
import time
from collections.abc import Iterator
from datetime import UTC, datetime, timedelta
from typing import Any

import dagster as dg
import pytest
import sqlalchemy as sa

from tidelake.assets.history.event_log_tables import (
    BATCH_ROWS,
    RUNLESS_RUN_ID,
    TESTED_DAGSTER,
    untested_dagster_warning,
)
from tidelake.assets.history.retention import (
    RETENTION_JOB,
    _previous_cutoff,
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


def _progress_line(
    instance: dg.DagsterInstance, run_id: str, line: str, at: float | None = None
) -> None:
    instance.store_event(
        dg.EventLogEntry(
            error_info=None,
            level="INFO",
            user_message=line,
            run_id=run_id,
            timestamp=time.time() if at is None else at,
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
        if storage.is_run_sharded:  # SQLite: the run's own file goes with it
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
        later = datetime.now(UTC) + timedelta(hours=1)
        assert _runs_with_events_to_expire(instance, later, _previous_cutoff(instance)) == [live]
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


DAYS = dg.AssetKey(["lake", "days"])
DAILY = dg.DailyPartitionsDefinition(start_date="2026-01-01", end_date="2026-01-04")


@dg.asset(key=DAYS, partitions_def=DAILY)
def days_table() -> None:
    return None


@dg.asset_check(asset=DAYS, name="volume", partitions_def=DAILY)  # as quality/partition_checks
def volume(context: dg.AssetCheckExecutionContext) -> dg.AssetCheckResult:
    return dg.AssetCheckResult(passed=context.partition_key != "2026-01-02")


QUIET = dg.AssetKey(["lake", "quiet"])


@dg.op
def observe_only(context: dg.OpExecutionContext) -> None:
    context.log_event(dg.AssetObservation(asset_key=QUIET, metadata={"n": 1}))


@dg.job
def observer() -> None:
    observe_only()


def test_each_date_keeps_its_check_status_and_each_asset_its_newest_observation(
    make_instance: Any,
) -> None:
    """A partitioned check keeps its newest execution per date; a run that holds an asset's only
    (so newest) observation is kept though it materialized nothing."""
    with make_instance() as instance:
        for day in ("2026-01-01", "2026-01-02", "2026-01-03"):
            dg.materialize([days_table, volume], instance=instance, partition_key=day)
        observed = observer.execute_in_process(instance=instance).run_id
        purge_dagster_history(instance, before=time.time() + 1)

        history = instance.event_log_storage.get_asset_check_execution_history(
            dg.AssetCheckKey(DAYS, "volume"), limit=10
        )
        assert sorted(r.partition for r in history) == ["2026-01-01", "2026-01-02", "2026-01-03"]
        failed = [r.partition for r in history if r.status.value == "FAILED"]
        assert failed == ["2026-01-02"]
        assert instance.get_run_by_id(observed) is not None
        assert len(instance.fetch_observations(QUIET, limit=5).records) == 1


@dg.asset(key=TABLE, check_specs=[dg.AssetCheckSpec("stream_alive", asset=TABLE)])
def unreachable_table() -> Iterator[dg.MaterializeResult]:
    raise RuntimeError("the stream's table is unreachable")
    yield  # an asset with checks yields its results


def test_a_check_planned_in_a_failed_run_keeps_the_last_completed_result(
    make_instance: Any,
) -> None:
    """A check that passed, then a run that planned it and failed: after the purge the check
    still has its last verdict, and the failed run that holds its newest execution is kept."""
    with make_instance() as instance:
        _history(instance)  # the check passed in a run that materialized
        failed = dg.materialize([unreachable_table], instance=instance, raise_on_error=False)
        assert not failed.success

        purge_dagster_history(instance, before=time.time() + 1)

        summary = instance.event_log_storage.get_asset_check_summary_records([ALIVE])[ALIVE]
        completed = summary.last_completed_check_execution_record
        assert completed is not None and completed.status.value == "SUCCEEDED"
        assert instance.get_run_by_id(failed.run_id) is not None


def test_on_a_dagster_or_schema_it_was_not_tested_with_only_dagster_s_api_is_used(
    make_instance: Any, monkeypatch: pytest.MonkeyPatch, caplog: pytest.LogCaptureFixture
) -> None:
    """The table deletes name Dagster's tables: on another Dagster version, or with the event log
    at another alembic revision, they are skipped with a warning naming both, while the ended
    runs that hold nothing kept are still deleted through Dagster's API."""
    with make_instance() as instance:
        _history(instance)
        with monkeypatch.context() as patched:
            patched.setattr(dg, "__version__", "1.14.0")
            purged = purge_dagster_history(instance, before=time.time() + 1)
        assert purged.skipped is not None and "\n" not in purged.skipped
        assert f"tested on Dagster {TESTED_DAGSTER}" in purged.skipped
        assert "this instance has Dagster 1.14.0" in purged.skipped
        assert purged.skipped in caplog.text
        assert (purged.runs, purged.events, purged.check_executions) == (1, 0, 0)
        assert [r.job_name for r in instance.get_runs()] == ["__ephemeral_asset_job__"]
        # the runless observations and evaluations stay; the upkeep's went with its run
        assert len(_observations(instance)) == 3 and _evaluations(instance) == 4

        with instance.event_log_storage.index_connection() as conn:  # a later schema
            conn.execute(sa.text("update alembic_version set version_num = 'f00dfeed1234'"))
        newest = upkeep.execute_in_process(instance=instance).run_id  # the newest observation
        purged = purge_dagster_history(instance, before=time.time() + 1)
        assert purged.skipped is not None and "at revision f00dfeed1234" in purged.skipped
        assert purged.runs == 0 and instance.get_run_by_id(newest) is not None


def test_the_code_location_warns_on_a_dagster_the_deletes_were_not_tested_on(
    monkeypatch: pytest.MonkeyPatch, caplog: pytest.LogCaptureFixture
) -> None:
    from tidelake.assets.history.retention import build_history_retention_job
    from tidelake.streaming.settings import load_engine_settings

    assert untested_dagster_warning(RETENTION_JOB) is None
    monkeypatch.setattr(dg, "__version__", "1.14.0")
    job = build_history_retention_job(load_engine_settings())
    warning = untested_dagster_warning(RETENTION_JOB)
    assert warning is not None and "Dagster 1.14.0" in warning and "skipped" in warning
    assert warning in caplog.text and warning in (job.description or "")


@pytest.mark.parametrize("dagster_version", ["tested", "untested"])
def test_thirty_daily_purges_leave_no_run_older_than_the_retention_but_the_newest_per_asset(
    make_instance: Any, monkeypatch: pytest.MonkeyPatch, dagster_version: str
) -> None:
    """Each "day" an upkeep run, every tenth day a run that observes a quiet asset (its newest
    observation, so kept while no later one exists), then the daily purge with a retention of two
    days: a run kept once as the newest record is looked at again and deleted once a newer run
    holds it."""
    if dagster_version == "untested":
        monkeypatch.setattr(dg, "__version__", "1.14.0")
    with make_instance() as instance:
        days: list[float] = []
        for day in range(30):
            upkeep.execute_in_process(instance=instance)
            if day % 10 == 0:
                observer.execute_in_process(instance=instance)
            time.sleep(0.01)
            days.append(time.time())
            if len(days) > 2:
                purge_dagster_history(instance, before=days[-3])
        cutoff = datetime.fromtimestamp(days[-3], UTC)
        old = instance.get_run_records(dg.RunsFilter(updated_before=cutoff))
        newest = {
            r.run_id for key in (TABLE, QUIET) for r in instance.fetch_observations(key, 1).records
        }
        last_runs = {r.asset_entry.last_run_id for r in instance.get_asset_records()}
        assert {r.dagster_run.run_id for r in old} <= newest | last_runs
        assert len(old) <= 2  # the newest observation of each asset: TABLE's upkeep, QUIET's


def test_deletes_go_in_bounded_batches(make_instance: Any) -> None:
    """More expired rows than one batch: every DELETE statement removes at most BATCH_ROWS rows
    (one short lock each), and together they remove them all."""
    deleted_per_statement: list[int] = []

    def count(conn: Any, cursor: Any, statement: str, *_: Any) -> None:
        if statement.lstrip().upper().startswith("DELETE"):
            deleted_per_statement.append(cursor.rowcount)

    with make_instance() as instance:
        live = instance.create_run_for_job(job_def=upkeep).run_id
        cutoff = time.time() + 60  # after the run's creation, as any event older than it
        for n in range(BATCH_ROWS + 300):
            _progress_line(instance, live, f"batch {n}", at=cutoff - 30)
        _progress_line(instance, live, "the newest batch", at=cutoff + 30)
        sa.event.listen(sa.engine.Engine, "after_cursor_execute", count)
        try:
            purged = purge_dagster_history(instance, before=cutoff)
        finally:
            sa.event.remove(sa.engine.Engine, "after_cursor_execute", count)
        assert purged.events == BATCH_ROWS + 300
        assert _log_lines(instance, live) == ["the newest batch"]
        assert max(deleted_per_statement) <= BATCH_ROWS


def test_the_cutoff_is_read_as_dagster_stores_its_times(
    make_instance: Any, monkeypatch: pytest.MonkeyPatch
) -> None:
    """Dagster stores UTC wall times without a zone: a process in another zone purges exactly
    what is older than the cutoff; and runless events have the run id the purge looks for."""
    monkeypatch.setenv("TZ", "Asia/Kolkata")  # +05:30: local wall times would move 5.5 h
    time.tzset()
    try:
        with make_instance() as instance:
            live = instance.create_run_for_job(job_def=upkeep).run_id
            cutoff = time.time() + 60  # after the run's creation, as any event older than it
            _progress_line(instance, live, "a minute older", at=cutoff - 60)
            _progress_line(instance, live, "a minute younger", at=cutoff + 60)
            instance.report_runless_asset_event(dg.AssetObservation(TABLE, metadata={"n": 1}))

            purge_dagster_history(instance, before=cutoff)

            assert _log_lines(instance, live) == ["a minute younger"]
            runless = instance.fetch_observations(TABLE, limit=1).records[0]
            assert runless.run_id == RUNLESS_RUN_ID
    finally:
        monkeypatch.delenv("TZ")
        time.tzset()
