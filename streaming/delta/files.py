"""Data files of a Delta table: written by Spark, described for a commit by delta-rs.

The JVM writes Parquet (write_data_files); the driver describes each file as a `DataFile` (size,
partition value, Delta statistics from the Parquet footer), which delta/commit.py commits.
"""

from __future__ import annotations

import datetime as dt
import json
import math
import time
import uuid
from dataclasses import dataclass, field
from typing import Any
from urllib.parse import quote, unquote

import pyarrow as pa
import pyarrow.compute as pc
import pyarrow.fs as pafs
import pyarrow.parquet as pq
from pyspark.sql import DataFrame

from tidelake.streaming.storage.location import filesystem

_STRING_STATS_MAX_LEN = 32  # Delta truncates longer strings; we skip them instead of guessing


@dataclass(frozen=True)
class DataFile:
    """One written Parquet file, as the driver needs it for an AddAction."""

    path: str  # relative to the table root
    size: int
    partition_values: dict[str, str]
    modification_time: int  # ms
    num_records: int
    stats: str


@dataclass
class _FileStats:
    rows: int = 0
    mins: dict[str, Any] = field(default_factory=dict)
    maxs: dict[str, Any] = field(default_factory=dict)
    nulls: dict[str, int] = field(default_factory=dict)

    def include(self, name: str, lo: Any, hi: Any) -> None:
        """Widen a column's bounds by one row group's; some values make them unknown."""
        if self.mins.get(name) is _UNKNOWN:
            return
        if isinstance(lo, float) and not (math.isfinite(lo) and math.isfinite(hi)):
            self.mins[name] = self.maxs[name] = _UNKNOWN  # JSON has no inf/NaN
            return
        if isinstance(lo, str) and max(len(lo), len(hi)) > _STRING_STATS_MAX_LEN:
            self.mins[name] = self.maxs[name] = _UNKNOWN
            return
        if isinstance(lo, bytes):
            self.mins[name] = self.maxs[name] = _UNKNOWN
            return
        self.mins[name] = lo if name not in self.mins else min(self.mins[name], lo)
        self.maxs[name] = hi if name not in self.maxs else max(self.maxs[name], hi)

    def to_json(self) -> str:
        known = [k for k, v in self.mins.items() if v is not _UNKNOWN]
        return json.dumps(
            {
                "numRecords": self.rows,
                "minValues": {k: _stat_value(self.mins[k], up=False) for k in known},
                "maxValues": {k: _stat_value(self.maxs[k], up=True) for k in known},
                "nullCount": self.nulls,
            },
            allow_nan=False,
        )


_UNKNOWN = object()


def _has_min_max(t: pa.DataType) -> bool:
    return bool(
        pa.types.is_integer(t)
        or pa.types.is_floating(t)
        or pa.types.is_string(t)
        or pa.types.is_timestamp(t)
        or pa.types.is_date(t)
    )


def _stat_value(value: Any, *, up: bool) -> Any:
    """JSON form of a statistic; timestamps at ms precision, widened so they stay bounds. A
    timestamp without a zone (timestampNtz: the footer's statistics come naive) is written as
    it is, never read as this machine's local time."""
    if isinstance(value, dt.datetime):
        ms = value.replace(microsecond=value.microsecond // 1000 * 1000)
        if up and ms != value:
            ms += dt.timedelta(milliseconds=1)
        if ms.tzinfo is None:
            return ms.isoformat(timespec="milliseconds")
        return ms.astimezone(dt.UTC).replace(tzinfo=None).isoformat(timespec="milliseconds") + "Z"
    if isinstance(value, dt.date):
        return value.isoformat()
    return value


def write_data_files(
    rows: DataFrame, table_uri: str, partition_column: str, label: str
) -> list[DataFile]:
    """Write rows as Parquet data files of the table, with Spark (on the JVM), uncommitted.

    Spark writes into a fresh staging folder of the table (its own commit protocol makes a
    failed task's output vanish); the files are then moved into their partition folders and
    described from their Parquet footers. Nothing is visible to readers until a Delta commit
    names the files; an uncommitted file (a crash before the commit) is left for vacuum.
    """
    fs, root = filesystem(table_uri)
    staging = f"{STAGING_FOLDER}/{label}-{uuid.uuid4().hex[:12]}"
    (
        rows.write.mode("errorifexists")
        .partitionBy(partition_column)
        .option("compression", "zstd")
        .parquet(f"{table_uri.rstrip('/')}/{staging}")
    )
    files: list[DataFile] = []
    try:
        for info in fs.get_file_info(pafs.FileSelector(f"{root}/{staging}", recursive=True)):
            relative = info.path[len(f"{root}/{staging}/") :]
            if info.type != pafs.FileType.File or not relative.endswith(".parquet"):
                continue
            if any(part.startswith((".", "_")) for part in relative.split("/")):
                continue
            folder = relative.rsplit("/", 1)[0]
            fs.create_dir(f"{root}/{folder}", recursive=True)
            fs.move(info.path, f"{root}/{relative}")
            described = describe_file(fs, root, relative, partition_column)
            if described.num_records > 0:
                files.append(described)
    finally:
        fs.delete_dir_contents(f"{root}/{staging}", missing_dir_ok=True)
        fs.delete_dir(f"{root}/{staging}")
    return files


def write_arrow_files(
    rows: pa.Table, table_uri: str, partition_column: str, label: str
) -> list[DataFile]:
    """Write a few rows that already sit in the driver as data files of the table (one per
    partition value, Spark's `name=value` folders), uncommitted, like write_data_files."""
    fs, root = filesystem(table_uri)
    files: list[DataFile] = []
    for value in pc.unique(rows[partition_column]).to_pylist():
        part = rows.filter(pc.equal(rows[partition_column], value)).drop_columns(partition_column)
        folder = f"{partition_column}={_partition_folder_value(value)}"
        relative = f"{folder}/part-{label}-{uuid.uuid4().hex}.zstd.parquet"
        fs.create_dir(f"{root}/{folder}", recursive=True)
        pq.write_table(part, f"{root}/{relative}", filesystem=fs, compression="zstd")
        files.append(describe_file(fs, root, relative, partition_column))
    return files


def _partition_folder_value(value: Any) -> str:
    if value is None:
        raise ValueError("a row without a partition value cannot be written")
    return quote(value.isoformat() if isinstance(value, dt.date) else str(value), safe="")


STAGING_FOLDER = "_tidelake_staging"
"""Where Spark writes data files before they move into the table's partition folders."""


def describe_file(fs: pafs.FileSystem, root: str, relative: str, partition_column: str) -> DataFile:
    """A data file of the table as a Delta add action needs it: size, partition value (from its
    folder, Spark's `name=value` layout) and statistics (from its Parquet footer)."""
    folder, _ = relative.rsplit("/", 1)
    name, _, value = folder.rpartition("/")[2].partition("=")
    if name != partition_column:
        raise ValueError(f"{relative} is not in a {partition_column}=<value> folder")
    info = fs.get_file_info(f"{root}/{relative}")
    metadata = pq.read_metadata(f"{root}/{relative}", filesystem=fs)
    stats = _footer_stats(metadata)
    return DataFile(
        path=relative,
        size=info.size,
        partition_values={partition_column: unquote(value)},
        modification_time=int(time.time() * 1000),
        num_records=stats.rows,
        stats=stats.to_json(),
    )


def _footer_stats(metadata: pq.FileMetaData) -> _FileStats:
    """Delta statistics from the row groups' column statistics (no data is read)."""
    stats = _FileStats(rows=metadata.num_rows)
    schema = metadata.schema.to_arrow_schema()
    for i in range(metadata.num_row_groups):
        group = metadata.row_group(i)
        for j in range(group.num_columns):
            column = group.column(j)
            name = column.path_in_schema
            if "." in name:
                continue  # a leaf of a struct or list column: Delta stats are optional, skip
            column_stats = column.statistics
            nulls = column_stats.null_count if column_stats is not None else None
            if nulls is None:
                stats.nulls[name] = _UNKNOWN_COUNT
            elif stats.nulls.get(name) is not _UNKNOWN_COUNT:
                stats.nulls[name] = stats.nulls.get(name, 0) + nulls
            known = column_stats is not None and column_stats.has_min_max
            if not known or not _has_min_max(schema.field(name).type):
                if known or group.num_rows > (nulls or 0):
                    stats.mins[name] = stats.maxs[name] = _UNKNOWN
                continue
            stats.include(name, column_stats.min, column_stats.max)
    stats.nulls = {k: v for k, v in stats.nulls.items() if v is not _UNKNOWN_COUNT}
    return stats


_UNKNOWN_COUNT = -1
