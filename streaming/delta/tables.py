"""Opening a Delta table with delta-rs, wherever the lake is (storage/): the one way to do it."""

from __future__ import annotations

from typing import Any

import pyarrow as pa
from deltalake import DeltaTable, write_deltalake

from tidelake.streaming.storage.location import delta_storage_options


def open_table(
    table_uri: str, version: int | None = None, *, without_files: bool = False
) -> DeltaTable:
    """The table at a local path or s3:// URI (raises deltalake's TableNotFoundError if none).

    `without_files`: a snapshot that does not track the table's live files (metadata, schema,
    application transactions only). Appending through it costs the same whatever the table
    holds; with the file list, every commit and every incremental update rebuilt it (149 ms a
    commit at 20,000 live files against 22 ms at 100; docs/benchmarks.md, issue 38)."""
    return DeltaTable(
        table_uri,
        version=version,
        storage_options=delta_storage_options(table_uri),
        without_files=without_files,
    )


def write_table(table_uri: str, data: pa.Table, **options: Any) -> None:
    """deltalake.write_deltalake at this URI, with the store's settings."""
    write_deltalake(table_uri, data, storage_options=delta_storage_options(table_uri), **options)


def table_sql(table_uri: str) -> str:
    """The table as Spark SQL names a Delta table by its path (delta.`...`)."""
    return "delta.`" + table_uri.replace("`", "``") + "`"
