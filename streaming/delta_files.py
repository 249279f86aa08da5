"""Executor side of the Delta sink: Arrow batches to partitioned Parquet data files.

Executors never import `deltalake` (its tokio runtime panics in forked workers); they write
Parquet with pyarrow, compute Delta file statistics on the way, and describe each file as a
`DataFile` that the driver commits.
"""

from __future__ import annotations

import datetime as dt
import json
import math
import time
import uuid
from collections.abc import Sequence
from dataclasses import dataclass, field
from typing import Any

import pyarrow as pa
import pyarrow.compute as pc
import pyarrow.fs as pafs
import pyarrow.parquet as pq

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


def table_filesystem(table_uri: str) -> tuple[pafs.FileSystem, str]:
    """The pyarrow filesystem and root path of a table URI or local path."""
    if "://" in table_uri:
        return pafs.FileSystem.from_uri(table_uri)
    return pafs.LocalFileSystem(), str(table_uri)


@dataclass
class _FileStats:
    rows: int = 0
    mins: dict[str, Any] = field(default_factory=dict)
    maxs: dict[str, Any] = field(default_factory=dict)
    nulls: dict[str, int] = field(default_factory=dict)

    def add(self, table: pa.Table) -> None:
        self.rows += table.num_rows
        for name, column in zip(table.column_names, table.columns, strict=True):
            self.nulls[name] = self.nulls.get(name, 0) + column.null_count
            if not _has_min_max(column.type) or column.null_count == len(column):
                continue
            lo_hi = pc.min_max(column)
            lo, hi = lo_hi["min"].as_py(), lo_hi["max"].as_py()
            if isinstance(lo, float) and not (math.isfinite(lo) and math.isfinite(hi)):
                self.mins[name] = self.maxs[name] = _UNKNOWN  # JSON has no inf/NaN
                continue
            if pa.types.is_string(column.type) and (
                len(lo) > _STRING_STATS_MAX_LEN or len(hi) > _STRING_STATS_MAX_LEN
            ):
                self.mins[name] = self.maxs[name] = _UNKNOWN
                continue
            if self.mins.get(name) is not _UNKNOWN:
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
    return (
        pa.types.is_integer(t)
        or pa.types.is_floating(t)
        or pa.types.is_string(t)
        or pa.types.is_timestamp(t)
        or pa.types.is_date(t)
    )


def _stat_value(value: Any, *, up: bool) -> Any:
    """JSON form of a statistic; timestamps at ms precision, widened so they stay bounds."""
    if isinstance(value, dt.datetime):
        ms = value.replace(microsecond=value.microsecond // 1000 * 1000)
        if up and ms != value:
            ms += dt.timedelta(milliseconds=1)
        return ms.astimezone(dt.UTC).strftime("%Y-%m-%dT%H:%M:%S.%f")[:-3] + "Z"
    if isinstance(value, dt.date):
        return value.isoformat()
    return value


@dataclass
class _OpenFile:
    path: str
    writer: pq.ParquetWriter
    stats: _FileStats = field(default_factory=_FileStats)
    pending: list[pa.Table] = field(default_factory=list)
    pending_rows: int = 0


class PartitionedParquetWriter:
    """Writes one task's rows: one Parquet file per partition value, unique names.

    Names carry batch, task and attempt plus a random suffix, so retried or speculative tasks
    never overwrite each other; only files reported to the driver get committed. Spark hands
    the writer small Arrow batches; they are buffered into row groups of `row_group_rows`,
    since a row group per batch made Parquet writing the costliest step (measured with py-spy).
    """

    def __init__(
        self,
        table_uri: str,
        schema: pa.Schema,
        partition_by: Sequence[str],
        *,
        file_prefix: str,
        compression: str = "zstd",
        row_group_rows: int = 131_072,
    ):
        self._fs, self._root = table_filesystem(table_uri)
        self._partition_by = list(partition_by)
        self._data_schema = pa.schema([f for f in schema if f.name not in self._partition_by])
        self._prefix = file_prefix
        self._compression = compression
        self._row_group_rows = row_group_rows
        self._open: dict[tuple[str, ...], _OpenFile] = {}

    def write(self, table: pa.Table) -> None:
        if table.num_rows == 0:
            return
        if not self._partition_by:
            self._append((), table)
            return
        keys = table.select(self._partition_by)
        if all(pc.count_distinct(c).as_py() == 1 for c in keys.columns):
            self._append(tuple(_partition_string(c[0]) for c in keys.columns), table)
            return
        groups = keys.group_by(self._partition_by, use_threads=False).aggregate([])
        for row in groups.to_pylist():
            mask = None
            for name in self._partition_by:
                cond = pc.equal(table[name], pa.scalar(row[name], table.schema.field(name).type))
                mask = cond if mask is None else pc.and_(mask, cond)
            self._append(
                tuple(_partition_string(pa.scalar(row[n])) for n in self._partition_by),
                table.filter(mask),
            )

    def _append(self, values: tuple[str, ...], table: pa.Table) -> None:
        file = self._open.get(values) or self._new_file(values)
        file.pending.append(table.drop_columns(self._partition_by))
        file.pending_rows += table.num_rows
        if file.pending_rows >= self._row_group_rows:
            self._flush(file)

    def _new_file(self, values: tuple[str, ...]) -> _OpenFile:
        folder = "/".join(f"{k}={v}" for k, v in zip(self._partition_by, values, strict=True))
        name = f"{self._prefix}-{uuid.uuid4().hex[:12]}.{self._compression}.parquet"
        rel = f"{folder}/{name}" if folder else name
        self._fs.create_dir(f"{self._root}/{folder}" if folder else self._root, recursive=True)
        writer = pq.ParquetWriter(
            f"{self._root}/{rel}",
            self._data_schema,
            filesystem=self._fs,
            compression=self._compression,
            coerce_timestamps="us",
            allow_truncated_timestamps=False,
        )
        file = self._open[values] = _OpenFile(rel, writer)
        return file

    @staticmethod
    def _flush(file: _OpenFile) -> None:
        if not file.pending:
            return
        data = pa.concat_tables(file.pending).combine_chunks()
        file.writer.write_table(data, row_group_size=len(data))
        file.stats.add(data)
        file.pending, file.pending_rows = [], 0

    def close(self) -> list[DataFile]:
        files = []
        for values, file in self._open.items():
            self._flush(file)
            file.writer.close()
            info = self._fs.get_file_info(f"{self._root}/{file.path}")
            files.append(
                DataFile(
                    path=file.path,
                    size=info.size,
                    partition_values=dict(zip(self._partition_by, values, strict=True)),
                    modification_time=int(time.time() * 1000),
                    num_records=file.stats.rows,
                    stats=file.stats.to_json(),
                )
            )
        self._open.clear()
        return files

    def abort(self) -> None:
        for file in self._open.values():
            file.writer.close()
            self._fs.delete_file(f"{self._root}/{file.path}")
        self._open.clear()


def _partition_string(scalar: pa.Scalar) -> str:
    value = scalar.as_py()
    if isinstance(value, dt.date | dt.datetime):
        return value.isoformat()
    return str(value)
