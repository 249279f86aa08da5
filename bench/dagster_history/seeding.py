"""One stream's history copied from the templates in bulk, with their own timestamps and run
ids, into the rows store_event writes; and the check that bulk and store_event agree."""

from __future__ import annotations

import time
import uuid
from collections.abc import Iterator, Sequence
from dataclasses import dataclass, field
from datetime import UTC, datetime
from typing import Any

import dagster as dg

# the rows store_event and the sensor daemon write, in bulk: Dagster has no bulk API, nor a
# public one that writes a tick or dates a materialization in the past
from dagster._core.events import StepMaterializationData
from dagster._core.scheduler.instigation import InstigatorType, TickData, TickStatus
from dagster._core.storage.event_log.schema import (
    AssetCheckExecutionsTable,
    SqlEventLogStorageTable,
)
from dagster._core.storage.runs.schema import RunsTable
from dagster._core.storage.schedules.schema import JobTickTable

from tidelake.assets.history.event_log_tables import RUNLESS_RUN_ID, stored_time

from .profiles import DAY_S, JOB, PROGRESS_S, SENSOR, STREAM_TAG, TABLE, TICK_S, Profile
from .storage import table_rows
from .templates import Templates, new_run


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

    def events(self, items: Sequence[tuple[dg.EventLogEntry, float, str]]) -> None:
        """What store_event writes for each (template, timestamp, run id), in bulk: event_logs
        (SQLite: the run's shard, asset and check events mirrored into the index),
        asset_check_executions. A template is serialized once; each copy gets its own timestamp
        and run id in the text (what serialize_value of the copy gives)."""
        storage = self.storage
        sqlite = storage.is_run_sharded
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
                if template.dagster_event_type is dg.DagsterEventType.ASSET_CHECK_EVALUATION
            ]
            if checks:
                conn.execute(AssetCheckExecutionsTable.insert(), checks)

    def _row(self, template: dg.EventLogEntry, t: float, run_id: str) -> dict[str, Any]:
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
            "timestamp": stored_time(t),
        }

    def health(self, times: Sequence[float]) -> None:
        self.events([(e, t, RUNLESS_RUN_ID) for t in times for e in self.templates.health])

    def progress(self, run_id: str, times: Sequence[float], observation_every: float) -> None:
        items = []
        last_observation = -1e18
        for t in times:
            for e in self.templates.progress:
                if e.dagster_event_type is dg.DagsterEventType.ASSET_OBSERVATION:
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
                    "timestamp": stored_time(t),
                    "tick_body": dg.serialize_value(data),
                }
            )
        with self.instance.schedule_storage.connect() as conn:  # type: ignore[union-attr]
            for start in range(0, len(rows), 20_000):
                conn.execute(JobTickTable.insert(), rows[start : start + 20_000])

    def run(self, start: float, end: float | None, failure: str) -> str:
        """A run of the stream job that started at `start` and failed at `end` (None: live)."""
        run_id = new_run(
            self.instance, dg.DagsterRunStatus.NOT_STARTED, {STREAM_TAG: "call_events"}
        )
        with self.instance.run_storage.connect() as conn:  # type: ignore[attr-defined]
            conn.execute(
                RunsTable.update()
                .where(RunsTable.c.run_id == run_id)
                .values(create_timestamp=stored_time(start - 2.0))
            )
        self.instance.report_dagster_event(
            dg.DagsterEvent(dg.DagsterEventType.RUN_START.value, job_name=JOB),
            run_id,
            timestamp=start,
        )
        if end is not None:
            self.instance.report_dagster_event(
                dg.DagsterEvent(
                    dg.DagsterEventType.RUN_FAILURE.value, job_name=JOB, message=failure
                ),
                run_id,
                timestamp=end,
            )
        # the run's row last changed when it ended (or started), as it would have
        with self.instance.run_storage.connect() as conn:  # type: ignore[attr-defined]
            conn.execute(
                RunsTable.update()
                .where(RunsTable.c.run_id == run_id)
                .values(update_timestamp=stored_time(end or start))
            )
        return run_id

    def closed_day(self, day: str, at: float) -> None:
        self.instance.report_dagster_event(
            dg.DagsterEvent(
                dg.DagsterEventType.ASSET_MATERIALIZATION.value,
                job_name="__RUNLESS_JOB__",
                event_specific_data=_step_materialization(day),
            ),
            RUNLESS_RUN_ID,
            timestamp=at,
        )


INDEXED = {
    dg.DagsterEventType.ASSET_OBSERVATION,
    dg.DagsterEventType.ASSET_MATERIALIZATION,
    dg.DagsterEventType.ASSET_CHECK_EVALUATION,
}


def _step_materialization(day: str) -> Any:
    return StepMaterializationData(
        dg.AssetMaterialization(
            asset_key=TABLE,
            partition=day,
            description=f"{day} closed",
            metadata={"dagster/row_count": 25_000_000, "files": 1_440, "table_version": 86_400},
        )
    )


def check_row(template: dg.EventLogEntry, row: dict[str, Any], event_id: int) -> dict[str, Any]:
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


def verify(templates: Templates, hours: float = 1.0) -> dict[str, Any]:
    """One hour of health and progress seeded in bulk and through store_event one by one: the
    same rows per table."""
    counts = {}
    for way in ("bulk", "store_event"):
        with dg.instance_for_test() as instance:
            seeder = Seeder(instance, templates, "origin", "selector")
            now = time.time()
            times = list(frange(now - hours * 3600, now, TICK_S))
            run_id = new_run(instance, dg.DagsterRunStatus.NOT_STARTED)
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
