"""A data file's Delta statistics from its Parquet footer (delta/files.py), on a machine whose
zone is not UTC: timestamps with and without a zone keep their values, read back by delta-rs."""

from __future__ import annotations

import datetime as dt
import json
import time
from collections.abc import Iterator
from pathlib import Path

import pyarrow as pa
import pytest

from tidelake.streaming.delta.commit import commit_files
from tidelake.streaming.delta.files import write_arrow_files
from tidelake.streaming.delta.tables import open_table

NOON = dt.datetime(2026, 11, 26, 12, 0, 0, 123456)
SCHEMA = pa.schema(
    [
        ("local", pa.timestamp("us")),  # timestampNtz
        ("instant", pa.timestamp("us", tz="UTC")),
        ("date", pa.date32()),
    ]
)


@pytest.fixture
def in_new_york(monkeypatch: pytest.MonkeyPatch) -> Iterator[None]:
    """This process's local time zone is New York's (UTC-5 in November)."""
    monkeypatch.setenv("TZ", "America/New_York")
    time.tzset()
    yield
    monkeypatch.undo()
    time.tzset()


def test_timestamp_statistics_do_not_move_with_the_machine_s_zone(
    tmp_path: Path, in_new_york: None
) -> None:
    uri = str(tmp_path / "times")
    rows = pa.table(
        {"local": [NOON], "instant": [NOON.replace(tzinfo=dt.UTC)], "date": [NOON.date()]},
        schema=SCHEMA,
    )
    (file,) = write_arrow_files(rows, uri, "date", "batch-1")
    stats = json.loads(file.stats)
    assert stats["minValues"] == {
        "local": "2026-11-26T12:00:00.123",
        "instant": "2026-11-26T12:00:00.123Z",
    }
    assert stats["maxValues"] == {
        "local": "2026-11-26T12:00:00.124",  # widened to the next millisecond: still a bound
        "instant": "2026-11-26T12:00:00.124Z",
    }
    commit_files(uri, [file], schema=SCHEMA, partition_by=["date"], app_id="app", version=1)
    table = open_table(uri)
    added = pa.table(table.get_add_actions(flatten=True)).to_pylist()[0]
    assert added["min.local"] == NOON.replace(microsecond=123000)
    assert added["max.instant"] == NOON.replace(microsecond=124000, tzinfo=dt.UTC)
    # delta-rs skips the files whose statistics exclude a filter's value: not this one
    for column, at in (("local", NOON), ("instant", NOON.replace(tzinfo=dt.UTC))):
        assert table.to_pyarrow_table(filters=[(column, "=", at)]).num_rows == 1
