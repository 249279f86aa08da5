"""Independent readers of the tables the engine writes: delta-rs and DuckDB, never Spark."""

from __future__ import annotations

from pathlib import Path

import duckdb
import pyarrow as pa
from deltalake import DeltaTable


def read_delta(path: str | Path) -> pa.Table:
    """The current snapshot of a Delta table, read with delta-rs."""
    return DeltaTable(str(path)).to_pyarrow_table()


def delta_version(path: str | Path) -> int:
    return DeltaTable(str(path)).version()


def duckdb_query(sql: str) -> list[tuple]:
    """Run SQL with DuckDB's delta extension loaded (delta_scan('<path>'))."""
    import duckdb_extension_delta

    extension = next(Path(duckdb_extension_delta.__file__).parent.rglob("*.duckdb_extension"))
    con = duckdb.connect()
    try:
        con.load_extension(str(extension))
        return con.sql(sql).fetchall()
    finally:
        con.close()


def poison_kind(error: str) -> str:
    """The demo producer's name for the kind of poison a quarantine reason reports:
    "undecodable", "too_late", "empty_value", or "missing_<field>"."""
    field, _, problem = error.partition(": ")
    if problem == "is required":
        return f"missing_{field}"
    return field.replace(" ", "_")
