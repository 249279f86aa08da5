"""A compaction that loses a commit race plans again instead of failing its run: real delta-rs
tables on local disk, the other writer's commit placed between the compaction's read of the
table and its commit."""

from __future__ import annotations

import datetime as dt
from pathlib import Path

import pyarrow as pa
import pytest
from deltalake import DeltaTable, write_deltalake

from tidelake.streaming.delta import maintenance
from tidelake.streaming.delta.maintenance import compact_partition
from tidelake.streaming.delta.tables import open_table

SCHEMA = pa.schema([("n", pa.int64()), ("date", pa.date32())])
DAY = dt.date(2026, 11, 26)


def rows(*numbers: int) -> pa.Table:
    return pa.table({"n": list(numbers), "date": [DAY] * len(numbers)}, schema=SCHEMA)


def test_a_date_replaced_while_it_is_compacted_is_compacted_again_without_its_old_rows(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    uri = str(tmp_path / "events")
    for n in range(3):  # three small files of the date
        write_deltalake(uri, rows(n), partition_by=["date"], mode="append")
    opened: list[DeltaTable] = []

    def open_then_replace_the_date(table_uri: str) -> DeltaTable:
        """The compaction reads the table, then a backfill replaces the date before it commits."""
        table = open_table(table_uri)
        if not opened:
            write_deltalake(
                uri, rows(10, 11), mode="overwrite", predicate=f"date = '{DAY.isoformat()}'"
            )
            write_deltalake(uri, rows(12), mode="append")
        opened.append(table)
        return table

    monkeypatch.setattr(maintenance, "open_table", open_then_replace_the_date)

    result = compact_partition(uri, "date", DAY.isoformat())

    assert len(opened) == 2  # the first plan lost the race, the second committed
    assert (result.before.files, result.after.files) == (2, 1)
    table = open_table(uri)
    assert sorted(table.to_pyarrow_table()["n"].to_pylist()) == [10, 11, 12]
    assert len(table.file_uris()) == 1
