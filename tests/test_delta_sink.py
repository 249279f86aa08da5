"""The Delta sink without Spark: Parquet files with stats (delta_files), validated idempotent
commits (delta_commit), read back with delta-rs and DuckDB."""

from __future__ import annotations

import dataclasses
import json
import os
import time
from datetime import UTC, date, datetime
from pathlib import Path

import pyarrow as pa
import pyarrow.parquet as pq
import pytest
from deltalake import DeltaTable
from lake_readers import delta_version, duckdb_query, read_delta

from tidelake.streaming.delta_commit import (
    DeltaCommitError,
    commit_files,
    ensure_table,
    validate_files,
)
from tidelake.streaming.delta_files import DataFile, PartitionedParquetWriter

UTC_US = pa.timestamp("us", tz="UTC")
SCHEMA = pa.schema(
    [
        pa.field("id", pa.int64()),
        pa.field("name", pa.string()),
        pa.field("amount", pa.float64()),
        pa.field("ts", UTC_US),
        pa.field("date", pa.date32()),
    ]
)
PARTITION_BY = ["date"]
D1, D2 = date(2024, 6, 1), date(2024, 6, 2)


def ts(day: date, hour: int, micros: int, minute: int = 0, second: int = 0) -> datetime:
    return datetime(day.year, day.month, day.day, hour, minute, second, micros, tzinfo=UTC)


ROWS = [
    {"id": 3, "name": "carol", "amount": 7.5, "ts": ts(D1, 10, 123_999), "date": D1},
    {"id": 1, "name": None, "amount": -2.0, "ts": ts(D1, 11, 456_001), "date": D1},
    {"id": 2, "name": "bob", "amount": 1.25, "ts": ts(D1, 9, 500_000), "date": D1},
    {"id": 10, "name": "zed", "amount": 3.0, "ts": ts(D2, 0, 0), "date": D2},
    {"id": 11, "name": "amy", "amount": None, "ts": ts(D2, 23, 999_999, 59, 59), "date": D2},
]


def table_of(rows: list[dict]) -> pa.Table:
    return pa.Table.from_pylist(rows, schema=SCHEMA)


def write_files(uri: Path | str, rows: list[dict], prefix: str = "part-000000-0000-0") -> list:
    writer = PartitionedParquetWriter(str(uri), SCHEMA, PARTITION_BY, file_prefix=prefix)
    writer.write(table_of(rows))
    return sorted(writer.close(), key=lambda f: f.path)


def commit(uri: Path, files: list[DataFile], version: int, app_id: str = "tidelake-q1"):
    return commit_files(
        str(uri), files, schema=SCHEMA, partition_by=PARTITION_BY, app_id=app_id, version=version
    )


def sorted_rows(table: pa.Table) -> list[dict]:
    return sorted(table.select(SCHEMA.names).to_pylist(), key=lambda r: r["id"])


# ---------------------------------------------------------------------------- data files


def test_writer_makes_one_file_per_date_with_exact_metadata(tmp_path):
    before_ms = int(time.time() * 1000)
    files = write_files(tmp_path / "t", ROWS)
    assert [f.partition_values for f in files] == [{"date": "2024-06-01"}, {"date": "2024-06-02"}]
    assert [f.num_records for f in files] == [3, 2]
    for f in files:
        assert f.path.startswith(f"date={f.partition_values['date']}/part-000000-0000-0-")
        assert f.path.endswith(".zstd.parquet")
        on_disk = tmp_path / "t" / f.path
        assert f.size == os.path.getsize(on_disk)
        assert before_ms - 1000 <= f.modification_time <= int(time.time() * 1000) + 1000
        parquet = pq.ParquetFile(on_disk)
        assert parquet.schema_arrow.names == ["id", "name", "amount", "ts"]  # no partition column
        assert parquet.schema_arrow.field("ts").type == UTC_US
        assert parquet.metadata.num_rows == f.num_records


def test_stats_have_min_max_nulls_and_ms_timestamps_widened_outwards(tmp_path):
    first, second = write_files(tmp_path / "t", ROWS)
    assert json.loads(first.stats) == {
        "numRecords": 3,
        "minValues": {"id": 1, "name": "bob", "amount": -2.0, "ts": "2024-06-01T09:00:00.500Z"},
        "maxValues": {
            "id": 3,
            "name": "carol",
            "amount": 7.5,
            "ts": "2024-06-01T11:00:00.457Z",  # .456001 rounded up: still an upper bound
        },
        "nullCount": {"id": 0, "name": 1, "amount": 0, "ts": 0},
    }
    stats = json.loads(second.stats)
    assert stats["minValues"]["ts"] == "2024-06-02T00:00:00.000Z"
    assert stats["maxValues"]["ts"] == "2024-06-03T00:00:00.000Z"  # 23:59:59.999999 rounded up
    assert stats["nullCount"]["amount"] == 1
    assert stats["minValues"]["amount"] == stats["maxValues"]["amount"] == 3.0


def test_stats_across_several_writes_and_long_strings(tmp_path):
    writer = PartitionedParquetWriter(str(tmp_path / "t"), SCHEMA, PARTITION_BY, file_prefix="p")
    writer.write(table_of([ROWS[0]]))
    writer.write(table_of([{**ROWS[1], "name": "x" * 40}]))  # too long for string stats
    writer.write(table_of([ROWS[2]]))
    (only,) = writer.close()
    stats = json.loads(only.stats)
    assert stats["numRecords"] == only.num_records == 3
    assert (stats["minValues"]["id"], stats["maxValues"]["id"]) == (1, 3)
    assert "name" not in stats["minValues"] and "name" not in stats["maxValues"]
    assert stats["nullCount"]["name"] == 0


def test_abort_removes_written_files(tmp_path):
    writer = PartitionedParquetWriter(str(tmp_path / "t"), SCHEMA, PARTITION_BY, file_prefix="p")
    writer.write(table_of(ROWS))
    writer.abort()
    assert not [p for p in (tmp_path / "t").rglob("*.parquet")]


def test_unpartitioned_writer_puts_files_at_the_root(tmp_path):
    writer = PartitionedParquetWriter(str(tmp_path / "t"), SCHEMA, [], file_prefix="p")
    writer.write(table_of(ROWS))
    (only,) = writer.close()
    assert "/" not in only.path and only.partition_values == {} and only.num_records == 5


def test_stats_are_strict_json_with_infinite_or_nan_floats(tmp_path):
    rows = [{**ROWS[0], "amount": float("inf")}, {**ROWS[3], "amount": float("nan")}]
    for f in write_files(tmp_path / "t", rows):

        def refuse(token: str) -> None:
            raise ValueError(f"non-JSON token {token} in stats")

        json.loads(f.stats, parse_constant=refuse)


# ------------------------------------------------------------------------------- commits


def test_commit_appends_once_and_reads_back(tmp_path):
    uri = tmp_path / "t"
    files = write_files(uri, ROWS)
    result = commit(uri, files, version=0)
    assert (result.version, result.files, result.rows, result.skipped) == (1, 2, 5, False)
    assert delta_version(uri) == 1  # 0 = table creation, 1 = the batch
    table = DeltaTable(str(uri))
    assert table.metadata().partition_columns == ["date"]
    assert table.transaction_version("tidelake-q1") == 0
    back = read_delta(uri)
    assert back.schema.field("date").type == pa.date32()
    assert back.schema.field("ts").type == UTC_US
    assert sorted_rows(back) == sorted(ROWS, key=lambda r: r["id"])
    # delta-rs parsed our stats: per-file record counts and bounds are known
    actions = pa.table(table.get_add_actions(flatten=True)).to_pylist()
    by_path = {a["path"]: a for a in actions}
    assert {p: a["num_records"] for p, a in by_path.items()} == {files[0].path: 3, files[1].path: 2}
    assert (by_path[files[0].path]["min.id"], by_path[files[0].path]["max.id"]) == (1, 3)
    # an independent reader agrees
    assert duckdb_query(
        f"select date, count(*), sum(id) from delta_scan('{uri}') group by date order by date"
    ) == [(D1, 3, 6), (D2, 2, 21)]


def test_replaying_a_batch_commits_nothing(tmp_path):
    uri = tmp_path / "t"
    first = write_files(uri, ROWS)
    commit(uri, first, version=0)
    # a restarted query re-runs batch 0: new files (new names), same (app_id, version)
    again = write_files(uri, ROWS, prefix="part-000000-0000-1")
    result = commit(uri, again, version=0)
    assert result.skipped and result.version is None
    assert delta_version(uri) == 1
    assert read_delta(uri).num_rows == len(ROWS)


def test_lower_versions_are_skipped_and_higher_ones_commit(tmp_path):
    uri = tmp_path / "t"
    commit(uri, write_files(uri, ROWS[:1], prefix="b5"), version=5)
    assert commit(uri, write_files(uri, ROWS[1:2], prefix="b3"), version=3).skipped
    assert delta_version(uri) == 1
    assert commit(uri, write_files(uri, ROWS[2:3], prefix="b6"), version=6).version == 2
    # another query (another app id) has its own sequence
    assert commit(uri, write_files(uri, ROWS[3:], prefix="q2"), version=0, app_id="q2").version == 3
    table = DeltaTable(str(uri))
    assert table.transaction_version("tidelake-q1") == 6
    assert table.transaction_version("q2") == 0
    assert sorted(read_delta(uri).column("id").to_pylist()) == [2, 3, 10, 11]


def _rejections(uri: Path, good: DataFile) -> list[tuple[str, list[DataFile], str]]:
    (uri / "outside.parquet").write_bytes(b"x")
    return [
        (
            "missing file",
            [dataclasses.replace(good, path="date=2024-06-01/nope.parquet")],
            "does not exist",
        ),
        ("wrong size", [dataclasses.replace(good, size=good.size + 1)], "expected"),
        ("parent path", [dataclasses.replace(good, path="../x.parquet")], "is not inside"),
        (
            "sneaky parent path",
            [dataclasses.replace(good, path="date=2024-06-01/../../outside.parquet")],
            "is not inside",
        ),
        ("absolute path", [dataclasses.replace(good, path=str(uri / good.path))], "is not inside"),
        ("url path", [dataclasses.replace(good, path="file:///tmp/x.parquet")], "is not inside"),
        (
            "other partition value",
            [dataclasses.replace(good, partition_values={"date": "2024-06-02"})],
            "not in its partition folder",
        ),
        (
            "no partition value",
            [dataclasses.replace(good, partition_values={})],
            "partition values for []",
        ),
        (
            "extra partition value",
            [dataclasses.replace(good, partition_values={"date": "2024-06-01", "id": "1"})],
            "partition values for ['date', 'id']",
        ),
        ("duplicate path", [good, good], "listed twice"),
        ("no rows", [dataclasses.replace(good, num_records=0)], "holds no rows"),
    ]


def test_rejected_files_leave_the_table_unchanged(tmp_path):
    uri = tmp_path / "t"
    commit(uri, write_files(uri, ROWS[:1], prefix="b0"), version=0)
    before = sorted_rows(read_delta(uri))
    good, _ = write_files(uri, ROWS, prefix="b1")  # a real, uncommitted file of 2024-06-01
    for name, files, message in _rejections(uri, good):
        with pytest.raises(DeltaCommitError) as e:
            commit(uri, files, version=1)
        assert message in str(e.value), name
        with pytest.raises(DeltaCommitError):
            validate_files(str(uri), files, PARTITION_BY)
        # a bad file poisons the whole batch: the good file next to it is not committed either
        with pytest.raises(DeltaCommitError):
            commit(uri, [*files, good], version=1)
        assert delta_version(uri) == 1, name
        assert DeltaTable(str(uri)).transaction_version("tidelake-q1") == 0, name
        assert sorted_rows(read_delta(uri)) == before, name
    # the batch still commits once it is described correctly
    assert commit(uri, [good], version=1).version == 2


def test_a_rejected_first_batch_creates_no_table(tmp_path):
    uri = tmp_path / "t"
    (good,) = write_files(uri, ROWS[:1])
    with pytest.raises(DeltaCommitError, match="expected"):
        commit(uri, [dataclasses.replace(good, size=1)], version=0)
    assert not (uri / "_delta_log").exists()


def test_ensure_table_creates_then_reopens_and_rejects_a_partitioning_mismatch(tmp_path):
    uri = str(tmp_path / "t")
    table = ensure_table(uri, SCHEMA, PARTITION_BY)
    assert table.version() == 0 and table.metadata().partition_columns == ["date"]
    assert ensure_table(uri, SCHEMA, PARTITION_BY).version() == 0  # idempotent
    with pytest.raises(DeltaCommitError, match=r"partitioned by \['date'\].*writes \[\]"):
        ensure_table(uri, SCHEMA, [])
    with pytest.raises(DeltaCommitError, match=r"writes \['name'\]"):
        ensure_table(uri, SCHEMA, ["name"])
    wider = SCHEMA.append(pa.field("extra", pa.string()))
    with pytest.raises(DeltaCommitError, match=r"lacks columns \['extra'\]"):
        ensure_table(uri, wider, PARTITION_BY)
    assert DeltaTable(uri).version() == 0


def test_commit_refuses_a_partitioning_mismatch(tmp_path):
    uri = tmp_path / "t"
    files = write_files(uri, ROWS)
    commit(uri, files[:1], version=0)
    writer = PartitionedParquetWriter(str(uri), SCHEMA, [], file_prefix="flat")
    writer.write(table_of(ROWS[3:]))
    flat = writer.close()
    with pytest.raises(DeltaCommitError, match="partitioned by"):
        commit_files(
            str(uri), flat, schema=SCHEMA, partition_by=[], app_id="tidelake-q1", version=1
        )
    assert delta_version(uri) == 1 and read_delta(uri).num_rows == 3


def test_a_column_type_mismatch_is_refused(tmp_path):
    uri = str(tmp_path / "t")
    narrow = pa.schema([pa.field("id", pa.int32()), pa.field("name", pa.string())])
    wide = pa.schema([pa.field("id", pa.int64()), pa.field("name", pa.string())])
    ensure_table(uri, narrow, [])
    with pytest.raises(DeltaCommitError, match="id"):
        ensure_table(uri, wide, [])
