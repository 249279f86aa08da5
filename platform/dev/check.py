"""`tidelake dev-check`: is the local platform up, as a user would see it in the UI?

Polls the webserver until each flow's assets are listed, its supervisor sensor is RUNNING, a
run of its stream is STARTED and its Delta table (read with delta-rs) has rows.
"""

from __future__ import annotations

from collections.abc import Callable
from functools import partial
from typing import Any

from tidelake.assets.stream.supervisor_sensor import supervisor_sensor_name
from tidelake.assets.tables.keys import quarantine_key, table_key, topic_key
from tidelake.platform.dev.dagster_web import DagsterWeb, wait_for
from tidelake.streaming.delta.progress import table_progress
from tidelake.streaming.flow.spec import FlowSpec
from tidelake.streaming.settings import EngineSettings
from tidelake.streaming.stream.query import stream_name


def check_dev(
    web: DagsterWeb,
    flows: list[FlowSpec],
    settings: EngineSettings,
    timeout_s: float,
    report: Callable[[str], None] = print,
) -> None:
    """Raise TimeoutError naming the first thing that did not come up within timeout_s."""
    info = wait_for(web.server_info, timeout_s, f"the Dagster webserver at {web.url}")
    report(f"webserver up: dagster {info.get('dagster_webserver_version', '?')}")
    for flow in flows:
        keys = (topic_key(flow), table_key(flow), quarantine_key(flow))
        wanted = {"/".join(k.path) for k in keys}
        wait_for(partial(_listed, web, wanted), timeout_s, f"assets {sorted(wanted)}")
        report(f"assets listed: {', '.join(sorted(wanted))}")
        sensor = supervisor_sensor_name(flow)
        wait_for(partial(_running, web, sensor), timeout_s, f"sensor {sensor} RUNNING")
        report(f"sensor {sensor}: RUNNING")
        job = stream_name(flow)
        run = wait_for(partial(_started_run, web, job), timeout_s, f"a STARTED run of {job}")
        report(f"stream run {run['runId']}: STARTED")
        uri = settings.table_uri(flow.table)
        rows = wait_for(partial(_rows, uri, flow), timeout_s, f"rows in {uri}")
        report(f"table {flow.table}: {rows} rows in {uri}")


def _listed(web: DagsterWeb, wanted: set[str]) -> bool | None:
    return True if wanted <= set(web.asset_keys()) else None


def _running(web: DagsterWeb, sensor: str) -> bool | None:
    return True if web.sensor_states().get(sensor) == "RUNNING" else None


def _started_run(web: DagsterWeb, job: str) -> dict[str, Any] | None:
    return next(iter(web.runs(job, ["STARTED"])), None)


def _rows(uri: str, flow: FlowSpec) -> int | None:
    progress = table_progress(uri, flow)
    return progress.rows if progress is not None and progress.rows else None
