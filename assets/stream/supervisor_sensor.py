"""The supervisor sensor of each flow's stream (made by always_on.build_supervisor).

Every tick it (1) keeps exactly one run of the stream job alive, restarting crashed runs with a
capped exponential back-off, (2) measures the stream's health (lag per partition, last batch,
restarts) and records it as an observation of the table asset plus the stream_alive and
lag_below_threshold checks when it has changed (StreamHealth.state) or HEALTH_HEARTBEAT_S after
the last record, and (3) marks date partitions of the table materialized once the stream has
closed them on its own clock: every partition's committed position has passed a record stamped
after the date closed (status.closed_dates). It touches Kafka only through probes bounded by a few
seconds, far below the sensor tick's timeout, and never starts Spark. It reads the table's log
on its first tick and then only once Kafka says a date has closed: a read costs what the table's
files cost (0.6 s and ~30 MB of the code server's memory at 7,800 files, half an hour of a stream
at 6,000 events/s whose date has not closed yet), so reading it every tick made the tick grow
with the open date's files.
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
from tidelake.streaming.delta.progress import TableProgress, table_progress
from tidelake.streaming.flow.spec import FlowSpec
from tidelake.streaming.kafka.offsets import KafkaSourceError
from tidelake.streaming.settings import EngineSettings
from tidelake.streaming.stream.query import stream_name
from tidelake.streaming.stream.status import closed_dates


@dataclass
class SupervisorCursor:
    """What the sensor remembers between ticks: the newest date partition already announced
    (or, before the first, `watch_from`: no earlier date can still close), and the health last
    recorded (its StreamHealth.state and when)."""

    closed_through: str | None = None
    watch_from: str | None = None
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
    return f"{stream_name(flow)}_supervisor"


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
    """Materializations for every date the stream has closed for good since the cursor's.

    The dates to ask Kafka about begin after the newest one announced; before the first, at the
    cursor's `watch_from`, which the first tick takes from the table (its oldest date) and the
    clock (the oldest date still open now: a row still to come is of a date open when it is
    read). The table is read again only for the closed dates' figures."""
    at = datetime.fromtimestamp(now, UTC)
    progress = None
    if cursor.closed_through:
        first = date.fromisoformat(cursor.closed_through) + timedelta(days=1)
    elif cursor.watch_from:
        first = date.fromisoformat(cursor.watch_from)
    else:
        progress = table_progress(table_uri, flow)
        oldest = _oldest_row_date(flow, progress)
        first = flow.oldest_open_date(at)
        if oldest is not None:
            first = min(first, oldest)
        cursor.watch_from = first.isoformat()
    first = max(first, flow.first_date)
    if flow.closes_at(first) > at:
        return []  # no date can have closed: neither Kafka nor the table's log is read
    try:
        days = closed_dates(flow, kafka_conf, position, first, KAFKA_PROBE_TIMEOUT_S)
    except KafkaSourceError:
        return []  # the health observation reports Kafka's error; close on a later tick
    if not days:
        return []
    if progress is None:  # not read on this tick yet (or no table then)
        progress = table_progress(table_uri, flow)
    if not cursor.closed_through:  # nothing announced yet: the table's oldest date comes first
        oldest = _oldest_row_date(flow, progress)
        empty = [day for day in days if oldest is None or date.fromisoformat(day) < oldest]
        if empty:  # closed for good before the table's first row: never asked about again
            cursor.watch_from = (date.fromisoformat(empty[-1]) + timedelta(days=1)).isoformat()
        days = days[len(empty) :]
    if progress is None or not days:
        return []
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


def _oldest_row_date(flow: FlowSpec, progress: TableProgress | None) -> date | None:
    """The table's oldest date with rows, not before the flow's first date; None if none."""
    if progress is None or not progress.rows_by_date:
        return None
    return max(flow.first_date, date.fromisoformat(min(progress.rows_by_date)))
