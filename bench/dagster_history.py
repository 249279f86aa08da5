"""Dagster's storage after 30 days of one always-on stream, and what it costs (issue 38).

Seeds Dagster instances (SQLite, and PostgreSQL from Debian's package as the tests start it) with
the history one stream leaves: its supervisor's ticks (every 20 s), the health the supervisor
records (an observation of the table and two check evaluations), the stream's runs (a few
restarts a day) with their progress reports (a log line and an observation every 30 s), and the
daily partitions the supervisor closes. Two profiles:

- `before`: what the code of main f7e4780 leaves: health recorded on every tick, an observation
  from the run every 30 s, Dagster's default tick retention (SKIPPED ticks purged after 7 days,
  SUCCESS and FAILURE kept forever);
- `after`: what the code of issue 38 leaves: health recorded when it changes and at least every
  HEALTH_HEARTBEAT_S, the run's observation at that heartbeat too, the tick retention of
  platform/dev/dagster.yaml.

How it seeds, and why that is faithful: one real tick (the real sensor, evaluated with
build_sensor_context against a real broker, its events stored with report_runless_asset_event as
the sensor daemon does) and one real progress report (the stream job's ProgressReporter, called
from an op run with a Spark-shaped progress) are stored in a scratch instance; the entries they
wrote are the templates. They are replicated with their own timestamps (and run ids) into the
rows store_event writes, through the event log storage's own row builder, in bulk: event_logs
(on SQLite also mirrored into the index shard), asset_check_executions for each check
evaluation, job_ticks for each tick (TickData as the daemon writes it). Runs, their start and
failure events and the partition materializations go through the instance's own APIs.
`--verify` seeds one hour both ways (bulk, and the real store_event per event) and compares row
counts per table.

Then it times, on a new instance (1 hour of history) and on the 30-day one: (a) the supervisor's
tick: the real sensor evaluated with build_sensor_context (its Kafka probe against a local broker),
then what the daemon writes for it (the events, the tick, the retention purge); and the Dagster
reads inside it; (b) the table asset's page: the UI's own GraphQL documents, read from the
installed dagster-webserver's bundle, sent to a dagster-webserver started on the instance.
Prints storage sizes (bytes and rows per table, per day) and the ratios 30 days / new.
"""

from __future__ import annotations

import contextlib
import json
import logging
import os
import re
import shutil
import sqlite3
import statistics
import subprocess
import sys
import tempfile
import time
import uuid
from collections.abc import Iterator, Sequence
from dataclasses import dataclass, field
from datetime import UTC, datetime
from pathlib import Path
from typing import Any

import click
import dagster as dg
import requests
import yaml
from common import kafka, write_figures
from dagster._core.definitions.instigation_logger import InstigationLogger
from dagster._core.events import DagsterEvent, DagsterEventType
from dagster._core.events.log import EventLogEntry
from dagster._core.scheduler.instigation import InstigatorType, TickData, TickStatus
from dagster._core.storage.event_log.schema import (
    AssetCheckExecutionsTable,
    SqlEventLogStorageTable,
)
from dagster._core.storage.event_log.sqlite.sqlite_event_log import SqliteEventLogStorage
from dagster._core.storage.runs.schema import RunsTable
from dagster._core.storage.schedules.schema import JobTickTable
from dagster._core.test_utils import create_run_for_test
from sqlalchemy import create_engine, func, select, text

from tidelake.assets.history.retention import purge_dagster_history
from tidelake.assets.stream.supervisor_sensor import supervisor_sensor_name
from tidelake.streaming.calls.call_events import CALL_EVENTS
from tidelake.streaming.stream.query import stream_name

REPO = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(REPO / "tests"))  # the tests' PostgreSQL server: one home for it
from local_postgres import LocalPostgres, postgres_bin  # noqa: E402

DAY_S = 86_400.0
TICK_S = 20.0
PROGRESS_S = 30.0
JOB = stream_name(CALL_EVENTS)
SENSOR = supervisor_sensor_name(CALL_EVENTS)
TABLE = ["lake", "call_events"]
STREAM_TAG = "tidelake/stream"
PAGE_QUERIES = {
    # what the table asset's page asks for as it opens, its Events tab, its Checks tab and one
    # check's history, its Partitions tab, and the health badge
    "AssetGraphLiveQuery": {"assetKeys": [{"path": TABLE}]},
    "AssetOverviewMetadataEventsQuery": {"assetKey": {"path": TABLE}},
    "RecentAssetEventsQuery": {
        "assetKey": {"path": TABLE},
        "eventTypeSelectors": ["MATERIALIZATION", "OBSERVATION", "FAILED_TO_MATERIALIZE"],
        "limit": 100,
    },
    "AssetChecksQuery": {"assetKey": {"path": TABLE}},
    "AssetCheckDetailsQuery": {
        "assetKey": {"path": TABLE},
        "checkName": "stream_alive",
        "limit": 25,
    },
    "PartitionHealthQuery": {"assetKey": {"path": TABLE}},
    "AssetHealthQuery": {"assetKeys": [{"path": TABLE}]},
}


@dataclass(frozen=True)
class Profile:
    """What a design leaves in Dagster's storage over time."""

    name: str
    health_every_s: float
    """How often the supervisor records its observation and two check evaluations when nothing
    changes (every tick: TICK_S)."""
    records_per_restart: int
    """Extra health records a restart causes (the verdicts change)."""
    run_observation_every_s: float
    tick_retention: dict[str, int]
    """Days each tick status is kept (-1: forever), as the sensor daemon purges them."""
    instance_settings: dict[str, Any] = field(default_factory=dict)


def before_profile() -> Profile:
    default = {"skipped": 7, "success": -1, "failure": -1}  # Dagster 1.13's defaults
    return Profile("before", TICK_S, 0, PROGRESS_S, default)


def after_profile() -> Profile:
    from tidelake.assets.stream.health import HEALTH_HEARTBEAT_S

    settings = yaml.safe_load((REPO / "platform/dev/dagster.yaml").read_text())
    with dg.instance_for_test(overrides={"retention": settings["retention"]}) as instance:
        kept = instance.get_tick_retention_settings(InstigatorType.SENSOR)
    retention = {status.value.lower(): days for status, days in kept.items()}
    return Profile(
        "after",
        HEALTH_HEARTBEAT_S,
        3,
        HEALTH_HEARTBEAT_S,
        retention,
        {"retention": settings["retention"]},
    )


# ---- the templates: what one real tick and one real progress report write ----------------------


@dataclass
class Templates:
    health: list[EventLogEntry]
    """The supervisor's observation and check evaluations of one tick, as stored."""
    progress: list[EventLogEntry]
    """One progress report of the stream run: its log line and its observation, as stored."""
    skip_reason: str
    cursor: str | None
    log_files_per_tick: int
    log_bytes_per_tick: int
    rows_per_tick: dict[str, int]


def capture_templates(defs: dg.Definitions, resources: dict[str, Any]) -> Templates:
    """One real tick and one real progress report, stored in a scratch instance."""
    from tidelake.assets.stream.job import ProgressReporter
    from tidelake.streaming.schemas.writer_schemas import WriterSchemas

    with tempfile.TemporaryDirectory(prefix="tidelake-dh-") as home:
        Path(home, "dagster.yaml").write_text("telemetry: {enabled: false}\n")
        with dg.instance_for_test(temp_dir=home) as instance:
            run = create_run_for_test(instance, job_name=JOB, status=dg.DagsterRunStatus.STARTED)
            sensor = defs.resolve_sensor_def(SENSOR)
            before_rows = table_rows(instance)
            files_before = log_files(home)
            with dg.build_sensor_context(
                instance=instance, definitions=defs, resources=resources
            ) as context:
                result = sensor(context)
                cursor = result.cursor
            for event in result.asset_events:
                instance.report_runless_asset_event(event)
            # the sensor logs its decision: in the daemon that is a captured log per tick
            with InstigationLogger(
                ["tidelake", "__repository__", SENSOR, uuid.uuid4().hex],
                instance,
                repository_name="__repository__",
                instigator_name=SENSOR,
            ) as logger:
                logger.info(result.skip_reason.skip_message if result.skip_reason else "")
            tick = instance.create_tick(
                TickData(
                    instigator_origin_id="origin",
                    instigator_name=SENSOR,
                    instigator_type=InstigatorType.SENSOR,
                    status=TickStatus.STARTED,
                    timestamp=time.time(),
                    selector_id="selector",
                )
            )
            assert result.skip_reason is not None, result
            reason = result.skip_reason.skip_message or ""
            instance.update_tick(
                tick.with_status(TickStatus.SKIPPED, skip_reason=reason).with_cursor(cursor)
            )
            after_rows = table_rows(instance)
            files = sorted(set(log_files(home)) - set(files_before))
            log_bytes = sum(os.path.getsize(f) for f in files)
            health = [
                r.event_log_entry
                for r in instance.get_records_for_run("", ascending=True).records
                if r.event_log_entry.dagster_event_type
                in (DagsterEventType.ASSET_OBSERVATION, DagsterEventType.ASSET_CHECK_EVALUATION)
            ]

            @dg.op(name=f"run_{JOB}")
            def report(context) -> None:  # type: ignore[no-untyped-def]  # dagster reads the hint
                kafka_conf = {"bootstrap.servers": resources["kafka"].bootstrap_servers}
                reporter = ProgressReporter(
                    context, CALL_EVENTS, kafka_conf, WriterSchemas(CALL_EVENTS, None)
                )
                reporter(FakeQuery(), spark_progress())

            @dg.job(name=JOB)
            def stream() -> None:
                report()

            ran = stream.execute_in_process(instance=instance)
            progress = [
                r.event_log_entry
                for r in instance.get_records_for_run(ran.run_id).records
                if (
                    r.event_log_entry.dagster_event_type is None
                    and "rows/s in" in r.event_log_entry.user_message
                )
                or r.event_log_entry.dagster_event_type is DagsterEventType.ASSET_OBSERVATION
            ]
            del run
    return Templates(
        health=health,
        progress=progress,
        skip_reason=reason,
        cursor=cursor,
        log_files_per_tick=len(files),
        log_bytes_per_tick=log_bytes,
        rows_per_tick={k: after_rows.get(k, 0) - before_rows.get(k, 0) for k in after_rows},
    )


class FakeQuery:
    """What ProgressReporter reads of a StreamingQuery besides the progress itself."""

    name = "call_events"
    recentProgress: list[dict[str, Any]] = []


def spark_progress() -> dict[str, Any]:
    """A micro-batch's progress as Spark reports it (the fields the reporter reads)."""
    ends = {str(p): 1_000_000 + p for p in range(CALL_EVENTS.topic_partitions)}
    return {
        "batchId": 41_234,
        "numInputRows": 30_000,
        "inputRowsPerSecond": 6012.3,
        "processedRowsPerSecond": 7421.9,
        "durationMs": {"triggerExecution": 4042},
        "sources": [{"endOffset": json.dumps({CALL_EVENTS.topic: ends})}],
        "stateOperators": [{"numRowsDroppedByWatermark": 0}],
    }


def log_files(home: str) -> list[str]:
    return [str(f) for f in Path(home, "storage").rglob("*") if f.is_file()]


# ---- storage: rows, bytes ----------------------------------------------------------------------

TABLES = ("event_logs", "asset_check_executions", "job_ticks", "runs", "asset_event_tags")


def table_rows(instance: dg.DagsterInstance) -> dict[str, int]:
    """Rows per table; on SQLite, event_logs summed over the index and every run shard."""
    out: dict[str, int] = {}
    storage = instance.event_log_storage
    if isinstance(storage, SqliteEventLogStorage):
        # the runless events' shard is ".db": not matched by a glob
        shards = [f for f in os.listdir(storage._base_dir) if f.endswith(".db")]
        out["event_logs"] = 0
        for shard in shards:
            name = shard.removesuffix(".db")
            with storage._connect(name) as conn:
                out["event_logs"] += conn.execute(
                    select(func.count()).select_from(SqlEventLogStorageTable)
                ).scalar_one()
        with storage.index_connection() as conn:
            out["asset_check_executions"] = conn.execute(
                select(func.count()).select_from(AssetCheckExecutionsTable)
            ).scalar_one()
            out["asset_event_tags"] = conn.execute(
                text("select count(*) from asset_event_tags")
            ).scalar_one()
    else:
        with storage.index_connection() as conn:
            for table in ("event_logs", "asset_check_executions", "asset_event_tags"):
                out[table] = conn.execute(text(f"select count(*) from {table}")).scalar_one()
    with instance.schedule_storage.connect() as conn:  # type: ignore[union-attr]
        out["job_ticks"] = conn.execute(select(func.count()).select_from(JobTickTable)).scalar_one()
    out["runs"] = instance.get_runs_count()
    return out


def storage_bytes(instance: dg.DagsterInstance, home: Path) -> int:
    """Bytes on disk: the SQLite files in $DAGSTER_HOME, or the PostgreSQL database."""
    storage = instance.event_log_storage
    if isinstance(storage, SqliteEventLogStorage):
        return sum(
            f.stat().st_size
            for folder in ("history", "schedules")
            for f in (home / folder).rglob("*")  # rglob sees the runless shard, .db
            if f.is_file()
        )
    with storage.index_connection() as conn:
        return int(conn.execute(text("select pg_database_size(current_database())")).scalar_one())


def purge_to_retention(instance: dg.DagsterInstance, home: Path, days: float) -> dict[str, Any]:
    """The daily retention job's purge (`purge_dagster_history`) at `days`, timed, then the
    storage compacted (SQLite VACUUM, PostgreSQL VACUUM FULL) so that its bytes are those the
    history kept holds: in a running instance the purge frees pages that the next days' rows
    reuse, so the files stay at that size instead of shrinking to it."""
    before = {"rows": table_rows(instance), "bytes": storage_bytes(instance, home)}
    started = time.perf_counter()
    purged = purge_dagster_history(instance, time.time() - days * DAY_S)
    purge_s = time.perf_counter() - started
    started = time.perf_counter()
    storage = instance.event_log_storage
    if isinstance(storage, SqliteEventLogStorage):
        for db_file in [
            f for folder in ("history", "schedules") for f in (home / folder).rglob("*.db")
        ]:
            with contextlib.closing(sqlite3.connect(db_file)) as conn:
                conn.execute("VACUUM")
    else:
        engine = create_engine(storage.postgres_url, isolation_level="AUTOCOMMIT")
        with engine.connect() as conn:
            conn.execute(text("VACUUM FULL"))
        engine.dispose()
    return {
        "before_purge": before,
        "retention_days": days,
        "purge_s": purge_s,
        "vacuum_s": time.perf_counter() - started,
        "runs_deleted": purged.runs,
        "events_deleted": purged.events,
        "check_executions_deleted": purged.check_executions,
    }


# ---- seeding -----------------------------------------------------------------------------------


@dataclass
class Seeder:
    instance: dg.DagsterInstance
    templates: Templates
    origin_id: str
    selector_id: str
    _rows: dict[int, tuple[dict[str, Any], str]] = field(default_factory=dict)

    @property
    def storage(self) -> Any:
        return self.instance.event_log_storage

    def events(self, items: Sequence[tuple[EventLogEntry, float, str]]) -> None:
        """What store_event writes for each (template, timestamp, run id), in bulk: event_logs
        (SQLite: the run's shard, asset and check events mirrored into the index),
        asset_check_executions. A template is serialized once; each copy gets its own timestamp
        and run id in the text (what serialize_value of the copy gives)."""
        storage = self.storage
        sqlite = isinstance(storage, SqliteEventLogStorage)
        rows = [self._row(template, t, run_id) for template, t, run_id in items]
        by_run: dict[str, list[dict[str, Any]]] = {}
        for row in rows:
            by_run.setdefault(row["run_id"], []).append(row)
        indexed = [
            (row, template)
            for row, (template, _, _) in zip(rows, items, strict=True)
            if not sqlite or template.dagster_event_type in INDEXED
        ]
        if sqlite:
            for run_id, group in by_run.items():
                with storage.run_connection(run_id) as conn:
                    conn.execute(SqlEventLogStorageTable.insert(), group)
        if not indexed:
            return
        with storage.index_connection() as conn:
            ids = (
                conn.execute(
                    SqlEventLogStorageTable.insert().returning(
                        SqlEventLogStorageTable.c.id, sort_by_parameter_order=True
                    ),
                    [row for row, _ in indexed],
                )
                .scalars()
                .all()
            )
            checks = [
                check_row(template, row, i)
                for (row, template), i in zip(indexed, ids, strict=True)
                if template.dagster_event_type is DagsterEventType.ASSET_CHECK_EVALUATION
            ]
            if checks:
                conn.execute(AssetCheckExecutionsTable.insert(), checks)

    def _row(self, template: EventLogEntry, t: float, run_id: str) -> dict[str, Any]:
        key = id(template)
        if key not in self._rows:
            self._rows[key] = (
                self.storage._event_to_row(template),
                dg.serialize_value(template),
            )
        row, body = self._rows[key]
        body = body.replace(f'"timestamp": {template.timestamp!r}', f'"timestamp": {t!r}')
        if template.run_id:
            body = body.replace(template.run_id, run_id)
        return {
            **row,
            "run_id": run_id,
            "event": body,
            "timestamp": datetime.fromtimestamp(t, UTC).replace(tzinfo=None),
        }

    def health(self, times: Sequence[float]) -> None:
        self.events([(e, t, "") for t in times for e in self.templates.health])

    def progress(self, run_id: str, times: Sequence[float], observation_every: float) -> None:
        items = []
        last_observation = -1e18
        for t in times:
            for e in self.templates.progress:
                if e.dagster_event_type is DagsterEventType.ASSET_OBSERVATION:
                    if t - last_observation < observation_every - 1e-6:
                        continue
                    last_observation = t
                items.append((e, t, run_id))
        for start in range(0, len(items), 20_000):
            self.events(items[start : start + 20_000])

    def ticks(
        self, times: Sequence[float], status: TickStatus, run_ids: Sequence[str] = ()
    ) -> None:
        rows = []
        for i, t in enumerate(times):
            data = TickData(
                instigator_origin_id=self.origin_id,
                instigator_name=SENSOR,
                instigator_type=InstigatorType.SENSOR,
                status=status,
                timestamp=t,
                run_ids=[run_ids[i]] if run_ids else [],
                run_keys=[f"call_events-{uuid.uuid4().hex[:12]}"] if run_ids else [],
                skip_reason=None if run_ids else self.templates.skip_reason,
                cursor=self.templates.cursor,
                selector_id=self.selector_id,
                end_timestamp=t + 0.4,
            )
            rows.append(
                {
                    "job_origin_id": self.origin_id,
                    "selector_id": self.selector_id,
                    "status": status.value,
                    "type": InstigatorType.SENSOR.value,
                    "timestamp": datetime.fromtimestamp(t, UTC).replace(tzinfo=None),
                    "tick_body": dg.serialize_value(data),
                }
            )
        with self.instance.schedule_storage.connect() as conn:  # type: ignore[union-attr]
            for start in range(0, len(rows), 20_000):
                conn.execute(JobTickTable.insert(), rows[start : start + 20_000])

    def run(self, start: float, end: float | None, failure: str) -> str:
        """A run of the stream job that started at `start` and failed at `end` (None: live)."""
        run = create_run_for_test(
            self.instance,
            job_name=JOB,
            status=dg.DagsterRunStatus.NOT_STARTED,
            tags={STREAM_TAG: "call_events"},
        )
        with self.instance.run_storage.connect() as conn:  # type: ignore[attr-defined]
            conn.execute(
                RunsTable.update()
                .where(RunsTable.c.run_id == run.run_id)
                .values(
                    create_timestamp=datetime.fromtimestamp(start - 2.0, UTC).replace(tzinfo=None)
                )
            )
        self.instance.report_dagster_event(
            DagsterEvent(DagsterEventType.RUN_START.value, job_name=JOB),
            run.run_id,
            timestamp=start,
        )
        if end is not None:
            self.instance.report_dagster_event(
                DagsterEvent(DagsterEventType.RUN_FAILURE.value, job_name=JOB, message=failure),
                run.run_id,
                timestamp=end,
            )
        # the run's row last changed when it ended (or started), as it would have
        with self.instance.run_storage.connect() as conn:  # type: ignore[attr-defined]
            conn.execute(
                RunsTable.update()
                .where(RunsTable.c.run_id == run.run_id)
                .values(
                    update_timestamp=datetime.fromtimestamp(end or start, UTC).replace(tzinfo=None)
                )
            )
        return run.run_id

    def closed_day(self, day: str, at: float) -> None:
        self.instance.report_dagster_event(
            DagsterEvent(
                DagsterEventType.ASSET_MATERIALIZATION.value,
                job_name="__RUNLESS_JOB__",
                event_specific_data=_step_materialization(day),
            ),
            "",
            timestamp=at,
        )


INDEXED = {
    DagsterEventType.ASSET_OBSERVATION,
    DagsterEventType.ASSET_MATERIALIZATION,
    DagsterEventType.ASSET_CHECK_EVALUATION,
}


def _step_materialization(day: str) -> Any:
    from dagster._core.events import StepMaterializationData

    return StepMaterializationData(
        dg.AssetMaterialization(
            asset_key=TABLE,
            partition=day,
            description=f"{day} closed",
            metadata={"dagster/row_count": 25_000_000, "files": 1_440, "table_version": 86_400},
        )
    )


def check_row(template: EventLogEntry, row: dict[str, Any], event_id: int) -> dict[str, Any]:
    """The asset_check_executions row store_event writes for a runless check evaluation."""
    evaluation = template.get_dagster_event().event_specific_data
    return {
        "asset_key": evaluation.asset_key.to_string(),
        "check_name": evaluation.check_name,
        "run_id": row["run_id"],
        "execution_status": "SUCCEEDED" if evaluation.passed else "FAILED",
        "evaluation_event": row["event"],
        "evaluation_event_timestamp": row["timestamp"],
        "evaluation_event_storage_id": event_id,
        "materialization_event_storage_id": None,
    }


def seed(
    seeder: Seeder,
    profile: Profile,
    now: float,
    days: float,
    restarts_per_day: float,
    live_run_days: float,
) -> str:
    """`days` of one stream's history ending now, as `profile` leaves it: runs that crashed
    `restarts_per_day` times a day, then the live run, up for the last `live_run_days` (its
    id)."""
    start = now - days * DAY_S
    # closed days first (older ids), as their dates closed
    for d in range(int(days)):
        at = start + (d + 1) * DAY_S
        seeder.closed_day(datetime.fromtimestamp(at - DAY_S, UTC).date().isoformat(), at)
    live_from = max(start, now - live_run_days * DAY_S)
    crashed = round((live_from - start) / DAY_S * restarts_per_day)
    span = (live_from - start) / crashed if crashed else 0.0
    starts = [start + k * span for k in range(crashed)] + [live_from]
    restart_times: list[float] = []
    for k, run_start in enumerate(starts):
        run_end = starts[k + 1] - 30.0 if k + 1 < len(starts) else None
        run_id = seeder.run(run_start, run_end, "stream run silent for 312s: its worker is lost")
        stop = run_end if run_end is not None else now - 5.0
        seeder.progress(
            run_id,
            list(frange(run_start + PROGRESS_S, stop, PROGRESS_S)),
            profile.run_observation_every_s,
        )
        restart_times.append(run_start)
    health_times = list(frange(start, now, profile.health_every_s))
    for t in restart_times:
        health_times += [t + 20.0 * (i + 1) for i in range(profile.records_per_restart)]
    health_times.sort()
    for i in range(0, len(health_times), 5_000):
        seeder.health(health_times[i : i + 5_000])
    # the ticks the daemon keeps under the profile's retention
    kept = profile.tick_retention.get("skipped", 7)
    since = start if kept < 0 else max(start, now - kept * DAY_S)
    seeder.ticks(list(frange(since, now, TICK_S)), TickStatus.SKIPPED)
    kept_success = profile.tick_retention.get("success", -1)
    success = [t for t in restart_times if kept_success < 0 or t >= now - kept_success * DAY_S]
    seeder.ticks(success, TickStatus.SUCCESS, [uuid.uuid4().hex for _ in success])
    return run_id


def frange(start: float, stop: float, step: float) -> Iterator[float]:
    t = start
    while t < stop:
        yield t
        t += step


# ---- instances ---------------------------------------------------------------------------------


@dataclass
class Site:
    """An instance on disk (its DAGSTER_HOME) and the storage it names."""

    home: Path
    storage: str

    def instance(self) -> dg.DagsterInstance:
        return dg.DagsterInstance.from_config(str(self.home))


def make_site(
    root: Path, name: str, storage: str, postgres: LocalPostgres | None, profile: Profile
) -> Site:
    home = root / name
    home.mkdir(parents=True)
    settings = yaml.safe_load((REPO / "platform/dev/dagster.yaml").read_text())
    settings.pop("retention", None)
    settings.update(profile.instance_settings)
    settings["sensors"] = {"use_threads": False}
    if storage == "postgres":
        assert postgres is not None
        settings["storage"] = {"postgres": {"postgres_url": postgres.new_database()}}
    (home / "dagster.yaml").write_text(yaml.safe_dump(settings))
    (home / "workspace.yaml").write_text((REPO / "workspace.yaml").read_text())
    return Site(home, storage)


@contextlib.contextmanager
def webserver(site: Site, env: dict[str, str]) -> Iterator[str]:
    from tidelake.platform.local.ports import free_port

    port = free_port()
    log = open(site.home / "webserver.log", "w")  # noqa: SIM115
    process = subprocess.Popen(
        [
            str(Path(sys.executable).with_name("dagster-webserver")),
            "-w", str(site.home / "workspace.yaml"), "-h", "127.0.0.1", "-p", str(port),
        ],
        cwd=REPO,
        env={**os.environ, **env, "DAGSTER_HOME": str(site.home)},
        stdout=log,
        stderr=subprocess.STDOUT,
        start_new_session=True,
    )  # fmt: skip
    url = f"http://127.0.0.1:{port}"
    try:
        deadline = time.monotonic() + 240
        while time.monotonic() < deadline:
            with contextlib.suppress(requests.RequestException, KeyError, TypeError):
                if graphql(url, "query { assetNodes { id } }")["assetNodes"]:
                    break
            if process.poll() is not None:
                raise RuntimeError(
                    f"webserver exited: {(site.home / 'webserver.log').read_text()[-3000:]}"
                )
            time.sleep(1)
        else:
            raise TimeoutError("webserver did not load the code location")
        yield url
    finally:
        os.killpg(process.pid, 15)
        process.wait(60)
        log.close()


def graphql(url: str, query: str, variables: dict[str, Any] | None = None) -> dict[str, Any]:
    response = requests.post(
        f"{url}/graphql", json={"query": query, "variables": variables or {}}, timeout=600
    )
    body = response.json()
    if body.get("errors"):
        raise RuntimeError(f"GraphQL errors: {body['errors']}"[:3000])
    return body["data"]


def sensor_ids(url: str) -> tuple[str, str]:
    """The supervisor's origin id and selector id as the code location computes them."""
    from dagster._core.remote_representation.handle import CompoundID

    data = graphql(
        url,
        """query($sel: SensorSelector!) { sensorOrError(sensorSelector: $sel) {
             ... on Sensor { sensorState { id selectorId } } } }""",
        {
            "sel": {
                "repositoryName": "__repository__",
                "repositoryLocationName": "tidelake",
                "sensorName": SENSOR,
            }
        },
    )["sensorOrError"]["sensorState"]
    return CompoundID.from_string(data["id"]).remote_origin_id, data["selectorId"]


def ui_queries() -> dict[str, str]:
    """The UI's GraphQL documents of the asset page, with their fragments, from the installed
    dagster-webserver's bundle."""
    import dagster_webserver

    docs: dict[str, str] = {}
    bundle = Path(dagster_webserver.__file__).parent / "webapp/build/_next/static/chunks"
    pattern = re.compile(r'"(\\n\s*(?:query|fragment) [^"]*)"')
    for chunk in bundle.glob("*.js"):
        for m in pattern.finditer(chunk.read_text(errors="replace")):
            body = m.group(1).encode().decode("unicode_escape")
            name = re.match(r"\s*(?:query|fragment) (\w+)", body)
            if name:
                docs.setdefault(name.group(1), body)

    def resolve(name: str, seen: set[str]) -> list[str]:
        seen.add(name)
        out = [docs[name]]
        for spread in re.findall(r"\.\.\.\s*(\w+)", docs[name]):
            if spread in docs and spread not in seen and spread[0].isupper():
                out += resolve(spread, seen)
        return out

    found = {}
    for name in PAGE_QUERIES:
        text_ = "\n".join(resolve(name, set()))
        # fragments defined inline in the query's own template are not duplicated
        found[name] = dedupe_fragments(text_)
    return found


def dedupe_fragments(document: str) -> str:
    parts = re.split(r"(?=\n\s*(?:query|fragment) \w+)", document)
    seen, out = set(), []
    for part in parts:
        m = re.match(r"\s*(query|fragment) (\w+)", part)
        key = (m.group(1), m.group(2)) if m else None
        if key in seen:
            continue
        if key:
            seen.add(key)
        out.append(part)
    return "".join(out)


def time_page(url: str, queries: dict[str, str], repeats: int) -> dict[str, float]:
    out = {}
    for name, document in queries.items():
        graphql(url, document, PAGE_QUERIES[name])  # warm: the code location's snapshot
        runs = []
        for _ in range(repeats):
            started = time.perf_counter()
            graphql(url, document, PAGE_QUERIES[name])
            runs.append(time.perf_counter() - started)
        out[name] = min(runs) * 1000  # the machine is shared: the best of the runs
        out[f"{name}_median"] = statistics.median(runs) * 1000
    out["page_total_ms"] = sum(v for k, v in out.items() if not k.endswith("_median"))
    out["page_total_median_ms"] = sum(v for k, v in out.items() if k.endswith("_median"))
    return out


# ---- the tick ----------------------------------------------------------------------------------


def time_ticks(
    instance: dg.DagsterInstance,
    defs: dg.Definitions,
    resources: dict[str, Any],
    origin_id: str,
    selector_id: str,
    retention: dict[str, int],
    ticks: int,
) -> dict[str, Any]:
    """The supervisor's tick as the daemon runs it: the sensor, then its events, its tick and the
    retention purge written; and the Dagster reads inside the sensor, timed apart."""
    from tidelake.assets.stream import health
    from tidelake.assets.stream.always_on import fail_if_stale

    sensor = defs.resolve_sensor_def(SENSOR)
    cursor = None
    evaluate, write, recorded = [], [], 0
    by_status: dict[int, list[TickStatus]] = {}
    for status in (TickStatus.SKIPPED, TickStatus.SUCCESS, TickStatus.FAILURE):
        days = retention.get(status.value.lower(), -1)
        if days > 0:
            by_status.setdefault(days, []).append(status)
    for _ in range(ticks):
        started = time.perf_counter()
        with dg.build_sensor_context(
            instance=instance, cursor=cursor, definitions=defs, resources=resources
        ) as context:
            result = sensor(context)
        evaluated = time.perf_counter()
        assert not result.run_requests, result.run_requests
        cursor = result.cursor
        tick = instance.create_tick(
            TickData(
                instigator_origin_id=origin_id,
                instigator_name=SENSOR,
                instigator_type=InstigatorType.SENSOR,
                status=TickStatus.STARTED,
                timestamp=time.time(),
                selector_id=selector_id,
            )
        )
        for event in result.asset_events:
            instance.report_runless_asset_event(event)
        recorded += bool(result.asset_events)
        skip = result.skip_reason.skip_message if result.skip_reason else None
        instance.update_tick(
            tick.with_status(TickStatus.SKIPPED, skip_reason=skip).with_cursor(cursor)
        )
        for days, statuses in by_status.items():
            instance.purge_ticks(
                origin_id, selector_id, before=time.time() - days * DAY_S, tick_statuses=statuses
            )
        write.append(time.perf_counter() - evaluated)
        evaluate.append(evaluated - started)
    reads: dict[str, list[float]] = {"recent_runs": [], "fail_if_stale": [], "stream_restarts": []}
    # main f7e4780 counted every run of the job (stream_restarts); issue 38 counts from the runs
    # already read (recent_restarts): no query
    count_runs = getattr(health, "stream_restarts", None)
    for _ in range(ticks):
        t0 = time.perf_counter()
        runs = health.recent_runs(instance, JOB)
        t1 = time.perf_counter()
        for r in runs:
            fail_if_stale(instance, r, time.time())
        t2 = time.perf_counter()
        if count_runs is not None:
            count_runs(instance, JOB)
        else:
            health.recent_restarts(runs, time.time())
        t3 = time.perf_counter()
        reads["recent_runs"].append(t1 - t0)
        reads["fail_if_stale"].append(t2 - t1)
        reads["stream_restarts"].append(t3 - t2)
    ms = lambda xs: statistics.median(xs) * 1000  # noqa: E731
    return {
        "evaluate_ms": ms(evaluate),
        "evaluate_max_ms": max(evaluate) * 1000,
        "write_ms": ms(write),
        "tick_ms": ms([a + b for a, b in zip(evaluate, write, strict=True)]),
        "tick_min_ms": min(a + b for a, b in zip(evaluate, write, strict=True)) * 1000,
        "ticks_that_recorded": recorded,
        "ticks": ticks,
        **{f"{k}_ms": ms(v) for k, v in reads.items()},
    }


# ---- verification of the bulk seeding ----------------------------------------------------------


def verify(templates: Templates, hours: float = 1.0) -> dict[str, Any]:
    """One hour of health and progress seeded in bulk and through store_event one by one: the
    same rows per table."""
    counts = {}
    for way in ("bulk", "store_event"):
        with dg.instance_for_test() as instance:
            seeder = Seeder(instance, templates, "origin", "selector")
            now = time.time()
            times = list(frange(now - hours * 3600, now, TICK_S))
            run_id = create_run_for_test(instance, job_name=JOB).run_id
            before = table_rows(instance)
            if way == "bulk":
                seeder.health(times)
                seeder.progress(
                    run_id, list(frange(now - hours * 3600, now, PROGRESS_S)), PROGRESS_S
                )
            else:
                for t in times:
                    for e in templates.health:
                        instance.handle_new_event(e._replace(timestamp=t))
                for t in frange(now - hours * 3600, now, PROGRESS_S):
                    for e in templates.progress:
                        instance.handle_new_event(e._replace(run_id=run_id, timestamp=t))
            after = table_rows(instance)
            counts[way] = {k: after[k] - before.get(k, 0) for k in after}
            key = dg.AssetKey(TABLE)
            counts[way]["check_history"] = len(
                instance.event_log_storage.get_asset_check_execution_history(
                    dg.AssetCheckKey(key, "stream_alive"), limit=10_000
                )
            )
            counts[way]["observations"] = len(
                instance.fetch_observations(key, limit=10_000).records
            )
    counts["same"] = counts["bulk"] == counts["store_event"]
    return counts


# ---- the command -------------------------------------------------------------------------------


@click.command()
@click.option("--days", default=30.0, show_default=True, help="history to seed")
@click.option("--restarts-per-day", default=3.0, show_default=True, help="before the live run")
@click.option("--live-run-days", default=7.0, show_default=True, help="age of the live run")
@click.option("--profiles", default="before,after", show_default=True)
@click.option("--storages", default="sqlite,postgres", show_default=True)
@click.option("--ticks", default=15, show_default=True, help="ticks timed per instance")
@click.option("--repeats", default=5, show_default=True, help="runs of each page query")
@click.option("--verify/--no-verify", "check", default=True, help="compare bulk and real seeding")
@click.option(
    "--retention-days",
    type=click.FloatRange(min=0, min_open=True),
    help="purge the aged instances to this many days (the daily dagster_history_retention "
    "job) before measuring them",
)
@click.option("--keep", is_flag=True, help="keep the instances' folders")
@click.option("--out", type=click.Path(path_type=Path))
def main(
    days: float,
    restarts_per_day: float,
    live_run_days: float,
    profiles: str,
    storages: str,
    ticks: int,
    repeats: int,
    check: bool,
    retention_days: float | None,
    keep: bool,
    out: Path | None,
) -> None:
    logging.getLogger("dagster").setLevel(logging.WARNING)
    root = Path(tempfile.mkdtemp(prefix="tidelake-dagster-history-"))
    env = {
        "TIDELAKE_LAKE": str(root / "lake"),
        "TIDELAKE_CHECKPOINTS": str(root / "checkpoints"),
        "TIDELAKE_HOME": str(root / "home"),
    }
    os.environ.update(env)
    chosen = [p for p in profiles.split(",") if p]
    figures: dict[str, Any] = {
        "days": days,
        "restarts_per_day": restarts_per_day,
        "live_run_days": live_run_days,
        "runs": {},
    }
    postgres = None
    with kafka() as conf, contextlib.ExitStack() as stack:
        env["KAFKA_BOOTSTRAP_SERVERS"] = conf["bootstrap.servers"]
        os.environ["KAFKA_BOOTSTRAP_SERVERS"] = conf["bootstrap.servers"]
        from tidelake.assets.definitions import build_definitions
        from tidelake.assets.resources import KafkaResource
        from tidelake.streaming.kafka.admin import ensure_topic

        ensure_topic(conf, CALL_EVENTS.topic, CALL_EVENTS.topic_partitions)
        defs = build_definitions({CALL_EVENTS.name: CALL_EVENTS})
        resources = {"kafka": KafkaResource(bootstrap_servers=conf["bootstrap.servers"])}
        templates = capture_templates(defs, resources)
        figures["one_tick_writes"] = {
            "rows": templates.rows_per_tick,
            "event_bytes": sum(len(dg.serialize_value(e)) for e in templates.health),
            "log_files": templates.log_files_per_tick,
            "log_bytes": templates.log_bytes_per_tick,
        }
        figures["one_progress_report_writes"] = {
            "events": len(templates.progress),
            "event_bytes": sum(len(dg.serialize_value(e)) for e in templates.progress),
        }
        click.echo(f"one real tick writes: {figures['one_tick_writes']}")
        click.echo(f"one progress report writes: {figures['one_progress_report_writes']}")
        if check:
            figures["verify"] = verify(templates)
            click.echo(f"bulk vs store_event, 1 hour: {figures['verify']}")
        if "postgres" in storages:
            if postgres_bin() is None:
                raise click.ClickException(
                    "PostgreSQL's server is not installed: scripts/install_debian_packages.sh"
                )
            postgres = stack.enter_context(contextlib.closing(_Postgres()))
        queries = ui_queries()
        for storage in [s for s in storages.split(",") if s]:
            for name in chosen:
                profile = before_profile() if name == "before" else after_profile()
                for age, history in (("new", 1 / 24), ("aged", days)):
                    label = f"{storage}/{name}/{age}"
                    site = make_site(
                        root,
                        label.replace("/", "-"),
                        storage,
                        postgres.server if postgres else None,
                        profile,
                    )
                    click.echo(f"{label}: seeding {history:g} days ...")
                    with webserver(site, env) as url:
                        origin_id, selector_id = sensor_ids(url)
                        with site.instance() as instance:
                            started = time.perf_counter()
                            seeder = Seeder(instance, templates, origin_id, selector_id)
                            live = seed(
                                seeder, profile, time.time(), history, restarts_per_day,
                                live_run_days,
                            )  # fmt: skip
                            seeded_s = time.perf_counter() - started
                            # the live run reports on: seeding took minutes
                            seeder.progress(live, [time.time()], PROGRESS_S)
                            purge = None
                            if retention_days and age == "aged":
                                purge = purge_to_retention(instance, site.home, retention_days)
                                click.echo(f"{label}: purged to {retention_days:g} days: {purge}")
                            if storage == "postgres":
                                with instance.event_log_storage.index_connection() as conn:
                                    conn.execute(text("analyze"))  # as autovacuum would
                            rows = table_rows(instance)
                            size = storage_bytes(instance, site.home)
                            tick = time_ticks(
                                instance,
                                defs,
                                resources,
                                origin_id,
                                selector_id,
                                profile.tick_retention,
                                ticks,
                            )
                            page = time_page(url, queries, repeats)
                    result = {
                        "seed_s": seeded_s,
                        "rows": rows,
                        "bytes": size,
                        "tick": tick,
                        "page_ms": page,
                        "purge": purge,
                    }
                    figures["runs"][label] = result
                    click.echo(
                        f"{label}: {size / 1e6:,.1f} MB, rows {rows}; tick {tick['tick_ms']:.0f} "
                        f"ms (sensor {tick['evaluate_ms']:.0f}, writes {tick['write_ms']:.0f}); "
                        f"page {page['page_total_ms']:.0f} ms"
                    )
                    if not keep:
                        shutil.rmtree(site.home, ignore_errors=True)
    report(figures)
    write_figures(out, figures)
    if not keep:
        shutil.rmtree(root, ignore_errors=True)


class _Postgres:
    def __init__(self) -> None:
        self.server = LocalPostgres()
        self.server.start()

    def close(self) -> None:
        self.server.stop()


def report(figures: dict[str, Any]) -> None:
    """Per 30-day instance: storage, its growth per day, and tick and page times next to the
    new instance's (ratio)."""
    runs = figures["runs"]
    grown_days = figures["days"] - 1 / 24
    header = ("instance", "MB", "MB/day", "rows/day", "ticks", "tick ms", "x", "page ms", "x")
    widths = (24, 8, 8, 10, 8, 9, 6, 9, 6)
    line = "".join(
        f"{h:>{w}}" if i else f"{h:<{w}}"
        for i, (h, w) in enumerate(zip(header, widths, strict=True))
    )
    click.echo(f"\n{line}")
    for label, aged in runs.items():
        new = runs.get(label.replace("/aged", "/new"))
        if not label.endswith("/aged") or new is None:
            continue
        rows = sum(aged["rows"].values()) - sum(new["rows"].values())
        # a purged instance holds the retention's days, not the days seeded
        kept_days = (
            min(grown_days, aged["purge"]["retention_days"]) if aged.get("purge") else grown_days
        )
        cells = (
            label.removesuffix("/aged"),
            f"{aged['bytes'] / 1e6:.1f}",
            f"{(aged['bytes'] - new['bytes']) / kept_days / 1e6:.2f}",
            f"{rows / kept_days:,.0f}",
            f"{aged['rows']['job_ticks']:,}",
            f"{new['tick']['tick_min_ms']:.0f}->{aged['tick']['tick_min_ms']:.0f}",
            f"{aged['tick']['tick_min_ms'] / new['tick']['tick_min_ms']:.2f}",
            f"{new['page_ms']['page_total_ms']:.0f}->{aged['page_ms']['page_total_ms']:.0f}",
            f"{aged['page_ms']['page_total_ms'] / new['page_ms']['page_total_ms']:.2f}",
        )
        click.echo(
            "".join(
                f"{c:>{w}}" if i else f"{c:<{w}}"
                for i, (c, w) in enumerate(zip(cells, widths, strict=True))
            )
        )
    for label, r in runs.items():
        if purge := r.get("purge"):
            before = purge["before_purge"]
            click.echo(
                f"\n{label}: {before['bytes'] / 1e6:,.1f} MB and "
                f"{sum(before['rows'].values()):,} rows before the purge to "
                f"{purge['retention_days']:g} days, {r['bytes'] / 1e6:,.1f} MB and "
                f"{sum(r['rows'].values()):,} rows after; the purge took {purge['purge_s']:.1f} s "
                f"({purge['runs_deleted']:,} runs, {purge['events_deleted']:,} events, "
                f"{purge['check_executions_deleted']:,} check executions), the vacuum "
                f"{purge['vacuum_s']:.1f} s"
            )
    click.echo("\nasset page queries, best of the runs (ms):")
    for label, r in runs.items():
        parts = [
            f"{k.removesuffix('Query')} {v:.0f}"
            for k, v in r["page_ms"].items()
            if "median" not in k
        ]
        click.echo(f"  {label:<24}" + ", ".join(parts))


if __name__ == "__main__":
    main()
