"""Dagster's storage measured: rows per table, bytes on disk, and the retention's purge timed
(its total, its longest statement and transaction)."""

from __future__ import annotations

import contextlib
import os
import sqlite3
import time
from pathlib import Path
from typing import Any

import dagster as dg
from sqlalchemy import create_engine, text

from tidelake.assets.history.retention import purge_dagster_history

from .profiles import DAY_S
from .statements import timed_statements

TABLES = ("event_logs", "asset_check_executions", "job_ticks", "runs", "asset_event_tags")


def _count(conn: Any, table: str) -> int:
    return int(conn.execute(text(f"select count(*) from {table}")).scalar_one())


def table_rows(instance: dg.DagsterInstance) -> dict[str, int]:
    """Rows per table; on SQLite, event_logs summed over the index and every run shard."""
    out: dict[str, int] = {}
    storage = instance.event_log_storage
    with storage.index_connection() as conn:  # type: ignore[attr-defined]
        for table in ("event_logs", "asset_check_executions", "asset_event_tags"):
            out[table] = _count(conn, table)
    if storage.is_run_sharded:
        # the index counted above; the runless events' shard is ".db": not matched by a glob
        folder = os.path.dirname(storage.path_for_shard(""))  # type: ignore[attr-defined]
        for shard in os.listdir(folder):
            if shard.endswith(".db") and shard != "index.db":
                with storage.run_connection(shard.removesuffix(".db")) as conn:  # type: ignore[attr-defined]
                    out["event_logs"] += _count(conn, "event_logs")
    with instance.schedule_storage.connect() as conn:  # type: ignore[union-attr]
        out["job_ticks"] = _count(conn, "job_ticks")
    out["runs"] = instance.get_runs_count()
    return out


def storage_bytes(instance: dg.DagsterInstance, home: Path) -> int:
    """Bytes on disk: the SQLite files in $DAGSTER_HOME, or the PostgreSQL database."""
    storage = instance.event_log_storage
    if storage.is_run_sharded:
        return sum(
            f.stat().st_size
            for folder in ("history", "schedules")
            for f in (home / folder).rglob("*")  # rglob sees the runless shard, .db
            if f.is_file()
        )
    with storage.index_connection() as conn:  # type: ignore[attr-defined]
        return int(conn.execute(text("select pg_database_size(current_database())")).scalar_one())


def purge_to_retention(instance: dg.DagsterInstance, home: Path, days: float) -> dict[str, Any]:
    """The daily retention job's purge (`purge_dagster_history`) at `days`, timed with its
    longest statement and transaction (what holds a lock longest), then the storage compacted
    (SQLite VACUUM, PostgreSQL VACUUM FULL) so that its bytes are those the history kept holds:
    in a running instance the purge frees pages that the next days' rows reuse, so the files
    stay at that size instead of shrinking to it."""
    before = {"rows": table_rows(instance), "bytes": storage_bytes(instance, home)}
    storage: Any = instance.event_log_storage
    postgres_url = None if storage.is_run_sharded else storage.postgres_url
    with timed_statements(postgres_url) as timings:
        started = time.perf_counter()
        purged = purge_dagster_history(instance, time.time() - days * DAY_S)
        purge_s = time.perf_counter() - started
    longest_s, longest = timings.longest()
    started = time.perf_counter()
    if postgres_url is None:
        for db_file in [
            f for folder in ("history", "schedules") for f in (home / folder).rglob("*.db")
        ]:
            with contextlib.closing(sqlite3.connect(db_file)) as conn:
                conn.execute("VACUUM")
    else:
        engine = create_engine(postgres_url, isolation_level="AUTOCOMMIT")
        with engine.connect() as conn:
            conn.execute(text("VACUUM FULL"))
        engine.dispose()
    return {
        "before_purge": before,
        "retention_days": days,
        "purge_s": purge_s,
        "statements": len(timings.statements),
        "longest_statement_s": longest_s,
        "longest_statement": longest,
        "longest_transaction_s": timings.longest_transaction_s,
        "vacuum_s": time.perf_counter() - started,
        "runs_deleted": purged.runs,
        "events_deleted": purged.events,
        "check_executions_deleted": purged.check_executions,
    }
