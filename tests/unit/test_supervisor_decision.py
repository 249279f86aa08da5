"""The supervisor's decision, a pure function of a stream job's run history."""

from __future__ import annotations

import dataclasses

import pytest

from tidelake.assets.stream.supervisor_decision import RunState, RunView, SupervisorPolicy, decide

POLICY = SupervisorPolicy(backoff_base_s=30, backoff_cap_s=600, healthy_after_s=300)
NOW = 1_800_000_000.0


def run(state: RunState, ended_ago: float | None = None, lived: float = 5.0, n: int = 0) -> RunView:
    ended = NOW - ended_ago if ended_ago is not None else None
    started = (ended - lived) if ended is not None else NOW - lived
    return RunView(f"run{n}", state, created_at=started - 1, started_at=started, ended_at=ended)


def test_no_run_yet_launches() -> None:
    decision = decide([], NOW, POLICY)
    assert decision.launch and not decision.crash_loop
    assert "no run yet" in decision.reason


@pytest.mark.parametrize(
    "state", [RunState.QUEUED, RunState.STARTING, RunState.STARTED, RunState.CANCELING]
)
def test_live_run_is_left_alone(state: RunState) -> None:
    decision = decide([run(state)], NOW, POLICY)
    assert not decision.launch
    assert decision.active_run is not None and decision.active_run.state is state


def test_first_crash_restarts_at_once_and_later_crashes_back_off() -> None:
    one = [run(RunState.FAILURE, ended_ago=1)]
    assert decide(one, NOW, POLICY).launch
    two = [run(RunState.FAILURE, ended_ago=1, n=i) for i in range(2)]
    decision = decide(two, NOW, POLICY)
    assert not decision.launch and decision.next_attempt_at == pytest.approx(NOW - 1 + 30)
    assert "backing off after 2 failed runs" in decision.reason
    assert decide(two, NOW + 30, POLICY).launch


def test_backoff_doubles_up_to_the_cap() -> None:
    delays = [POLICY.delay(n) for n in range(1, 9)]
    assert delays == [0, 30, 60, 120, 240, 480, 600, 600]


def test_crash_loop_is_flagged_after_three_quick_failures() -> None:
    runs = [run(RunState.FAILURE, ended_ago=1, n=i) for i in range(3)]
    decision = decide(runs, NOW, POLICY)
    assert decision.crash_loop and decision.consecutive_failures == 3 and not decision.launch


def test_a_long_lived_run_breaks_the_failure_chain() -> None:
    runs = [
        run(RunState.FAILURE, ended_ago=1, n=0),
        run(RunState.FAILURE, ended_ago=400, lived=3600, n=1),
        run(RunState.FAILURE, ended_ago=4000, n=2),
    ]
    decision = decide(runs, NOW, POLICY)
    assert decision.consecutive_failures == 2 and not decision.crash_loop


def test_a_healthy_running_stream_clears_the_crash_loop() -> None:
    failures = [run(RunState.FAILURE, ended_ago=900, n=i) for i in range(1, 5)]
    decision = decide([run(RunState.STARTED, lived=600), *failures], NOW, POLICY)
    assert decision.consecutive_failures == 0 and not decision.crash_loop


def test_canceled_run_is_restarted_without_backoff() -> None:
    runs = [run(RunState.CANCELED, ended_ago=1), run(RunState.FAILURE, ended_ago=50, n=1)]
    decision = decide(runs, NOW, POLICY)
    assert decision.launch and decision.consecutive_failures == 0


REFUSED = "Kafka at bootstrap.servers=b:9093 refused user 'stream' (SCRAM-SHA-512): bad password"


def failed(ended_ago: float, n: int = 0, failure: str | None = REFUSED) -> RunView:
    return dataclasses.replace(run(RunState.FAILURE, ended_ago=ended_ago, n=n), failure=failure)


def test_a_restart_names_the_failed_runs_error() -> None:
    decision = decide([failed(ended_ago=1)], NOW, POLICY)
    assert decision.launch and decision.last_error == REFUSED
    assert decision.reason == f"run run0 ended FAILURE: {REFUSED}; restarting"


def test_a_back_off_names_the_newest_failed_runs_error() -> None:
    runs = [failed(1, n=0), failed(2, n=1, failure="an older error"), failed(3, n=2)]
    decision = decide(runs, NOW, POLICY)
    assert decision.crash_loop and not decision.launch
    assert decision.last_error == REFUSED
    assert decision.reason.endswith(f"next attempt in 59s; last error: {REFUSED}")


def test_a_failure_without_a_recorded_error_reads_as_before() -> None:
    decision = decide([failed(ended_ago=1, failure=None)], NOW, POLICY)
    assert decision.last_error is None
    assert decision.reason == "run run0 ended FAILURE; restarting"


def test_a_live_run_after_failures_keeps_the_error_until_it_is_healthy() -> None:
    failures = [failed(10, n=i) for i in range(1, 4)]
    starting = decide([run(RunState.STARTING, lived=0), *failures], NOW, POLICY)
    assert starting.crash_loop and starting.last_error == REFUSED
    healthy = decide([run(RunState.STARTED, lived=600), *failures], NOW, POLICY)
    assert healthy.last_error is None and not healthy.crash_loop


def test_a_cancel_after_a_failure_carries_no_error() -> None:
    runs = [run(RunState.CANCELED, ended_ago=1), failed(50, n=1)]
    decision = decide(runs, NOW, POLICY)
    assert decision.last_error is None
    assert decision.reason == "run run0 ended CANCELED; restarting"
