"""What one real supervisor tick and one real progress report write, stored in a scratch
instance: the templates the seeding copies."""

from __future__ import annotations

import json
import os
import tempfile
import time
import uuid
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import dagster as dg

# a tick's captured log and its row: Dagster has no public API that writes them
from dagster._core.definitions.instigation_logger import InstigationLogger
from dagster._core.scheduler.instigation import InstigatorType, TickData, TickStatus

from tidelake.assets.history.event_log_tables import RUNLESS_RUN_ID
from tidelake.streaming.calls.call_events import CALL_EVENTS

from .profiles import JOB, SENSOR
from .storage import table_rows


@dataclass
class Templates:
    health: list[dg.EventLogEntry]
    """The supervisor's observation and check evaluations of one tick, as stored."""
    progress: list[dg.EventLogEntry]
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
            new_run(instance, dg.DagsterRunStatus.STARTED)  # the live stream the sensor sees
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
                for r in instance.get_records_for_run(RUNLESS_RUN_ID, ascending=True).records
                if r.event_log_entry.dagster_event_type
                in (
                    dg.DagsterEventType.ASSET_OBSERVATION,
                    dg.DagsterEventType.ASSET_CHECK_EVALUATION,
                )
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
                or r.event_log_entry.dagster_event_type is dg.DagsterEventType.ASSET_OBSERVATION
            ]
    return Templates(
        health=health,
        progress=progress,
        skip_reason=reason,
        cursor=cursor,
        log_files_per_tick=len(files),
        log_bytes_per_tick=log_bytes,
        rows_per_tick={k: after_rows.get(k, 0) - before_rows.get(k, 0) for k in after_rows},
    )


def new_run(
    instance: dg.DagsterInstance, status: dg.DagsterRunStatus, tags: dict[str, str] | None = None
) -> str:
    """A run of the stream job, recorded as the run launcher records one (its id)."""
    run = dg.DagsterRun(job_name=JOB, run_id=str(uuid.uuid4()), status=status, tags=tags or {})
    return instance.add_run(run).run_id


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
