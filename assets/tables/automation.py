"""When assets of a date partition run by themselves (declarative automation).

Dagster's `eager()` looks only at the newest time partition; the supervisor closes several days
at once after an outage, and backfills touch older ones, so these look back 7 days. Work that
learns from a day (compaction, model training) also waits for the day's blocking quality checks,
and runs again when a failed check later passes (a fixed day, re-checked on demand).
"""

from datetime import timedelta

import dagster as dg

AC = dg.AutomationCondition
LOOKBACK = timedelta(days=7)


def on_new_partitions() -> dg.AutomationCondition:
    """Eager for any date of the last 7 days whose upstream was updated."""
    return AC.eager().replace("in_latest_time_window", AC.in_latest_time_window(LOOKBACK))


def check_on_new_partitions() -> dg.AutomationCondition:
    """on_new_partitions for a partitioned asset check. Dagster 1.13 counts a check as updated
    on every date when any one date is evaluated, which would reset eager's "since last
    handled" for the others: a date whose table was updated while another date's check ran was
    never checked. Here only a request of that date resets it."""
    handled = (AC.newly_requested() | AC.initial_evaluation()).with_label("requested")
    return on_new_partitions().replace("handled", handled)


def after_blocking_checks() -> dg.AutomationCondition:
    """on_new_partitions, but only on dates whose upstream blocking checks passed, each trigger
    with its own reset (issue 76):

    - an input update is news until the date is requested again: an update landing in the tick
      that also sees the date's own make (a backfill racing the close's run) still makes it
      again, where one "since last handled" lets the reset win (Dagster 1.13's boolean
      operators drop the timing that tells which came later);
    - a blocking check newly passing is news only for a date never made or whose last run
      failed (a fix re-checked on demand), and only until the date is handled: the daemon ticks
      inside the run that checks the input and makes the date, and counting that pass made a
      closed day twice;
    - a new date, as eager's.
    """
    requested = (AC.newly_requested() | AC.initial_evaluation()).with_label("requested")
    handled = (AC.newly_requested() | AC.newly_updated() | AC.initial_evaluation()).with_label(
        "handled"
    )
    input_changed = AC.any_deps_updated().since(requested).with_label("input updated")
    checks_passed = (
        (
            AC.any_deps_match(
                AC.all_checks_match(AC.check_passed(), blocking_only=True).newly_true()
            )
            & (AC.missing() | AC.execution_failed())
        )
        .since(handled)
        .with_label("blocking checks of a dependency newly passed, the date not made")
    )
    new_date = AC.newly_missing().since(handled).with_label("new date")
    return (
        AC.in_latest_time_window(LOOKBACK)
        & (new_date | input_changed | checks_passed)
        & ~AC.any_deps_missing()
        & ~AC.any_deps_in_progress()
        & ~AC.in_progress()
        & AC.all_deps_blocking_checks_passed()
    ).with_label("eager after blocking checks")
