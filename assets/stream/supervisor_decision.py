"""The supervisor's decision for one always-on stream, as a pure function of its run history.

Dagster has no always-on run; a sensor makes one: each tick it looks at the stream job's recent
runs and either leaves a live run alone, waits out a back-off, or asks for a new run. Keeping
the decision free of Dagster objects makes every branch testable with plain data.
"""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import dataclass
from enum import StrEnum

from tidelake.streaming.settings import EngineSettings
from tidelake.streaming.stream.backoff import Backoff


class RunState(StrEnum):
    """Dagster run statuses, grouped the way the supervisor cares about them."""

    QUEUED = "QUEUED"
    NOT_STARTED = "NOT_STARTED"
    STARTING = "STARTING"
    STARTED = "STARTED"
    CANCELING = "CANCELING"
    SUCCESS = "SUCCESS"
    FAILURE = "FAILURE"
    CANCELED = "CANCELED"

    @property
    def active(self) -> bool:
        return self in _ACTIVE


_ACTIVE = {
    RunState.QUEUED,
    RunState.NOT_STARTED,
    RunState.STARTING,
    RunState.STARTED,
    RunState.CANCELING,
}


@dataclass(frozen=True)
class RunView:
    """What the supervisor needs to know of one run of a stream job."""

    run_id: str
    state: RunState
    created_at: float
    started_at: float | None = None
    ended_at: float | None = None
    failure: str | None = None
    """A failed run's own one-line error (its step failure), so a restart says why."""

    def lifetime(self) -> float:
        if self.started_at is None or self.ended_at is None:
            return 0.0
        return self.ended_at - self.started_at


@dataclass(frozen=True)
class SupervisorPolicy:
    """How eagerly a crashed stream is restarted.

    The first crash is restarted at once; each further crash in a row waits twice as long as
    the one before (backoff_base_s, 2x, 4x ...), at most backoff_cap_s. A run that stayed up for
    healthy_after_s breaks the chain. crash_loop_after crashes in a row mark the stream unhealthy.
    """

    backoff_base_s: float = 30.0
    backoff_cap_s: float = 600.0
    healthy_after_s: float = 300.0
    crash_loop_after: int = 3
    interval_s: int = EngineSettings.model_fields["supervisor_interval"].default
    """Seconds between the supervisor's ticks (TIDELAKE_SUPERVISOR_INTERVAL, whose default this
    is): the longest a stopped stream waits for its restart beyond any back-off."""

    def delay(self, consecutive_failures: int) -> float:
        if consecutive_failures <= 1:
            return 0.0
        doubling = Backoff(first_s=self.backoff_base_s, max_s=self.backoff_cap_s)
        return doubling.delay(consecutive_failures - 1)


@dataclass(frozen=True)
class Decision:
    launch: bool
    reason: str
    active_run: RunView | None
    consecutive_failures: int
    next_attempt_at: float | None
    """When a new run may be requested, if the supervisor is backing off."""
    crash_loop: bool
    last_error: str | None = None
    """The newest failed run's error while failures count: what to fix, not just that it
    restarts."""


def consecutive_failures(finished: Sequence[RunView], policy: SupervisorPolicy) -> int:
    """Failed runs in a row, newest first, stopping at a success, a cancel or a long-lived run."""
    count = 0
    for run in finished:
        if run.state is not RunState.FAILURE:
            break
        count += 1
        if run.lifetime() >= policy.healthy_after_s:
            break
    return count


def decide(runs: Sequence[RunView], now: float, policy: SupervisorPolicy) -> Decision:
    """Keep the live run, wait out a back-off, or launch a new run. `runs` is newest first."""
    active = next((r for r in runs if r.state.active), None)
    finished = [r for r in runs if not r.state.active]
    failures = consecutive_failures(finished, policy)
    if (
        active is not None
        and active.state is RunState.STARTED
        and now - (active.started_at or now) >= policy.healthy_after_s
    ):
        failures = 0
    crash_loop = failures >= policy.crash_loop_after
    last_error = finished[0].failure if failures else None
    error = f"; last error: {last_error}" if last_error else ""
    if active is not None:
        reason = f"run {active.run_id} is {active.state.value}"
        return Decision(False, reason, active, failures, None, crash_loop, last_error)
    if finished and failures:
        newest = finished[0]
        retry_at = (newest.ended_at or newest.created_at) + policy.delay(failures)
        if now < retry_at:
            reason = (
                f"backing off after {failures} failed runs in a row (newest {newest.run_id}); "
                f"next attempt in {retry_at - now:.0f}s{error}"
            )
            return Decision(False, reason, None, failures, retry_at, crash_loop, last_error)
    if not finished:
        reason = "no run yet: starting the stream"
    else:
        newest = finished[0]
        why = f": {newest.failure}" if newest.failure else ""
        reason = f"run {newest.run_id} ended {newest.state.value}{why}; restarting"
    return Decision(True, reason, None, failures, None, crash_loop, last_error)
