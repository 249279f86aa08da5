"""A small client of the Dagster webserver's GraphQL API, as an external tool would use it.

`tidelake dev-check` and the end-to-end tests drive Dagster only through this: server info,
sensors, runs, asset nodes, asset check results, run termination, code location reloads. The
calls dagster-graphql's `DagsterGraphQLClient` covers (launch, terminate, reload) go through it;
the queries it lacks are written here.
"""

from __future__ import annotations

from collections.abc import Callable
from dataclasses import dataclass
from typing import Any, TypeVar
from urllib.parse import urlsplit

import requests
from dagster_graphql import (
    DagsterGraphQLClient,
    DagsterGraphQLClientError,
    ReloadRepositoryLocationStatus,
)

from tidelake.streaming.errors import TidelakeError
from tidelake.streaming.polling import poll_until

T = TypeVar("T")


class DagsterWebError(TidelakeError, RuntimeError):
    """The webserver did not answer, or answered with errors."""


@dataclass(frozen=True)
class DagsterWeb:
    url: str = "http://127.0.0.1:3000"
    location: str = "tidelake"
    timeout_s: float = 10.0
    work_timeout_s: float = 300.0
    """For calls the server works on before it answers: a reload starts a code server, which on
    a loaded machine took more than 10 s."""

    def _library_client(self, timeout_s: float) -> DagsterGraphQLClient:
        parts = urlsplit(self.url)
        return DagsterGraphQLClient(
            parts.hostname or "127.0.0.1",
            port_number=parts.port,
            use_https=parts.scheme == "https",
            timeout=int(timeout_s),
        )

    def server_info(self) -> dict[str, Any]:
        try:
            response = requests.get(f"{self.url}/server_info", timeout=self.timeout_s)
            response.raise_for_status()
        except requests.RequestException as exc:
            raise DagsterWebError(f"no Dagster webserver at {self.url}: {exc}") from None
        return response.json()

    def query(self, text: str, variables: dict[str, Any] | None = None) -> dict[str, Any]:
        try:
            response = requests.post(
                f"{self.url}/graphql",
                json={"query": text, "variables": variables or {}},
                timeout=self.timeout_s,
            )
        except requests.RequestException as exc:
            raise DagsterWebError(f"GraphQL request to {self.url} failed: {exc}") from None
        if not response.ok:
            raise DagsterWebError(
                f"GraphQL request to {self.url} failed: {response.status_code} {response.reason}: "
                f"{response.text[:2000]}"
            )
        body = response.json()
        if body.get("errors"):
            raise DagsterWebError(f"GraphQL errors: {body['errors']}")
        return body["data"]

    def sensor_states(self) -> dict[str, str]:
        data = self.query(
            """query($sel: RepositorySelector!) {
              sensorsOrError(repositorySelector: $sel) {
                __typename
                ... on Sensors { results { name sensorState { status } } }
                ... on PythonError { message }
              }
            }""",
            {"sel": {"repositoryName": "__repository__", "repositoryLocationName": self.location}},
        )["sensorsOrError"]
        if data["__typename"] != "Sensors":
            raise DagsterWebError(f"cannot list sensors: {data}")
        return {s["name"]: s["sensorState"]["status"] for s in data["results"]}

    def sensor_ticks(self, sensor: str, limit: int = 50) -> list[dict[str, Any]]:
        """A sensor's newest ticks first: status (SUCCESS, SKIPPED, FAILURE, STARTED),
        timestamp (epoch seconds) and error (its message, or None)."""
        data = self.query(
            """query($sel: SensorSelector!, $limit: Int) {
              sensorOrError(sensorSelector: $sel) {
                __typename
                ... on Sensor { sensorState { ticks(limit: $limit) {
                  status timestamp error { message } } } }
                ... on PythonError { message }
              }
            }""",
            {
                "sel": {
                    "repositoryName": "__repository__",
                    "repositoryLocationName": self.location,
                    "sensorName": sensor,
                },
                "limit": limit,
            },
        )["sensorOrError"]
        if data["__typename"] != "Sensor":
            raise DagsterWebError(f"cannot read the ticks of {sensor}: {data}")
        return [
            {**tick, "error": (tick["error"] or {}).get("message")}
            for tick in data["sensorState"]["ticks"]
        ]

    def run_messages(self, run_id: str) -> list[str]:
        """The messages of a run's log, oldest first."""
        data = self.query(
            """query($runId: ID!) { logsForRun(runId: $runId) {
                ... on EventConnection { events { ... on MessageEvent { message } } } } }""",
            {"runId": run_id},
        )
        return [event.get("message") or "" for event in data["logsForRun"]["events"]]

    def runs(
        self,
        job_name: str | None,
        statuses: list[str] | None = None,
        tags: dict[str, str] | None = None,
    ) -> list[dict[str, Any]]:
        """Runs of a job (None: of every job), newest first: runId, jobName, status, startTime,
        endTime; only those with `statuses` and `tags` when given (a backfill's runs carry
        dagster/backfill=<its id>)."""
        run_filter: dict[str, Any] = {"pipelineName": job_name} if job_name else {}
        if statuses:
            run_filter["statuses"] = statuses
        if tags:
            run_filter["tags"] = [{"key": k, "value": v} for k, v in tags.items()]
        data = self.query(
            """query($filter: RunsFilter) {
              runsOrError(filter: $filter) {
                __typename
                ... on Runs { results { runId jobName status startTime endTime } }
                ... on PythonError { message }
              }
            }""",
            {"filter": run_filter},
        )["runsOrError"]
        if data["__typename"] != "Runs":
            raise DagsterWebError(f"cannot list runs: {data}")
        return data["results"]

    def asset_keys(self) -> list[str]:
        data = self.query("query { assetNodes { assetKey { path } } }")
        return ["/".join(node["assetKey"]["path"]) for node in data["assetNodes"]]

    def check_statuses(self, asset_path: list[str], check_name: str) -> dict[str, str]:
        """Partition -> status (SUCCEEDED, FAILED, ...) of the newest execution of an asset
        check on it, over its last 100 executions."""
        data = self.query(
            """query($key: AssetKeyInput!, $check: String!) {
              assetCheckExecutions(assetKey: $key, checkName: $check, limit: 100) {
                partition status
              }
            }""",
            {"key": {"path": asset_path}, "check": check_name},
        )
        statuses: dict[str, str] = {}
        for execution in data["assetCheckExecutions"]:  # newest first
            statuses.setdefault(execution["partition"], execution["status"])
        return statuses

    def launch_run(self, job_name: str, run_config: dict[str, Any] | None = None) -> str:
        """Launch a run of a job as the Launchpad would; its run id."""
        try:
            return self._library_client(self.work_timeout_s).submit_job_execution(
                job_name,
                repository_location_name=self.location,
                repository_name="__repository__",
                run_config=run_config or {},
            )
        except DagsterGraphQLClientError as exc:
            raise DagsterWebError(f"cannot launch {job_name}: {exc}") from None

    def reload_location(self) -> None:
        """Reload the code location, as Deployment → Reload in the UI does: its code server is
        started afresh and imports the definitions (and the flows) again."""
        try:
            info = self._library_client(self.work_timeout_s).reload_repository_location(
                self.location
            )
        except DagsterGraphQLClientError as exc:
            raise DagsterWebError(f"cannot reload {self.location}: {exc}") from None
        if info.status != ReloadRepositoryLocationStatus.SUCCESS:
            raise DagsterWebError(
                f"cannot reload {self.location}: {info.failure_type}: {info.message}"
            )

    def terminate_run(self, run_id: str) -> None:
        """Terminate a run as its page's Terminate button does."""
        try:
            self._library_client(self.timeout_s).terminate_run(run_id)
        except DagsterGraphQLClientError as exc:
            raise DagsterWebError(f"cannot terminate run {run_id}: {exc}") from None


def wait_for(
    probe: Callable[[], T | None], timeout_s: float, what: str, interval_s: float = 2.0
) -> T:
    """Poll probe until it returns something other than None; errors count as not yet."""

    def timed_out(last_error: str) -> TimeoutError:
        detail = f" (last error: {last_error})" if last_error else ""
        return TimeoutError(f"timed out after {timeout_s:.0f}s waiting for {what}{detail}")

    return poll_until(
        probe,
        timeout_s=timeout_s,
        interval_s=interval_s,
        timeout_error=timed_out,
        not_yet=(DagsterWebError,),
    )
