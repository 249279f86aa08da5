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
    """on_new_partitions, but only on dates whose upstream blocking checks passed; a date whose
    checks pass later (after a fix) is requested then."""
    checks_newly_passed = AC.any_deps_match(
        AC.all_checks_match(AC.check_passed(), blocking_only=True).newly_true()
    ).with_label("blocking checks of a dependency newly passed")
    trigger = AC.any_deps_updated() | checks_newly_passed
    return (
        on_new_partitions().replace("any_deps_updated", trigger)
        & AC.all_deps_blocking_checks_passed()
    ).with_label("eager after blocking checks")
