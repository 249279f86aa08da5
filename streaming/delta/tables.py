"""Opening a Delta table with delta-rs, wherever the lake is (storage/): the one way to do it."""

from __future__ import annotations

from typing import Any

import pyarrow as pa
from deltalake import DeltaTable, write_deltalake

from tidelake.streaming.storage.location import delta_storage_options


def open_table(table_uri: str, version: int | None = None) -> DeltaTable:
    """The table at a local path or s3:// URI (raises deltalake's TableNotFoundError if none)."""
    return DeltaTable(table_uri, version=version, storage_options=delta_storage_options(table_uri))


def write_table(table_uri: str, data: pa.Table, **options: Any) -> None:
    """deltalake.write_deltalake at this URI, with the store's settings."""
    write_deltalake(table_uri, data, storage_options=delta_storage_options(table_uri), **options)
