"""Daily use cases made by Dagster's automation, on real Delta tables and Spark: a day of
calls_by_region_daily is made once when its day of call_events is materialized (the supervisor
closing it), made again by the next tick after that day is backfilled and only that day, and
equals a recomputation in pandas from the input read back by delta-rs. The runs are the ones the
automation sensor would launch (a day's checks and what they gate, in one run), executed here in
process. A function that fails fails its day with one line naming the use case and the day; the
table's other days are not touched.
"""

from __future__ import annotations

import dataclasses
import os
import subprocess
import sys
from datetime import UTC, date, datetime
from pathlib import Path
from typing import Any

import dagster as dg
import pandas as pd
import pyarrow as pa
import pytest
from deltalake import write_deltalake
from failed_calls_use_case import FAILED_BY_ACCOUNT, FAILED_CALLS
from lake_readers import read_delta
from pyspark.sql import DataFrame
from pyspark.sql import functions as F
from test_partition_expectations import SCHEMA
from test_quality_checks import requested, rows_on
from use_case_tables import assert_day_equals_recomputation, stored_day

from tidelake.assets.definitions import build_definitions
from tidelake.assets.quality.partition_checks import EXPECTATIONS
from tidelake.assets.resources import spark_resource
from tidelake.assets.tables.keys import table_key, use_case_key
from tidelake.assets.usecases.daily_asset import build_daily_asset
from tidelake.assets.usecases.refresh_job import build_refresh_job
from tidelake.streaming.calls.call_events import CALL_EVENTS
from tidelake.streaming.calls.use_cases import (
    ACCOUNT_ACTIVITY,
    CALLS_BY_REGION_DAILY,
    calls_by_region_daily,
)
from tidelake.streaming.delta.tables import open_table
from tidelake.streaming.settings import EngineSettings
from tidelake.streaming.usecase.daily import DaySource, build_day
from tidelake.streaming.usecase.refresh import refresh_marker
from tidelake.streaming.usecase.spec import Daily, FlowTable, UseCaseSpec
from tidelake.streaming.usecase.stream import UseCaseStream

INPUT = table_key(CALL_EVENTS)
FROM_CALLS = DaySource(CALL_EVENTS, None)
DAILY = use_case_key(CALLS_BY_REGION_DAILY)
DAYS = ["2026-11-20", "2026-11-21", "2026-11-22"]
NOW = datetime(2026, 11, 23, 12, tzinfo=UTC)  # the days are within automation's lookback


def varied_rows(day: str, n: int, offset: int) -> list[dict[str, Any]]:
    """Clean rows of the day whose durations and states vary by offset (a backfill's rows)."""
    rows = rows_on(day, n, offset=offset)
    for k, row in enumerate(rows):
        row["duration"] = (k * 7919 + offset) % 900
        row["call_state"] = "failed" if (k + offset) % 4 == 0 else "completed"
    return rows


def day_files(
    settings: EngineSettings, table: str = CALLS_BY_REGION_DAILY.table
) -> dict[str, set[str]]:
    """The data files of each day of a daily use case's table's current snapshot."""
    actions = pa.table(open_table(settings.table_uri(table)).get_add_actions(flatten=True))
    actions = actions.to_pydict()
    files: dict[str, set[str]] = {}
    for path, day in zip(actions["path"], actions["partition.date"], strict=True):
        files.setdefault(str(day), set()).add(path)
    return files


@pytest.fixture
def lake(spark: Any, tmp_path: Path) -> EngineSettings:
    settings = EngineSettings(lake=tmp_path / "lake", checkpoints=tmp_path / "cp")
    rows = [r for n, day in enumerate(DAYS) for r in varied_rows(day, 90 + 10 * n, n * 1000)]
    write_deltalake(
        settings.table_uri(CALL_EVENTS.table),
        pa.Table.from_pylist(rows, SCHEMA),
        partition_by=["date"],
    )
    return settings


def test_a_day_is_made_once_when_it_closes_and_again_only_after_its_backfill(
    lake: EngineSettings,
) -> None:
    # what the automation sensor launches for a day: the input day's checks and what they gate,
    # the run naming both (as the sensor's runs do); a tick lands inside the run, once the day's
    # step is done and the input day's checks have passed in that same run (the daemon ticks
    # every 30 s whatever runs are in flight)
    ticks_inside_runs: list[set[str]] = []

    @dg.success_hook
    def tick_inside_the_run(context: dg.HookContext) -> None:
        nonlocal cursor
        if context.op.name == DAILY.to_python_identifier():
            days, cursor = tick(cursor)
            ticks_inside_runs.append(days)

    day_run = dg.define_asset_job(
        "day_run",
        dg.AssetSelection.checks(dg.AssetCheckKey(INPUT, EXPECTATIONS))
        | dg.AssetSelection.assets(DAILY),
        hooks={tick_inside_the_run},
    )
    defs = dg.Definitions.merge(
        build_definitions({CALL_EVENTS.name: CALL_EVENTS}, lake), dg.Definitions(jobs=[day_run])
    )
    job = defs.resolve_job_def(day_run.name).get_subset(
        asset_selection={DAILY},
        asset_check_selection={
            dg.AssetCheckKey(INPUT, EXPECTATIONS),
            dg.AssetCheckKey(DAILY, EXPECTATIONS),
        },
    )

    def tick(cursor: Any = None) -> tuple[set[str], Any]:
        result = dg.evaluate_automation_conditions(
            defs, instance, evaluation_time=NOW, cursor=cursor
        )
        return requested(result).get(DAILY.path[-1], set()), result.cursor

    def made() -> dict[str, int]:
        events = instance.fetch_materializations(DAILY, limit=100).records
        counts: dict[str, int] = {}
        for event in events:
            counts[event.partition_key] = counts.get(event.partition_key, 0) + 1
        return counts

    with dg.instance_for_test() as instance:
        days, cursor = tick()
        assert days == set()  # no input day closed yet
        for day in DAYS:  # the supervisor closes the three days in one tick
            instance.report_runless_asset_event(dg.AssetMaterialization(INPUT, partition=day))
        days, cursor = tick(cursor)
        assert days == set(DAYS)
        days, cursor = tick(cursor)  # the requests handled; the runs not started yet
        assert days == set()
        for day in DAYS:
            assert job.execute_in_process(instance=instance, partition_key=day).success
        days, cursor = tick(cursor)
        assert days == set()  # made once, not on every tick
        days, cursor = tick(cursor)
        assert days == set()
        assert ticks_inside_runs == [set()] * len(DAYS)  # the day's own run is running
        assert made() == dict.fromkeys(DAYS, 1)
        for day in DAYS:
            assert_day_equals_recomputation(lake, day)
        checks = instance.event_log_storage.get_latest_asset_check_execution_by_key(
            [dg.AssetCheckKey(DAILY, EXPECTATIONS)]
        )
        assert checks[dg.AssetCheckKey(DAILY, EXPECTATIONS)].status.value == "SUCCEEDED"
        before = day_files(lake)

        # a backfill of the middle day: its rows rebuilt (other calls), its partition materialized
        write_deltalake(
            lake.table_uri(CALL_EVENTS.table),
            pa.Table.from_pylist(varied_rows(DAYS[1], 140, 7777), SCHEMA),
            mode="overwrite",
            predicate=f"date = '{DAYS[1]}'",
        )
        instance.report_runless_asset_event(dg.AssetMaterialization(INPUT, partition=DAYS[1]))
        days, cursor = tick(cursor)
        assert days == {DAYS[1]}
        assert job.execute_in_process(instance=instance, partition_key=DAYS[1]).success
        days, cursor = tick(cursor)
        assert days == set()
        days, cursor = tick(cursor)
        assert days == set()
        assert made() == {DAYS[0]: 1, DAYS[1]: 2, DAYS[2]: 1}
        assert_day_equals_recomputation(lake, DAYS[1])
        assert stored_day(lake, DAYS[1])["calls"].sum() == 140
        after = day_files(lake)
        assert after[DAYS[0]] == before[DAYS[0]] and after[DAYS[2]] == before[DAYS[2]]
        assert after[DAYS[1]].isdisjoint(before[DAYS[1]])

        # made again by hand, the day is the same: replaced whole, idempotent
        made_once = stored_day(lake, DAYS[1])
        assert job.execute_in_process(instance=instance, partition_key=DAYS[1]).success
        pd.testing.assert_frame_equal(stored_day(lake, DAYS[1]), made_once)


def fails_on_the_21st(call_events: DataFrame) -> DataFrame:
    """Raises on one day's data only (it looks at the rows it was given)."""
    if call_events.where(F.col("date") == F.lit(date(2026, 11, 21))).limit(1).count():
        raise ValueError("the 21st is a holiday")
    return call_events.groupBy("region").agg(F.count(F.lit(1)).alias("n"))


def dates_itself(call_events: DataFrame) -> DataFrame:
    return call_events.groupBy("region", "date").count()


def renames(call_events: DataFrame) -> DataFrame:
    return call_events.groupBy("region").agg(F.count(F.lit(1)).cast("string").alias("n"))


def test_a_failing_day_names_the_use_case_and_the_day_and_leaves_the_others(
    lake: EngineSettings,
) -> None:
    def materialize(function: Any, day: str) -> dg.ExecuteInProcessResult:
        use_case = UseCaseSpec(
            name="flaky_daily",
            inputs={"call_events": FlowTable("call_events")},
            function=function,
            output=Daily(),
        )
        asset = build_daily_asset(use_case, FROM_CALLS, lake)
        return dg.materialize(
            [asset],
            partition_key=day,
            resources={"spark": spark_resource(lake)},
            raise_on_error=False,
        )

    def failure(result: dg.ExecuteInProcessResult) -> str:
        (event,) = result.get_step_failure_events()
        return event.step_failure_data.error.message  # type: ignore[union-attr]

    for day in (DAYS[0], DAYS[2], "2026-11-23"):  # the 23rd has no calls: an empty day
        assert materialize(fails_on_the_21st, day).success
    before = day_files(lake, "flaky_daily")
    assert set(before) == {DAYS[0], DAYS[2]}
    cases = {
        fails_on_the_21st: "use case flaky_daily, day 2026-11-21: its function raised "
        "ValueError: the 21st is a holiday",
        dates_itself: "use case flaky_daily, day 2026-11-21: its function's output for "
        "2026-11-21 has a column 'date'",
        renames: "use case flaky_daily, day 2026-11-21: its output does not fit its table",
    }
    for function, line in cases.items():
        result = materialize(function, DAYS[1])
        assert not result.success
        assert line in failure(result), function.__name__
        assert (
            day_files(lake, "flaky_daily") == before
        )  # the other days untouched, the day not written


def with_long_calls(call_events: DataFrame) -> DataFrame:
    """calls_by_region_daily, changed: a column more."""
    long_calls = F.sum((F.col("duration") >= 600).cast("long")).alias("long_calls")
    by_region = calls_by_region_daily(call_events)
    return by_region.join(call_events.groupBy("region").agg(long_calls), "region")


def test_a_full_refresh_after_the_function_changed_equals_a_recomputation(
    lake: EngineSettings,
) -> None:
    """The UI action's job: the table deleted, every day made again with the new function, each
    day a materialization of its partition with its checked expectations."""
    first = build_daily_asset(CALLS_BY_REGION_DAILY, FROM_CALLS, lake)
    resources = {"spark": spark_resource(lake)}
    for day in DAYS:
        assert dg.materialize([first], partition_key=day, resources=resources).success
    changed = dataclasses.replace(CALLS_BY_REGION_DAILY, function=with_long_calls)
    with dg.instance_for_test() as instance:
        job = build_refresh_job(changed, FROM_CALLS, lake)
        assert job.execute_in_process(instance=instance, resources=resources).success
        made = instance.fetch_materializations(DAILY, limit=10).records
        assert sorted(m.partition_key for m in made) == DAYS
        check = dg.AssetCheckKey(DAILY, EXPECTATIONS)
        verdicts = instance.event_log_storage.get_asset_check_execution_history(check, limit=10)
        assert sorted(v.partition for v in verdicts) == DAYS  # type: ignore[attr-defined]
        assert {v.status.value for v in verdicts} == {"SUCCEEDED"}
    calls = read_delta(lake.table_uri(CALL_EVENTS.table)).to_pandas()
    for day in DAYS:
        assert_day_equals_recomputation(lake, day)
        of_day = calls[calls["date"] == date.fromisoformat(day)]
        expected = (of_day["duration"] >= 600).groupby(of_day["region"]).sum().sort_index()
        assert list(stored_day(lake, day)["long_calls"]) == list(expected)


def test_a_daily_use_case_over_an_append_use_case_waits_for_it_to_catch_up(
    spark: Any, lake: EngineSettings
) -> None:
    """failed_by_account reads failed_calls' table by day: its day is requested when the flow's
    day is materialized (failed_calls' asset has no days), and is made only once failed_calls
    has read what call_events had when the day was asked for."""
    settings = lake.model_copy(update={"use_case_modules": ["failed_calls_use_case"]})
    defs = build_definitions({CALL_EVENTS.name: CALL_EVENTS}, settings)
    key = use_case_key(FAILED_BY_ACCOUNT)
    graph = defs.resolve_asset_graph()
    assert graph.get(key).parent_keys == {INPUT, use_case_key(FAILED_CALLS)}
    with dg.instance_for_test() as instance:
        cursor = dg.evaluate_automation_conditions(defs, instance, evaluation_time=NOW).cursor
        instance.report_runless_asset_event(dg.AssetMaterialization(INPUT, partition=DAYS[0]))
        tick = dg.evaluate_automation_conditions(defs, instance, evaluation_time=NOW, cursor=cursor)
        assert requested(tick)[key.path[-1]] == {DAYS[0]}

    stream = UseCaseStream(FAILED_CALLS, CALL_EVENTS, settings)
    query = stream.start(spark)
    try:
        # late calls of the day land just before the day is made: the day waits for them
        write_deltalake(
            settings.table_uri(CALL_EVENTS.table),
            pa.Table.from_pylist(varied_rows(DAYS[0], 40, 9000), SCHEMA),
            mode="append",
        )
        asset = build_daily_asset(FAILED_BY_ACCOUNT, DaySource(CALL_EVENTS, FAILED_CALLS), settings)
        result = dg.materialize(
            [asset], partition_key=DAYS[0], resources={"spark": spark_resource(settings)}
        )
        assert result.success
    finally:
        query.stop()
    calls = read_delta(settings.table_uri(CALL_EVENTS.table)).to_pandas()
    failed = calls[
        (calls["date"] == date.fromisoformat(DAYS[0])) & (calls["call_state"] == "failed")
    ]
    stored = read_delta(settings.table_uri(FAILED_BY_ACCOUNT.table)).to_pandas()
    assert dict(zip(stored["account_sid"], stored["failed"], strict=True)) == dict(
        failed.groupby("account_sid").size()
    )


def test_the_refresh_command_rebuilds_a_daily_table_and_requests_a_streaming_ones(
    lake: EngineSettings,
) -> None:
    """`tidelake use-case refresh` as a user runs it (its own process and Spark): every day of
    calls_by_region_daily made again, equal to a recomputation; account_activity's refresh
    requested for its next start; a Daily use case is no stream."""
    env = {
        **os.environ,
        "TIDELAKE_LAKE": str(lake.lake),
        "TIDELAKE_CHECKPOINTS": str(lake.checkpoints),
    }

    def tidelake(*args: str) -> subprocess.CompletedProcess[str]:
        command = [sys.executable, "-m", "tidelake.platform.cli", *args]
        return subprocess.run(command, env=env, capture_output=True, text=True, timeout=600)

    done = tidelake("use-case", "refresh", CALLS_BY_REGION_DAILY.name)
    assert done.returncode == 0, done.stderr[-2000:]
    assert f"{CALLS_BY_REGION_DAILY.name}: {len(DAYS)} days made again" in done.stdout
    for day in DAYS:
        assert_day_equals_recomputation(lake, day)
    requested = tidelake("use-case", "refresh", ACCOUNT_ACTIVITY.name)
    assert requested.returncode == 0, requested.stderr[-2000:]
    assert refresh_marker(ACCOUNT_ACTIVITY, lake).exists()
    refused = tidelake("stream", CALLS_BY_REGION_DAILY.name)
    assert refused.returncode == 2
    assert "calls_by_region_daily is a Daily use case" in refused.stderr


def test_a_day_whose_input_changes_while_it_is_made_is_made_again(
    spark: Any, lake: EngineSettings
) -> None:
    """A backfill of the input's day lands after the day's input version was read: the day is
    made again from the newer version, so the table holds the day as its input now stands (the
    automation, which saw the input materialized before the day's own materialization, would
    not ask again)."""
    calls = []

    def backfilled_meanwhile(call_events: DataFrame) -> DataFrame:
        calls.append(1)
        if len(calls) == 1:
            write_deltalake(
                lake.table_uri(CALL_EVENTS.table),
                pa.Table.from_pylist(varied_rows(DAYS[0], 70, 4444), SCHEMA),
                mode="overwrite",
                predicate=f"date = '{DAYS[0]}'",
            )
        return calls_by_region_daily(call_events)

    racing = dataclasses.replace(
        CALLS_BY_REGION_DAILY, name="racing_daily", function=backfilled_meanwhile
    )
    built = build_day(spark, racing, FROM_CALLS, lake, date.fromisoformat(DAYS[0]))
    assert len(calls) == 2 and built.rows == 3  # three regions
    assert stored_day(lake, DAYS[0], racing.table)["calls"].sum() == 70
    assert_day_equals_recomputation(lake, DAYS[0], racing.table)
