"""The deletes Dagster has no API for, behind one check of the storage they were written for.

Dagster 1.13 deletes a run and its events (`delete_run`) but has no way to delete events,
observations or check executions by age. Those deletes name Dagster's tables and columns
themselves, so `EventLogTables.of` refuses, in one line, a Dagster version or an event log schema
(its alembic revision) they were not tested with: a renamed column or a moved row would
otherwise make them delete the wrong rows, silently. The purge then does what Dagster's API can
(retention.py) and says which deletes it skipped.

Facts of the tested storage they rely on (Dagster 1.13.27, event log revision 29b539ebc72a):
- event timestamps are TIMESTAMP columns without a zone holding the UTC wall time
  (SqlEventLogStorage._event_insert_timestamp; its EventRecordsFilter compares the same way):
  `stored_time` converts a Unix time to that;
- on SQLite (`is_run_sharded`) a run's events live in a file of their own and the index mirrors
  the asset events; events recorded outside any run have the run id "" (RUNLESS_RUN_ID);
- a check execution's `evaluation_event_timestamp` is set when it is planned and when it is
  evaluated; its `evaluation_event_storage_id` is an id of the index's event_logs.

Every delete goes in batches of BATCH_ROWS rows, each its own transaction (PostgreSQL's storage
commits each statement; SQLite's each connection), so that no lock outlives one batch.
"""

from collections.abc import Callable, Collection, Iterable
from contextlib import AbstractContextManager
from dataclasses import dataclass
from datetime import UTC, datetime
from typing import Any

import dagster as dg
import sqlalchemy as sa

from tidelake.streaming.errors import SetupError

TESTED_DAGSTER = "1.13.27"
"""The Dagster release the deletes were tested on: pyproject.toml pins it
(tests/unit/test_history_retention_pin.py)."""
TESTED_REVISIONS = {"sqlite": "29b539ebc72a", "postgresql": "29b539ebc72a"}
"""The event log's alembic revision per database the deletes were tested on."""
RUNLESS_RUN_ID = ""
BATCH_ROWS = 1_000
"""Rows one delete transaction removes at most: ~10 ms on PostgreSQL, far below a second."""
COMPLETED = ("SUCCEEDED", "FAILED")
"""asset_check_executions' statuses of an execution that ended with a verdict (not PLANNED)."""

EVENTS = sa.table(
    "event_logs",
    sa.column("id", sa.BigInteger),
    sa.column("run_id", sa.String),
    sa.column("dagster_event_type", sa.String),
    sa.column("asset_key", sa.Text),
    sa.column("timestamp", sa.DateTime),
)
EVENT_TAGS = sa.table("asset_event_tags", sa.column("event_id", sa.BigInteger))
CHECK_EXECUTIONS = sa.table(
    "asset_check_executions",
    sa.column("id", sa.BigInteger),
    sa.column("asset_key", sa.Text),
    sa.column("check_name", sa.Text),
    sa.column("partition", sa.Text),
    sa.column("run_id", sa.String),
    sa.column("execution_status", sa.String),
    sa.column("evaluation_event_timestamp", sa.DateTime),
    sa.column("evaluation_event_storage_id", sa.BigInteger),
)

SKIPPED = (
    "runs are purged through Dagster's API, the deletes of older events, observations and check "
    "executions are skipped until assets/history/event_log_tables.py is checked against it"
)


class UntestedStorageError(SetupError):
    """The event log is not one the deletes were tested on: they are skipped, not guessed at."""


def untested_dagster_warning(job: str) -> str | None:
    """What the code location says when it loads on a Dagster the deletes were not tested on
    (the event log's revision is checked when the job runs), None on the tested one."""
    if dg.__version__ == TESTED_DAGSTER:
        return None
    return (
        f"{job}: the history retention's deletes were tested on Dagster {TESTED_DAGSTER}, this "
        f"is Dagster {dg.__version__}: {SKIPPED}"
    )


Connect = Callable[[], AbstractContextManager[sa.Connection]]


def stored_time(unix_time: float) -> datetime:
    """A Unix time as Dagster's event log stores it: the UTC wall time, without a zone."""
    return datetime.fromtimestamp(unix_time, UTC).replace(tzinfo=None)


@dataclass(frozen=True)
class EventLogTables:
    """An instance's event log, checked to be one the deletes below were tested on."""

    storage: Any
    """The instance's SQL event log storage (its connections are what the deletes need)."""

    @classmethod
    def of(cls, instance: dg.DagsterInstance, job: str) -> "EventLogTables":
        """The instance's event log, or UntestedStorageError naming what differs from the
        tested storage (one line)."""
        storage = instance.event_log_storage
        if not hasattr(storage, "index_connection"):
            raise UntestedStorageError(
                f"{job}: Dagster's event log is {type(storage).__name__}; the history retention "
                "deletes from Dagster's SQL storage on SQLite or PostgreSQL only"
            )
        with storage.index_connection() as conn:
            dialect = conn.dialect.name
        tested = TESTED_REVISIONS.get(dialect)
        revision = (storage.alembic_version() or (None, None))[0] if tested else None
        if dg.__version__ != TESTED_DAGSTER or tested is None or revision != tested:
            on = ", ".join(f"{rev} on {name}" for name, rev in TESTED_REVISIONS.items())
            raise UntestedStorageError(
                f"{job}: the history retention's deletes were tested on Dagster {TESTED_DAGSTER}"
                f" with the event log at alembic revision {on}; this instance has Dagster "
                f"{dg.__version__}, its event log on {dialect} at revision {revision}: "
                f"{SKIPPED}"
            )
        return cls(storage)

    @property
    def run_sharded(self) -> bool:
        """SQLite's layout: each run's events in a file of their own, the index mirroring the
        asset events."""
        return bool(self.storage.is_run_sharded)

    def index(self) -> AbstractContextManager[sa.Connection]:
        """A transaction on the index: on PostgreSQL every event, on SQLite the asset events."""
        return self.storage.index_connection()

    def shard(self, run_id: str) -> Connect:
        """Transactions on a run's own events (SQLite only)."""
        return lambda: self.storage.run_connection(run_id)

    def kept_check_executions(self) -> list[tuple[int, str]]:
        """(id, run id) of the executions Dagster reads a check's status from: per check and
        partition the newest, and the newest that ended with a verdict (what it shows as the last
        result while a newer one is planned)."""
        executions = CHECK_EXECUTIONS.c
        group = (executions.asset_key, executions.check_name, executions.partition)
        newest = sa.select(sa.func.max(executions.id)).group_by(*group)
        completed = newest.where(executions.execution_status.in_(COMPLETED))
        query = sa.select(executions.id, executions.run_id).where(
            sa.or_(executions.id.in_(newest), executions.id.in_(completed))
        )
        with self.index() as conn:
            return [(i, run_id) for i, run_id in conn.execute(query)]

    def kept_evaluation_events(self) -> set[int]:
        """The index's events that the remaining check executions point to."""
        executions = CHECK_EXECUTIONS.c
        query = sa.select(executions.evaluation_event_storage_id).where(
            executions.evaluation_event_storage_id.is_not(None)
        )
        with self.index() as conn:
            return {i for (i,) in conn.execute(query)}

    def delete_check_executions(self, before: datetime, kept: Collection[int]) -> int:
        executions = CHECK_EXECUTIONS.c
        expired = (executions.evaluation_event_timestamp < before,)
        return _delete_batches(self.index, CHECK_EXECUTIONS, expired, kept)

    def delete_expired_events(
        self,
        connect: Connect,
        before: datetime,
        event_types: Iterable[str | None],
        kept: Collection[int] = (),
        tags: bool = True,
    ) -> int:
        """Events of `event_types` (None: log lines) older than `before`, but for `kept` and each
        asset's newest observation in that database; with `tags` (the index) their tags. One walk
        per type, on Dagster's (event type, id) index."""
        events = EVENTS.c
        with connect() as conn:
            newest: set[int] = set(conn.execute(_newest_observation_ids()).scalars())
        deleted = 0
        for event_type in event_types:
            of_type = (
                events.dagster_event_type.is_(None)
                if event_type is None
                else events.dagster_event_type == event_type
            )
            deleted += _delete_batches(
                connect, EVENTS, (of_type, events.timestamp < before), {*kept, *newest}, tags
            )
        return deleted

    def delete_run_events(self, run_id: str) -> int:
        """A run's events in the index (all of them on PostgreSQL), in batches, so that Dagster's
        `delete_run` after it deletes few."""
        return _delete_batches(self.index, EVENTS, (EVENTS.c.run_id == run_id,), (), tags=True)


def _newest_observation_ids() -> sa.Select[Any]:
    events = EVENTS.c
    return (
        sa.select(sa.func.max(events.id))
        .where(events.dagster_event_type == dg.DagsterEventType.ASSET_OBSERVATION.value)
        .group_by(events.asset_key)
    )


def _delete_batches(
    connect: Connect,
    table: sa.TableClause,
    where: Iterable[Any],
    kept: Collection[int],
    tags: bool = False,
) -> int:
    """Delete `table`'s rows that match `where` and are not `kept`, BATCH_ROWS at a time in id
    order, each batch its own transaction; with `tags`, the deleted events' tags too."""
    ids = table.c.id
    conditions = tuple(where)
    deleted, after = 0, None
    while True:
        query = sa.select(ids).where(*conditions).order_by(ids).limit(BATCH_ROWS)
        if after is not None:
            query = query.where(ids > after)
        with connect() as conn:
            batch = list(conn.execute(query).scalars())
            if not batch:
                return deleted
            after = batch[-1]
            doomed = [i for i in batch if i not in kept]
            if doomed:
                deleted += conn.execute(table.delete().where(ids.in_(doomed))).rowcount
                if tags:
                    conn.execute(EVENT_TAGS.delete().where(EVENT_TAGS.c.event_id.in_(doomed)))
