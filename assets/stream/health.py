"""Health of one always-on stream: lag, last batch, restarts, and the two checks built on them.

Measured from outside the stream (checkpoint files, one bounded Kafka probe, run history), so
the supervisor sensor and an on-demand check execution agree, and neither needs Spark.

What is recorded, and how often, is decided here too (HEALTH_HEARTBEAT_S, StreamHealth.state):
Dagster keeps every observation and check evaluation for good (it has no event-log retention),
so the supervisor records them when the state changes and at a heartbeat, not on every tick.
"""

from __future__ import annotations

import hashlib
import json
from collections.abc import Sequence
from dataclasses import dataclass
from datetime import UTC, datetime
from typing import Any, TypeVar

import dagster as dg
from confluent_kafka import KafkaException

from tidelake.assets.stream.supervisor_decision import (
    Decision,
    RunState,
    RunView,
)
from tidelake.assets.tables.asset_specs import LAG_BELOW_THRESHOLD, STREAM_ALIVE
from tidelake.assets.tables.keys import table_key
from tidelake.streaming.flow.spec import FlowSpec
from tidelake.streaming.kafka.offsets import KafkaSourceError
from tidelake.streaming.stream.status import (
    CommittedBatch,
    StreamLag,
    committed_batch,
    kafka_ends,
    stream_lag,
)

CheckEvent = TypeVar("CheckEvent", dg.AssetCheckEvaluation, dg.AssetCheckResult)
STALL_AFTER_S = 300.0
"""A started stream with records waiting and no commit for this long counts as stalled."""
KAFKA_PROBE_TIMEOUT_S = 5.0
RECENT_RUNS = 20
FAILURES_READ = 3
"""Failed runs, newest first, whose error line is read each tick: the cost per tick stays bounded
however long the crash loop."""
ERROR_LINE_CHARS = 400
FAILURE_TAIL_EVENTS = 25
"""Newest events of a failed run read for its error line: its step failure and run failure are
among the last few."""
HEALTH_HEARTBEAT_S = 300.0
"""Longest gap between two health records (the supervisor's observation and check evaluations,
the stream run's progress observation) while nothing changes. A change of state is recorded on
the tick it is seen. 300 s is the horizon of the supervisor's own verdicts (STALL_AFTER_S, a lost
worker after 300 s of silence): the UI never shows a state older than the supervisor acts on,
and Dagster stores 288 records a day instead of 4,320 (measured in docs/benchmarks.md)."""
LAG_BANDS = (0.1, 0.5, 1.0, 10.0)
"""Lag as a share of the flow's max_lag: crossing one of these is a change worth recording (the
lag itself moves on every tick under load); 1.0 is where lag_below_threshold fails."""
RESTARTS_WINDOW_S = 86_400.0
_ALIVE_METADATA = {
    "supervisor",
    "consecutive_failures",
    "restarts_24h",
    "last_error",
    "last_batch_time",
    "seconds_since_last_batch",
    "lag_total",
}
_LAG_METADATA = {"lag_total", "kafka_error"}


@dataclass(frozen=True)
class StreamHealth:
    flow: FlowSpec
    decision: Decision
    committed: CommittedBatch | None
    lag: StreamLag | None
    kafka_error: str | None
    restarts: int
    now: float

    def seconds_since_commit(self) -> float | None:
        if self.committed is None:
            return None
        return max(0.0, self.now - self.committed.committed_at.timestamp())

    def alive(self) -> tuple[bool, dg.AssetCheckSeverity, str]:
        d = self.decision
        if d.crash_loop:
            when = (
                f"; next attempt at {datetime.fromtimestamp(d.next_attempt_at, UTC):%H:%M:%S} UTC"
                if d.next_attempt_at
                else ""
            )
            return (
                False,
                dg.AssetCheckSeverity.ERROR,
                f"crash loop: {d.consecutive_failures} failed runs in a row{when}"
                + (f"; last error: {d.last_error}" if d.last_error else ""),
            )
        run = d.active_run
        if run is None and d.launch and d.consecutive_failures == 0:
            # a first start (or one after a clean stop) is not an outage: a warning, not red
            return False, dg.AssetCheckSeverity.WARN, f"starting the stream: {d.reason}"
        if run is None:
            return False, dg.AssetCheckSeverity.ERROR, f"no stream run: {d.reason}"
        if run.state is not RunState.STARTED:
            return False, dg.AssetCheckSeverity.WARN, f"run {run.run_id} is {run.state.value}"
        idle = self.seconds_since_commit()
        waiting = self.lag.total if self.lag is not None else 0
        up_for = self.now - (run.started_at or self.now)
        if waiting and up_for > STALL_AFTER_S and (idle is None or idle > STALL_AFTER_S):
            return (
                False,
                dg.AssetCheckSeverity.ERROR,
                f"run {run.run_id} is up but committed nothing for "
                f"{'ever' if idle is None else f'{idle:.0f}s'} while {waiting} records wait",
            )
        return True, dg.AssetCheckSeverity.ERROR, f"run {run.run_id} is streaming"

    def lag_ok(self) -> tuple[bool, dg.AssetCheckSeverity, str]:
        if self.lag is None:
            return False, dg.AssetCheckSeverity.ERROR, f"lag unknown: {self.kafka_error}"
        passed = self.lag.total <= self.flow.max_lag
        relation = "within" if passed else "above"
        return (
            passed,
            dg.AssetCheckSeverity.WARN,
            f"{self.lag.total} records behind, {relation} the threshold of {self.flow.max_lag}",
        )

    def metadata(self) -> dict[str, Any]:
        """Numeric values Dagster plots over time, plus the state in words."""
        out: dict[str, Any] = {
            "restarts_24h": dg.MetadataValue.int(self.restarts),
            "consecutive_failures": dg.MetadataValue.int(self.decision.consecutive_failures),
            "supervisor": dg.MetadataValue.text(self.decision.reason),
        }
        if self.decision.last_error:
            out["last_error"] = dg.MetadataValue.text(self.decision.last_error)
        if self.lag is not None:
            out["lag_total"] = dg.MetadataValue.int(self.lag.total)
            for partition, lag in self.lag.by_partition.items():
                out[f"lag_partition_{partition}"] = dg.MetadataValue.int(lag)
        else:
            out["kafka_error"] = dg.MetadataValue.text(self.kafka_error or "")
        if self.committed is not None:
            out["last_batch_id"] = dg.MetadataValue.int(self.committed.batch_id)
            out["last_batch_time"] = dg.MetadataValue.timestamp(self.committed.committed_at)
            out["seconds_since_last_batch"] = dg.MetadataValue.float(
                round(self.seconds_since_commit() or 0.0, 1)
            )
        return out

    def lag_band(self) -> int | None:
        """Which LAG_BANDS the lag is in (0: below a tenth of max_lag), None if unknown."""
        if self.lag is None:
            return None
        return sum(self.lag.total > share * self.flow.max_lag for share in LAG_BANDS)

    def state(self) -> str:
        """A digest of what a change of is worth recording at once: both checks' verdicts and
        severities, the lag's band, Kafka's error, the live run and its state, the failures in a
        row, the newest error and the restarts. Lag within a band, seconds since the last batch
        and batch ids are left to the heartbeat."""
        d = self.decision
        run = d.active_run
        alive, alive_severity, _ = self.alive()
        lag_ok, lag_severity, _ = self.lag_ok()
        facts = [
            alive,
            alive_severity.value,
            lag_ok,
            lag_severity.value,
            self.lag_band(),
            self.kafka_error,
            run.run_id if run else None,
            run.state.value if run else None,
            d.launch,
            d.consecutive_failures,
            d.crash_loop,
            d.last_error,
            self.restarts,
        ]
        return hashlib.sha256(json.dumps(facts).encode()).hexdigest()[:16]

    def observation(self) -> dg.AssetObservation:
        return dg.AssetObservation(asset_key=table_key(self.flow), metadata=self.metadata())

    def check_evaluations(self) -> list[dg.AssetCheckEvaluation]:
        """The checks as a sensor records them."""
        return self._check_events(dg.AssetCheckEvaluation)

    def check_results(self) -> list[dg.AssetCheckResult]:
        """The checks as a check execution yields them."""
        return self._check_events(dg.AssetCheckResult)

    def _check_events(self, kind: type[CheckEvent]) -> list[CheckEvent]:
        return [
            kind(
                asset_key=table_key(self.flow),
                check_name=name,
                passed=passed,
                severity=severity,
                description=text,
                metadata=self.check_metadata(name),
            )
            for name, (passed, severity, text) in self._checks().items()
        ]

    def check_metadata(self, check_name: str) -> dict[str, Any]:
        """What explains a check's verdict, from metadata(): the observation holds it all, and
        each record of a check is stored twice more (the event log and the check's history)."""
        wanted = _LAG_METADATA if check_name == LAG_BELOW_THRESHOLD else _ALIVE_METADATA
        return {
            key: value
            for key, value in self.metadata().items()
            if key in wanted or (check_name == LAG_BELOW_THRESHOLD and key.startswith("lag_"))
        }

    def _checks(self) -> dict[str, tuple[bool, dg.AssetCheckSeverity, str]]:
        return {STREAM_ALIVE: self.alive(), LAG_BELOW_THRESHOLD: self.lag_ok()}


def recent_runs(instance: dg.DagsterInstance, job_name: str) -> list[RunView]:
    """The stream job's newest runs, newest first, as the supervisor sees them; the newest
    FAILURES_READ failed ones with their error line."""
    records = instance.get_run_records(dg.RunsFilter(job_name=job_name), limit=RECENT_RUNS)
    runs = []
    failures_read = 0
    for r in records:
        state = RunState(r.dagster_run.status.value)
        failure = None
        if state is RunState.FAILURE and failures_read < FAILURES_READ:
            failure = run_failure(instance, r.dagster_run.run_id)
            failures_read += 1
        runs.append(
            RunView(
                run_id=r.dagster_run.run_id,
                state=state,
                created_at=r.create_timestamp.timestamp(),
                started_at=r.start_time,
                ended_at=r.end_time,
                failure=failure,
            )
        )
    return runs


def run_failure(instance: dg.DagsterInstance, run_id: str) -> str | None:
    """The one line a failed run ended with: its step's dg.Failure description (step_failure()
    puts tidelake's own message there), else the step's error, else the run failure's message
    (a run failed from outside, e.g. a lost worker)."""
    # the run's newest events, not a filter by type: a run has one or two failure events, so a
    # `limit` on the filtered query is never met and the database reads the run's whole log
    # (thousands of progress lines a day for a stream); the failure events end a run
    tail = instance.get_records_for_run(run_id, limit=FAILURE_TAIL_EVENTS, ascending=False)
    failure_types = {dg.DagsterEventType.STEP_FAILURE, dg.DagsterEventType.RUN_FAILURE}
    entries = [
        r.event_log_entry
        for r in reversed(tail.records)  # oldest first, as the run logged them
        if r.event_log_entry.dagster_event_type in failure_types
    ]
    for entry in entries:
        event = entry.dagster_event
        if event is None or event.event_type is not dg.DagsterEventType.STEP_FAILURE:
            continue
        data = event.step_failure_data
        if data.user_failure_data is not None and data.user_failure_data.description:
            return one_line(data.user_failure_data.description)
        if data.error is not None:
            return one_line((data.error.cause or data.error).message)
    for entry in entries:
        if entry.dagster_event is not None and entry.dagster_event.message:
            return one_line(entry.dagster_event.message)
    return None


def one_line(text: str, limit: int = ERROR_LINE_CHARS) -> str | None:
    """The first non-blank line of an error, at most `limit` characters: a check's text, a
    sensor's skip reason and a run tag stay one readable line."""
    line = next((ln.strip() for ln in text.splitlines() if ln.strip()), "")
    if not line:
        return None
    return line if len(line) <= limit else line[: limit - 1] + "…"


def recent_restarts(runs: Sequence[RunView], now: float) -> int:
    """Runs of the stream job created in the last RESTARTS_WINDOW_S, except the job's first
    run, among the RECENT_RUNS newest ones the supervisor reads anyway (recent_runs): the cost
    of a tick stays the same however many runs the job has had. At most RECENT_RUNS; the
    back-off (at most one run per backoff_cap_s while crash-looping) keeps a day's restarts
    near that only in a crash loop, which stream_alive reports."""
    since = now - RESTARTS_WINDOW_S
    recent = [r for r in runs if r.created_at >= since]
    first_run_included = len(runs) < RECENT_RUNS and bool(recent) and runs[-1] is recent[-1]
    return len(recent) - first_run_included


def measure_health(
    flow: FlowSpec,
    checkpoint: str,
    kafka_conf: dict[str, str],
    decision: Decision,
    restarts: int,
    now: float,
) -> StreamHealth:
    """How healthy the stream is, given the supervisor's decision, without blocking long."""
    committed = committed_batch(checkpoint, flow.topic)
    lag: StreamLag | None = None
    error: str | None = None
    try:
        ends = kafka_ends(kafka_conf, flow.topic, KAFKA_PROBE_TIMEOUT_S)
        lag = stream_lag(ends, committed.offsets if committed is not None else {})
    except (KafkaSourceError, KafkaException) as exc:
        error = str(exc)
    return StreamHealth(flow, decision, committed, lag, error, restarts, now)
