"""The supervisor sensor of each flow's stream (made by always_on.build_supervisor).

Every tick it (1) keeps exactly one run of the stream job alive, restarting crashed runs with a
capped exponential back-off, (2) measures the stream's health (lag per partition, last batch,
restarts) and records it as an observation of the table asset plus the stream_alive and
lag_below_threshold checks when it has changed (StreamHealth.state) or HEALTH_HEARTBEAT_S after
the last record, and (3) marks date partitions of the table materialized once the stream has
closed them on its own clock: every partition's committed position has passed a record stamped
after the date closed (status.closed_dates). It touches Kafka only through probes bounded by a few
seconds, far below the sensor tick's timeout, and never starts Spark; it reads the table's log
only once a date may have closed.
"""

import json
from collections.abc import Sequence
from dataclasses import dataclass
from datetime import UTC, date, datetime, timedelta

import dagster as dg

from tidelake.assets.stream import health as stream_health
from tidelake.assets.stream.always_on import Observed, SupervisorEvent, build_supervisor
from tidelake.assets.stream.health import (
    KAFKA_PROBE_TIMEOUT_S,
    measure_health,
    recent_restarts,
)
from tidelake.assets.stream.supervisor_decision import Decision, RunView, SupervisorPolicy
from tidelake.assets.tables.keys import table_key
from tidelake.streaming.delta.progress import table_progress
from tidelake.streaming.flow.spec import FlowSpec
from tidelake.streaming.kafka.offsets import KafkaSourceError
from tidelake.streaming.settings import EngineSettings
from tidelake.streaming.stream.status import closed_dates


@dataclass
class SupervisorCursor:
    """What the sensor remembers between ticks: the newest date partition already announced,
    and the health last recorded (its StreamHealth.state and when)."""

    closed_through: str | None = None
    health: str | None = None
    health_at: float | None = None

    def health_due(self, state: str, now: float) -> bool:
        """Record the health now: it changed, or the heartbeat is due."""
        if state != self.health or self.health_at is None:
            return True
        return now - self.health_at >= stream_health.HEALTH_HEARTBEAT_S

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
) -> dg.SensorDefinition:
    checkpoint = settings.checkpoint_uri(flow.name)
    table_uri = settings.table_uri(flow.table)

    def observe(
        context: dg.SensorEvaluationContext,
        conf: dict[str, str],
        decision: Decision,
        runs: Sequence[RunView],
        now: float,
    ) -> Observed:
        health = measure_health(flow, checkpoint, conf, decision, recent_restarts(runs, now), now)
        cursor = SupervisorCursor.parse(context.cursor)
        events: list[SupervisorEvent] = []
        state = health.state()
        if cursor.health_due(state, now):
            events += [health.observation(), *health.check_evaluations()]
            cursor.health, cursor.health_at = state, now
        if health.committed is not None and health.kafka_error is None:
            events += _close_partitions(
                flow, table_uri, cursor, conf, health.committed.offsets, now
            )
        return Observed(events, cursor.dump())

    return build_supervisor(
        job,
        policy,
        name=supervisor_sensor_name(flow),
        description=f"Keeps one run of {job.name} alive, backs off on crash loops, records "
        f"lag and health of {flow.table}, and closes its daily partitions.",
        observe=observe,
    )


def _close_partitions(
    flow: FlowSpec,
    table_uri: str,
    cursor: SupervisorCursor,
    kafka_conf: dict[str, str],
    position: dict[int, int],
    now: float,
) -> list[dg.AssetMaterialization]:
    """Materializations for every date the stream has closed for good since the cursor's."""
    if cursor.closed_through:
        following = date.fromisoformat(cursor.closed_through) + timedelta(days=1)
        if flow.closes_at(following) > datetime.fromtimestamp(now, UTC):
            return []  # no date can have closed: the table's log is not read
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
