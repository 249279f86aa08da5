"""The supervisor sensor of each flow's stream (made by always_on.build_supervisor).

Every tick it (1) keeps exactly one run of the stream job alive, restarting crashed runs with a
capped exponential back-off, (2) records the stream's health (lag per partition, last batch,
restarts) as an observation of the table asset plus the stream_alive and lag_below_threshold
checks, and (3) marks date partitions of the table materialized once the stream has closed them
on its own clock: every partition's committed position has passed a record stamped after the
date closed (status.closed_dates). It touches Kafka only through probes bounded by a few seconds,
far below the sensor tick's timeout, and never starts Spark.
"""

import json
from dataclasses import dataclass
from datetime import date, timedelta

import dagster as dg

from tidelake.assets.stream.always_on import Observed, SupervisorEvent, build_supervisor
from tidelake.assets.stream.health import KAFKA_PROBE_TIMEOUT_S, measure_health, stream_restarts
from tidelake.assets.stream.supervisor_decision import Decision, SupervisorPolicy
from tidelake.assets.tables.keys import table_key
from tidelake.streaming.delta.progress import table_progress
from tidelake.streaming.flow.spec import FlowSpec
from tidelake.streaming.kafka.offsets import KafkaSourceError
from tidelake.streaming.settings import EngineSettings
from tidelake.streaming.stream.status import closed_dates


@dataclass
class SupervisorCursor:
    """What the sensor remembers between ticks: the newest date partition already announced."""

    closed_through: str | None = None

    @classmethod
    def parse(cls, text: str | None) -> "SupervisorCursor":
        return cls(**json.loads(text)) if text else cls()

    def dump(self) -> str:
        return json.dumps(self.__dict__)


def supervisor_sensor_name(flow: FlowSpec) -> str:
    return f"{flow.name}_stream_supervisor"


def build_supervisor_sensor(
    flow: FlowSpec,
    job: dg.JobDefinition,
    settings: EngineSettings,
    policy: SupervisorPolicy,
    interval_s: int = 20,
) -> dg.SensorDefinition:
    checkpoint = settings.checkpoint_uri(flow.name)
    table_uri = settings.table_uri(flow.table)

    def observe(
        context: dg.SensorEvaluationContext,
        conf: dict[str, str],
        decision: Decision,
        now: float,
    ) -> Observed:
        restarts = stream_restarts(context.instance, job.name)
        health = measure_health(flow, checkpoint, conf, decision, restarts, now)
        cursor = SupervisorCursor.parse(context.cursor)
        events: list[SupervisorEvent] = [health.observation(), *health.check_evaluations()]
        if health.committed is not None and health.kafka_error is None:
            events += _close_partitions(flow, table_uri, cursor, conf, health.committed.offsets)
        return Observed(events, cursor.dump())

    return build_supervisor(
        job,
        policy,
        name=supervisor_sensor_name(flow),
        description=f"Keeps one run of {job.name} alive, backs off on crash loops, records "
        f"lag and health of {flow.table}, and closes its daily partitions.",
        observe=observe,
        interval_s=interval_s,
    )


def _close_partitions(
    flow: FlowSpec,
    table_uri: str,
    cursor: SupervisorCursor,
    kafka_conf: dict[str, str],
    position: dict[int, int],
) -> list[dg.AssetMaterialization]:
    """Materializations for every date the stream has closed for good since the cursor's."""
    progress = table_progress(table_uri, flow)
    if progress is None or not progress.rows_by_date:
        return []
    first = max(
        flow.first_date,
        date.fromisoformat(cursor.closed_through) + timedelta(days=1)
        if cursor.closed_through
        else date.fromisoformat(min(progress.rows_by_date)),
    )
    try:
        days = closed_dates(flow, kafka_conf, position, first, KAFKA_PROBE_TIMEOUT_S)
    except KafkaSourceError:
        return []  # the health observation reports Kafka's error; close on a later tick
    events = []
    for day in days:
        closes = flow.closes_at(date.fromisoformat(day))
        events.append(
            dg.AssetMaterialization(
                asset_key=table_key(flow),
                partition=day,
                description=f"{day} closed: the stream has passed a record stamped after "
                f"{closes:%Y-%m-%d %H:%M} UTC in every partition of {flow.topic}",
                metadata={
                    "dagster/row_count": dg.MetadataValue.int(progress.rows_by_date.get(day, 0)),
                    "files": dg.MetadataValue.int(progress.files_by_date.get(day, 0)),
                    "table_version": dg.MetadataValue.int(progress.version),
                },
            )
        )
        cursor.closed_through = day
    return events
