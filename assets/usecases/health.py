"""A use case's health, judged the same way by its supervisor each tick and by its checks run
on demand: `use_case_running` (ERROR: a run is up, not crash-looping; the failed run's error
otherwise) and `use_case_fresh` (WARN: the oldest input commit it has not read waits at most
its max_freshness). Both read the supervisor's decision and the lake's files, no Spark."""

from __future__ import annotations

import json
from dataclasses import dataclass
from typing import Any

import dagster as dg

from tidelake.assets.stream.health import HEALTH_HEARTBEAT_S
from tidelake.assets.stream.supervisor_decision import Decision, RunState
from tidelake.assets.tables.keys import use_case_key
from tidelake.assets.usecases.asset_specs import USE_CASE_FRESH, USE_CASE_RUNNING
from tidelake.streaming.usecase.position import UseCaseLag
from tidelake.streaming.usecase.spec import UseCaseSpec

Verdict = tuple[bool, dg.AssetCheckSeverity, str]


@dataclass(frozen=True)
class UseCaseHealth:
    use_case: UseCaseSpec
    decision: Decision
    lag: UseCaseLag

    def running(self) -> Verdict:
        d = self.decision
        error = f"; last error: {d.last_error}" if d.last_error else ""
        if d.crash_loop:
            return (
                False,
                dg.AssetCheckSeverity.ERROR,
                f"crash loop: {d.consecutive_failures} failed runs in a row{error}",
            )
        run = d.active_run
        if run is None:
            severity = (
                dg.AssetCheckSeverity.WARN
                if not d.consecutive_failures
                else (dg.AssetCheckSeverity.ERROR)
            )
            return False, severity, f"no run of the use case: {d.reason}{error}"
        if run.state is not RunState.STARTED:
            return False, dg.AssetCheckSeverity.WARN, f"run {run.run_id} is {run.state.value}"
        return True, dg.AssetCheckSeverity.ERROR, f"run {run.run_id} is streaming"

    def fresh(self) -> Verdict:
        limit = self.use_case.max_freshness.total_seconds()
        waiting = self.lag.waiting_s
        passed = waiting <= limit
        versions = self.lag.versions
        behind = "no input table yet" if versions is None else f"{versions} input versions behind"
        return (
            passed,
            dg.AssetCheckSeverity.WARN,
            f"{behind}, the oldest unread waiting {waiting:.1f} s "
            f"({'within' if passed else 'above'} {limit:.0f} s)",
        )

    def metadata(self) -> dict[str, Any]:
        figures: dict[str, Any] = {
            "waiting_s": dg.MetadataValue.float(round(self.lag.waiting_s, 1))
        }
        if self.lag.versions is not None:
            figures["lag_versions"] = dg.MetadataValue.int(self.lag.versions)
        if self.lag.read_version is not None:
            figures["input_version_read"] = dg.MetadataValue.int(self.lag.read_version)
        return figures

    def verdicts(self) -> dict[str, Verdict]:
        return {USE_CASE_RUNNING: self.running(), USE_CASE_FRESH: self.fresh()}

    def check_results(self) -> list[dg.AssetCheckResult]:
        return [
            dg.AssetCheckResult(
                check_name=name,
                asset_key=use_case_key(self.use_case),
                passed=passed,
                severity=severity,
                description=text,
                metadata=self.metadata(),
            )
            for name, (passed, severity, text) in self.verdicts().items()
        ]

    def events(self, cursor: str | None, now: float) -> tuple[list[Any], str]:
        """The check evaluations and an observation to record on a supervisor tick, when a
        verdict changed or HEALTH_HEARTBEAT_S passed since the last record; the next cursor."""
        states = {name: verdict[0] for name, verdict in self.verdicts().items()}
        last = json.loads(cursor) if cursor else {}
        if last.get("states") == states and now - last.get("at", 0) < HEALTH_HEARTBEAT_S:
            return [], cursor or ""
        key = use_case_key(self.use_case)
        events: list[Any] = [
            dg.AssetCheckEvaluation(
                asset_key=key,
                check_name=name,
                passed=passed,
                severity=severity,
                description=text,
                metadata=self.metadata(),
            )
            for name, (passed, severity, text) in self.verdicts().items()
        ]
        events.append(dg.AssetObservation(asset_key=key, metadata=self.metadata()))
        return events, json.dumps({"states": states, "at": now})
