"""Independent readers of the tables the engine writes: delta-rs, DuckDB, and delta-spark.

delta-rs and DuckDB read a local path or an s3:// URI; on S3 with the standard AWS variables (the
session's S3 server sets them), DuckDB through its httpfs extension's S3 secret. delta-spark,
Delta's reference implementation, reads in the test's own SparkSession (`spark` fixture), never
in the session of the stream it judges.
"""

from __future__ import annotations

from collections.abc import Iterator
from contextlib import contextmanager
from pathlib import Path
from typing import Any

import duckdb
import pyarrow as pa
from deltalake import DeltaTable

from tidelake.streaming.storage.location import delta_storage_options
from tidelake.streaming.storage.s3_settings import s3_settings


def read_delta(path: str | Path, version: int | None = None) -> pa.Table:
    """A Delta table's current snapshot (or the given version), read with delta-rs."""
    return _table(path, version).to_pyarrow_table()


def read_delta_spark(spark: Any, path: str | Path, *columns: str, **options: str) -> pa.Table:
    """A Delta table (those columns, default all) as delta-spark reads it in `spark`, with read
    options such as versionAsOf."""
    frame = spark.read.format("delta").options(**options).load(str(path))
    return (frame.select(*columns) if columns else frame).toArrow()


def delta_version(path: str | Path) -> int:
    return _table(path).version()


def delta_properties(path: str | Path) -> dict[str, str]:
    """The table's properties (the metaData action's configuration)."""
    return dict(_table(path).metadata().configuration)


def rows_added_by_version(path: str | Path) -> list[int]:
    """How many rows each version of an append-only table added, from version 0 on."""
    counts = [read_delta(path, v).num_rows for v in range(delta_version(path) + 1)]
    return [now - before for before, now in zip([0, *counts], counts, strict=False)]


def files_by_date(path: str | Path, column: str = "date") -> dict[str, int]:
    """Live data files of each date partition in the current snapshot."""
    dates = pa.table(_table(path).get_add_actions(flatten=True))[f"partition.{column}"]
    counts: dict[str, int] = {}
    for day in dates.to_pylist():
        counts[str(day)] = counts.get(str(day), 0) + 1
    return counts


def rows_by_date(path: str | Path, column: str = "date") -> dict[str, int]:
    """Rows of each date partition, counted by DuckDB."""
    rows = duckdb_query(f"SELECT {column}::VARCHAR, count(*) FROM delta_scan('{path}') GROUP BY 1")
    return dict(rows)


def _table(path: str | Path, version: int | None = None) -> DeltaTable:
    return DeltaTable(str(path), version=version, storage_options=delta_storage_options(str(path)))


def duckdb_query(sql: str) -> list[tuple]:
    """Run SQL with DuckDB's delta extension loaded (delta_scan('<path or s3 uri>'))."""
    with _duckdb() as con:
        return con.sql(sql).fetchall()


def read_delta_duckdb(path: str | Path) -> pa.Table:
    """A Delta table's current snapshot as DuckDB's delta extension (delta-kernel-rs) reads it:
    the independent reader of tables with deletion vectors, which delta-rs 1.6 cannot read."""
    with _duckdb() as con:
        return con.sql(f"SELECT * FROM delta_scan('{path}')").to_arrow_table()


@contextmanager
def _duckdb() -> Iterator[duckdb.DuckDBPyConnection]:
    import duckdb_extension_delta
    import duckdb_extension_httpfs

    con = duckdb.connect()
    try:
        for package in (duckdb_extension_httpfs, duckdb_extension_delta):
            con.load_extension(str(next(Path(package.__file__).parent.rglob("*.duckdb_extension"))))
        s3 = s3_settings()
        if s3.endpoint_url and s3.access_key_id and s3.secret_access_key:
            con.execute(
                "CREATE SECRET lake (TYPE s3, KEY_ID ?, SECRET ?, REGION ?, ENDPOINT ?, "
                "URL_STYLE 'path', USE_SSL ?)",
                [
                    s3.access_key_id,
                    s3.secret_access_key.get_secret_value(),
                    s3.region or "us-east-1",
                    s3.endpoint_url.split("://", 1)[1],
                    not s3.endpoint_is_plain_http,
                ],
            )
        yield con
    finally:
        con.close()


def poison_kind(error: str) -> str:
    """The demo producer's name for the kind of poison a quarantine reason reports:
    "undecodable", "too_late", "empty_value", or "missing_<field>"."""
    field, _, problem = error.partition(": ")
    if problem == "is required":
        return f"missing_{field}"
    return field.replace(" ", "_")
