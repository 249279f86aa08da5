"""What a Delta table holds per date partition, from the log's statistics alone (no data file
is read): rows, files and bytes. The supervisor, the quality checks, compaction, the backfill and
dev-check read it."""

from __future__ import annotations

from collections import defaultdict
from dataclasses import dataclass, field
from datetime import date

import pyarrow as pa
from deltalake import DeltaTable
from deltalake.exceptions import TableNotFoundError

from tidelake.streaming.delta.tables import open_table
from tidelake.streaming.flow.spec import FlowSpec


@dataclass(frozen=True)
class TableProgress:
    """What a flow's Delta table holds, from the log's statistics only."""

    version: int
    rows_by_date: dict[str, int] = field(default_factory=dict)
    files_by_date: dict[str, int] = field(default_factory=dict)
    bytes_by_date: dict[str, int] = field(default_factory=dict)

    @property
    def rows(self) -> int:
        return sum(self.rows_by_date.values())

    @property
    def files(self) -> int:
        return sum(self.files_by_date.values())


def table_progress(table_uri: str, flow: FlowSpec) -> TableProgress | None:
    """Rows, files and bytes per date partition; None if the table does not exist."""
    try:
        table = open_table(table_uri)
    except TableNotFoundError:
        return None
    return snapshot_progress(table, flow.partition_column)


def snapshot_progress(table: DeltaTable, partition_column: str) -> TableProgress:
    """TableProgress of the snapshot `table` holds, from its add actions' statistics."""
    actions = pa.table(table.get_add_actions(flatten=True)).to_pydict()
    rows: dict[str, int] = defaultdict(int)
    files: dict[str, int] = defaultdict(int)
    sizes: dict[str, int] = defaultdict(int)
    for day, count, size in zip(
        actions.get(f"partition.{partition_column}", []),
        actions.get("num_records", []),
        actions.get("size_bytes", []),
        strict=True,
    ):
        key = _date_key(day)
        rows[key] += int(count or 0)
        files[key] += 1
        sizes[key] += int(size)
    return TableProgress(table.version(), dict(rows), dict(files), dict(sizes))


def date_files(table: DeltaTable, partition_column: str, day: date) -> frozenset[str]:
    """The paths of the data files of date `day` in the snapshot `table` holds."""
    actions = pa.table(table.get_add_actions(flatten=True)).to_pydict()
    return frozenset(
        path
        for path, value in zip(
            actions.get("path", []), actions.get(f"partition.{partition_column}", []), strict=True
        )
        if _date_key(value) == day.isoformat()
    )


def _date_key(value: object) -> str:
    """A date partition's value as the log's statistics give it, as `YYYY-MM-DD`."""
    return value.isoformat() if isinstance(value, date) else str(value)
