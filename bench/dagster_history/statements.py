"""The longest statement and the longest transaction while a block runs: what holds a lock
longest. Statements from SQLAlchemy's events on every engine (Dagster's storages create their
own); transactions on PostgreSQL from pg_stat_activity (its storage commits each statement, so
a transaction of several would show only there), on SQLite from the engines' begin and commit."""

from __future__ import annotations

import re
import threading
import time
from collections.abc import Iterator
from contextlib import contextmanager
from dataclasses import dataclass, field
from typing import Any

import sqlalchemy as sa

SAMPLE_S = 0.02
PARAMETERS = re.compile(r"\(([^()]*,){3,}[^()]*\)")
"""A statement's long list of parameters (a batch's ids), shown as (...)."""
OPEN_TRANSACTIONS = sa.text(
    "select coalesce(max(extract(epoch from clock_timestamp() - xact_start)), 0) "
    "from pg_stat_activity where datname = current_database() and pid <> pg_backend_pid() "
    "and backend_type = 'client backend' and state <> 'idle' and xact_start is not null"
)
"""The age of the oldest open transaction of another client (autovacuum's are not the purge's)."""


@dataclass
class Timings:
    statements: list[tuple[float, str]] = field(default_factory=list)
    longest_transaction_s: float = 0.0

    def longest(self) -> tuple[float, str]:
        return max(self.statements, default=(0.0, ""))


@contextmanager
def timed_statements(postgres_url: str | None) -> Iterator[Timings]:
    timings = Timings()
    started: dict[int, float] = {}
    began: dict[int, float] = {}
    sampling = (
        None
        if postgres_url is None
        else sa.create_engine(postgres_url, isolation_level="AUTOCOMMIT", poolclass=sa.NullPool)
    )

    def before(conn: Any, cursor: Any, statement: str, *_: Any) -> None:
        if conn.engine is not sampling:  # the sampler's own queries are not timed
            started[id(cursor)] = time.perf_counter()

    def after(conn: Any, cursor: Any, statement: str, *_: Any) -> None:
        if (t0 := started.pop(id(cursor), None)) is not None:
            words = PARAMETERS.sub("(...)", " ".join(statement.split()))[:160]
            timings.statements.append((time.perf_counter() - t0, words))

    def begin(conn: Any) -> None:
        began[id(conn)] = time.perf_counter()

    def end(conn: Any) -> None:
        if (t0 := began.pop(id(conn), None)) is not None:
            span = time.perf_counter() - t0
            timings.longest_transaction_s = max(timings.longest_transaction_s, span)

    hooks: list[tuple[str, Any]] = [
        ("before_cursor_execute", before),
        ("after_cursor_execute", after),
    ]
    if postgres_url is None:
        hooks += [("begin", begin), ("commit", end), ("rollback", end)]
    for name, hook in hooks:
        sa.event.listen(sa.engine.Engine, name, hook)
    stop = threading.Event()
    sampler = None
    if sampling is not None:
        connection = sampling.connect()

        def sample() -> None:
            while not stop.is_set():
                age = float(connection.execute(OPEN_TRANSACTIONS).scalar_one())
                timings.longest_transaction_s = max(timings.longest_transaction_s, age)
                stop.wait(SAMPLE_S)

        sampler = threading.Thread(target=sample, name="pg-transactions", daemon=True)
        sampler.start()
    try:
        yield timings
    finally:
        stop.set()
        if sampler is not None:
            sampler.join()
            connection.close()
            sampling.dispose()
        for name, hook in hooks:
            sa.event.remove(sa.engine.Engine, name, hook)
