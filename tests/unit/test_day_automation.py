"""A day gated by its input day's blocking checks is made by the automation once when it closes,
with ticks inside its run, and after a failed check passes on a recheck (issue 76 item 6).

A backfill of the input day that lands while the day is being made is news for the day: the
tick after the run sees both the day's make and the input's update, and the day is made again
from the backfilled input.

The run the automation launches for a day holds the input day's checks and the day itself; the
daemon ticks every 30 s whatever runs are in flight, so ticks land inside that run. The check
passing there is not news for the day (the same run made the day); the check passing later in a
run of its own (a fix, re-checked on demand) is. Real in-process runs on an instance, a tick after
every step, on a graph of two daily assets shaped as a flow's table and a Daily use case are.
"""

from collections.abc import Callable, Iterator
from datetime import UTC, datetime
from typing import Any

import dagster as dg
import pytest

from tidelake.assets.tables.automation import after_blocking_checks, check_on_new_partitions

DAYS = dg.DailyPartitionsDefinition(start_date="2026-11-01")
INPUT = dg.AssetKey(["lake", "events"])
DAY = dg.AssetKey(["lake", "events_by_region_daily"])
CHECK = dg.AssetCheckKey(INPUT, "expectations")
NOW = datetime(2026, 11, 23, 12, tzinfo=UTC)
CLOSED = "2026-11-22"
FAILING: set[str] = set()  # days whose input fails its check
DAEMONS: list["Daemon"] = []  # the test's daemon, ticking inside the check's step too
WHILE_MADE: list[Callable[[], None]] = []  # what happens while the day's step runs


@dg.asset(key=INPUT, partitions_def=DAYS)
def events() -> None: ...


@dg.asset_check(
    asset=INPUT,
    name=CHECK.name,
    blocking=True,
    partitions_def=DAYS,
    automation_condition=check_on_new_partitions(),
)
def expectations(context: dg.AssetCheckExecutionContext) -> dg.AssetCheckResult:
    for daemon in DAEMONS:  # the check planned in the run, not evaluated yet
        daemon.inside_runs.append(daemon.tick())
    return dg.AssetCheckResult(passed=context.partition_key not in FAILING)


@dg.asset(key=DAY, deps=[INPUT], partitions_def=DAYS, automation_condition=after_blocking_checks())
def events_by_region_daily() -> None:
    for happen in WHILE_MADE:
        happen()


class Daemon:
    """The automation's ticks over one instance, and the runs it launches, ticking after each
    of their steps."""

    def __init__(self, instance: dg.DagsterInstance) -> None:
        self.instance = instance
        self.cursor: Any = None
        self.inside_runs: list[set[str]] = []

        @dg.success_hook
        def tick_after_step(_: dg.HookContext) -> None:
            self.inside_runs.append(self.tick())

        self.job = dg.define_asset_job(
            "runs", dg.AssetSelection.all(include_sources=True), hooks={tick_after_step}
        )
        self.defs = dg.Definitions(
            assets=[events, events_by_region_daily], asset_checks=[expectations], jobs=[self.job]
        )

    def tick(self) -> set[str]:
        """The days of DAY this tick requests."""
        result = dg.evaluate_automation_conditions(
            self.defs, self.instance, evaluation_time=NOW, cursor=self.cursor
        )
        self.cursor = result.cursor
        return {
            day
            for r in result.results
            if r.key == DAY
            for day in r.true_subset.expensively_compute_partition_keys()
        }

    def run(self, day: str, assets: set[dg.AssetKey]) -> dg.ExecuteInProcessResult:
        """A run naming what it targets, as the automation's runs do."""
        job = self.defs.resolve_job_def(self.job.name).get_subset(
            asset_selection=assets,
            asset_check_selection={CHECK},
        )
        return job.execute_in_process(
            instance=self.instance, partition_key=day, raise_on_error=False
        )

    def made(self) -> int:
        return len(self.instance.fetch_materializations(DAY, limit=100).records)


@pytest.fixture
def daemon() -> Iterator[Daemon]:
    FAILING.clear()
    WHILE_MADE.clear()
    with dg.instance_for_test() as instance:
        DAEMONS[:] = [Daemon(instance)]
        yield DAEMONS[0]
    DAEMONS.clear()


def close_day(daemon: Daemon) -> None:
    assert daemon.tick() == set()
    daemon.instance.report_runless_asset_event(dg.AssetMaterialization(INPUT, partition=CLOSED))
    assert daemon.tick() == {CLOSED}  # the day and its input day's check, in one run
    assert daemon.tick() == set()


def test_a_closed_day_is_made_once_with_ticks_inside_its_run(daemon: Daemon) -> None:
    close_day(daemon)
    assert daemon.run(CLOSED, {DAY}).success
    assert daemon.inside_runs == [set()] * 3  # in the check's step, after it, after the day's
    assert [daemon.tick() for _ in range(3)] == [set()] * 3
    assert daemon.made() == 1


def test_a_day_whose_check_passes_on_a_recheck_is_made_then_and_once(daemon: Daemon) -> None:
    FAILING.add(CLOSED)
    close_day(daemon)
    assert not daemon.run(CLOSED, {DAY}).success  # the check failed: the day is not made
    assert daemon.made() == 0
    assert daemon.tick() == set()
    FAILING.clear()  # the input day fixed, its check run again by itself
    assert daemon.run(CLOSED, set()).success
    assert daemon.inside_runs[-1] | daemon.tick() == {CLOSED}
    assert daemon.run(CLOSED, {DAY}).success
    assert [daemon.tick() for _ in range(3)] == [set()] * 3
    assert daemon.made() == 1


def test_a_backfill_landing_while_the_day_is_made_makes_it_again(daemon: Daemon) -> None:
    close_day(daemon)
    backfill = dg.AssetMaterialization(INPUT, partition=CLOSED)
    WHILE_MADE.append(lambda: daemon.instance.report_runless_asset_event(backfill))
    assert daemon.run(CLOSED, {DAY}).success
    WHILE_MADE.clear()
    assert daemon.inside_runs[-1] | daemon.tick() == {CLOSED}  # a day made ends its in-progress
    assert daemon.run(CLOSED, {DAY}).success
    assert [daemon.tick() for _ in range(3)] == [set()] * 3
    assert daemon.made() == 2
